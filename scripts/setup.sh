#!/usr/bin/env bash
# Set up a development checkout on a fresh Debian machine: system tools, then .venv with rocmforge.
# Idempotent: a second run only checks. Needs root (or sudo) only when a system tool is missing.
# --with-hip also installs Debian's hipcc (ROCm 5.2, ~1 min) for the HIP tests; the demo needs none.
set -euo pipefail
with_hip=0
[ "${1:-}" = "--with-hip" ] && with_hip=1
cd "$(dirname "$0")/.."

need=()
command -v git >/dev/null || need+=(git)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
# the compiler cache inside the sandbox (README "Compiler cache"), CMake + Ninja for its C++ example
command -v ccache >/dev/null || need+=(ccache)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
# a real OCI registry on loopback for the oci:// binary-cache tests (docs/sharing.md)
command -v docker-registry >/dev/null || need+=(docker-registry)
# a private single-node Slurm on loopback for the --executor slurm tests (docs/cluster.md,
# scripts/slurm-up.sh): slurmctld, slurmd and the clients, and munge for their authentication
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
command -v python3.11 >/dev/null || need+=(python3.11 python3.11-venv python3.11-dev)
python3.11 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3.11-venv)
python3.11 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
  || need+=(python3.11-dev)
# hipcc (Debian 12: ROCm 5.2.3, clang-15) for the real HIP build tests (recipes/hip-demo.toml);
# only where apt-get exists - elsewhere those tests skip, except under CI=true where they fail.
if [ $with_hip = 1 ] && ! command -v hipcc >/dev/null && command -v apt-get >/dev/null; then
  need+=(hipcc)
fi
# A plain clang-19 as the HIP compiler (gfx942, which Debian's hipcc cannot target): the compiler,
# its device linker, bundler and llvm-objcopy, the HIP headers/runtime and the device libraries,
# whose package name depends on the Debian release (12: rocm-device-libs, 13: rocm-device-libs-17).
if [ $with_hip = 1 ] && command -v apt-get >/dev/null; then
  debian=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}")
  case "$debian" in
    13*) devlibs=rocm-device-libs-17 ;;
    *) devlibs=rocm-device-libs ;;
  esac
  for pkg in clang-19 lld-19 clang-tools-19 llvm-19 libamdhip64-dev "$devlibs"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
  done
fi
# rpm and rpmbuild (tests/test_rpmdb.py: real rpms built and installed into throwaway roots, the
# system manifest read from rpm's database); a dpkg machine keeps dpkg's database as its own
if ! command -v rpmbuild >/dev/null && command -v apt-get >/dev/null; then
  need+=(rpm)
fi
# libyaml (the C-extension-against-a-Debian-library test of tests/test_backends.py: PyYAML)
if [ ! -f /usr/include/yaml.h ] && command -v apt-get >/dev/null; then
  need+=(libyaml-dev)
fi
# Rust (the maturin tests of tests/test_backends.py): Debian's rustc and cargo in /usr/bin, for
# [toolchain] rust = "debian" and, without rustup, for rust = "host" too.
if command -v apt-get >/dev/null; then
  for pkg in rustc cargo; do [ -x "/usr/bin/$pkg" ] || need+=("$pkg"); done
fi
# Debian's PyO3 and aho-corasick crates (/usr/share/cargo/registry): the crates of the real
# ahocorasick_rs 0.12.3 sdist, which needs pyo3 0.17 and aho-corasick 0.7 - what Debian 12 has;
# elsewhere (Debian 13: newer crates) nothing is installed and that test skips, saying why.
if command -v apt-get >/dev/null && ! ls -d /usr/share/cargo/registry/pyo3-0.17.* >/dev/null 2>&1; then
  case "$(apt-cache policy librust-pyo3-dev 2>/dev/null | awk '/Candidate:/ {print $2}')" in
    0.17.*) need+=(librust-pyo3-dev librust-aho-corasick-dev) ;;
  esac
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The merged device-library directory recipes/hip-gfx942.toml names (adds the gfx942 ISA file).
if [ $with_hip = 1 ] && command -v clang-19 >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo mkdir -p /usr/local/lib/rocmforge
  $sudo bash scripts/make-device-libs.sh /usr/local/lib/rocmforge/device-libs clang-19
fi

if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv
fi
# compat mode: a plain .pth entry; the default import-hook finder adds ~18 ms to every start
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' \
  --config-settings editable_mode=compat
# Byte-compile now: an editable install writes no .pyc when PYTHONDONTWRITEBYTECODE is set, and
# compiling every module on each start would triple a no-op realize.
.venv/bin/python -m compileall -q rocmforge
