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
command -v python3.11 >/dev/null || need+=(python3.11 python3.11-venv python3.11-dev)
python3.11 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3.11-venv)
python3.11 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
  || need+=(python3.11-dev)
# hipcc (Debian 12: ROCm 5.2.3, clang-15) for the real HIP build tests (recipes/hip-demo.toml);
# only where apt-get exists - elsewhere those tests skip, except under CI=true where they fail.
if [ $with_hip = 1 ] && ! command -v hipcc >/dev/null && command -v apt-get >/dev/null; then
  need+=(hipcc)
fi
# Rust (the maturin test of tests/test_backends.py): a rustup install on PATH, or Debian's.
if ! { command -v rustc && command -v cargo; } >/dev/null && command -v apt-get >/dev/null; then
  need+=(rustc cargo)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
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
