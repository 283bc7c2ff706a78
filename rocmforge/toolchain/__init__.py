"""Toolchains: the probe, the system and ROCm fingerprints, offload bundles, machine facts."""
