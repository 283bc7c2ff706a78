#!/usr/bin/env bash
# Telemetry's cost on a quiet many-core host (the lent GPU machine: 16 cores, Ubuntu 24.04):
# bench/bench_telemetry.py with CMake and Ninja from PyPI wheels (the host has neither), every
# core a ninja job; then what cgroup v2 this host offers a build (read only, nothing created
# outside a throwaway child of our own cgroup). Needs CARRY made by
#   bash scripts/gpu/host-check.sh --prepare
# Output on stdout and, with OUT set, $OUT/bench-telemetry.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.carry}
PY=${PYTHON:-python3}
log=${OUT:-/tmp}/bench-telemetry.log
exec > >(tee "$log") 2>&1
step() { printf '\n== %s\n' "$*"; }
. scripts/gpu/carried.sh
export ROCMFORGE_PIP_ARGS="--no-index --find-links $PWD/$CARRY/reqs"
export ROCMFORGE_STORE=/tmp/rf-bench-store
step "cgroup"
cat /proc/self/cgroup
mount | grep -E "cgroup" | head -5
own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
echo "own v2 cgroup: ${own:-none}; controllers: $(cat /sys/fs/cgroup$own/cgroup.controllers 2>&1)"
echo "subtree_control: $(cat /sys/fs/cgroup$own/cgroup.subtree_control 2>&1)"
probe=/sys/fs/cgroup$own/rocmforge-probe-$$
if mkdir "$probe" 2>/dev/null; then
  echo "child cgroup: created; files: $(ls "$probe" | grep -E '^memory\.(peak|current|max)$' | tr '\n' ' ')"
  rmdir "$probe"
else
  echo "child cgroup: cannot create ($probe)"
fi
step "bench (cores: $(nproc))"
$PY bench/bench_telemetry.py --tus "${TUS:-300}" --rounds "${ROUNDS:-3}" --jobs "$(nproc)" --pypi-tools
