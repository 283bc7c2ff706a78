#!/usr/bin/env bash
# Realize the demo and a C++/CMake recipe on a host rocmforge was not made on (the lent GPU
# machine: Ubuntu 24.04, NVIDIA's CUDA .debs under /usr/local, Python 3.12 only), with bwrap;
# realize both again (cache hits) and audit the wheels (verified). Everything it needs travels
# in CARRY (default .carry/, git-ignored), made on the development machine by
#   bash scripts/gpu/host-check.sh --prepare
# (rocmforge's wheel and its dependencies for cp312, pip and uv; the build requirements'
# wheels; Debian 12's bubblewrap and libcap2 .debs). Output: a report on stdout and, with OUT
# set, $OUT/host-check.log. Nothing outside /tmp is changed.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.carry}
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
  set -e
  rm -rf "$CARRY/whl" "$CARRY/reqs"
  mkdir -p "$CARRY/whl" "$CARRY/reqs" "$CARRY/deb"
  .venv/bin/python -m pip wheel -q --no-deps -w "$CARRY/whl" .
  # rocmforge's dependencies for the host's cp312, as pip resolves them from its wheel
  .venv/bin/python -m pip download -q --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$CARRY/whl" "$CARRY"/whl/rocmforge-*.whl uv pip
  # the recipes' build requirements, found by ROCMFORGE_PIP_ARGS there
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d "$CARRY/reqs" \
    setuptools==75.6.0 cmake==3.31.6 ninja==1.11.1.4
  (cd "$CARRY/deb" && apt-get download bubblewrap libcap2 >/dev/null 2>&1)
  du -sh "$CARRY"
  exit 0
fi

log=${OUT:-/tmp}/host-check.log
exec > >(tee "$log") 2>&1
step() { printf '\n== %s\n' "$*"; }
t0=$(date +%s.%N)
elapsed() { python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.1f} s')" "$1"; }

step "host ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
. /etc/os-release && echo "os: $PRETTY_NAME"
echo "kernel: $(uname -r)"; echo "python: $($PY --version 2>&1) at $(command -v "$PY")"
for t in cc gcc g++ git dpkg rpm; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
echo "Python.h: $(ls /usr/include/python3*/Python.h 2>/dev/null | tr '\n' ' ')"
echo "/usr/local: $(ls /usr/local | tr '\n' ' ')"
echo "packages owning /usr/local: $(dpkg -S /usr/local/* 2>/dev/null | cut -d: -f1 | sort -u | head -5 | tr '\n' ' ')"

. scripts/gpu/carried.sh  # bwrap from its .deb, rocmforge from wheels, rf()
rf --version
export ROCMFORGE_PIP_ARGS="--no-index --find-links $PWD/$CARRY/reqs"
work=/tmp/rf-host-check
rm -rf "$work" && mkdir -p "$work" && cp -r examples/demo examples/cxx-many "$work/"
pyxy=$($PY -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
sed -e "s#../examples/demo#demo#" -e "s/^python = .*/python = \"$pyxy\"/" recipes/demo.toml > "$work/demo.toml"
sed -e "s#../examples/cxx-many#cxx-many#" -e "s/^python = .*/python = \"$pyxy\"/" \
  -e 's/^\[build\]/[requirements]\nbuild = ["cmake==3.31.6", "ninja==1.11.1.4"]\n\n[build]/' \
  recipes/cxx-many.toml > "$work/cxx.toml"
export ROCMFORGE_STORE=$work/store

step "doctor"
rf doctor 2>&1 | head -30

for r in demo cxx; do
  step "lock $r"
  rf lock "$work/$r.toml" 2>&1 | tail -3
  step "realize $r (first)"
  t=$(date +%s.%N)
  rf realize "$work/$r.toml" -o "$work/result-$r"; echo "exit $? in $(elapsed "$t")"
  step "realize $r (second: a cache hit)"
  t=$(date +%s.%N)
  rf realize "$work/$r.toml" -v 2>&1 | tail -3; echo "exit ${PIPESTATUS[0]} in $(elapsed "$t")"
  step "audit $r"
  rf audit "$work"/result-"$r"/*.whl; echo "exit $?"
  rf show "$work/$r.toml" 2>&1 | grep -iE "sandbox|masked|packages|python" | head -6
done
step "done in $(elapsed "$t0")"
