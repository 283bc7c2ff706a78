#!/usr/bin/env bash
# Set up a checkout: what `rocmforge realize` needs (git, bubblewrap, a C/C++ compiler, a Python
# 3.11-3.13 with venv and headers), then .venv with rocmforge. Idempotent: a second run only
# checks. Needs root (or sudo) only when a system package is missing (apt-get; elsewhere it says
# what to install). The Python is the one there: the distribution's python3 when it is 3.11-3.13,
# else python3.13, 3.12 or 3.11 on PATH; its -venv/-dev packages only where apt has them.
# --for-tests (scripts/test.sh; --with-hip is the same) also installs what the test suite needs:
# ccache, CMake, Ninja, a registry, Slurm, Debian's hipcc and clang-19, a gfx950 clang (clang-22),
# libyaml, Rust and crates.
set -euo pipefail
for_tests=0
case "${1:-}" in --for-tests | --with-hip) for_tests=1 ;; esac
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
updated=0
apt_update() {
  [ $updated = 1 ] && return 0
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  updated=1
}
# The apt package $1 if this distribution has it (a candidate version), else nothing.
apt_has() {
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}
# The first Python 3.11-3.13: the distribution's python3 first.
pick_python() {
  local py v
  for py in python3 python3.13 python3.12 python3.11; do
    command -v "$py" >/dev/null || continue
    v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    case "$v" in 3.11 | 3.12 | 3.13) echo "$py $v"; return 0 ;; esac
  done
  return 1
}

need=()
command -v git >/dev/null || need+=(git)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
if ! picked=$(pick_python); then
  if ! command -v apt-get >/dev/null; then
    echo "setup: needs Python 3.11, 3.12 or 3.13 (python3 is $(python3 --version 2>&1)); install one" >&2
    exit 1
  fi
  apt_update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  picked=$(pick_python) || { echo "setup: this distribution's python3 is not 3.11-3.13" >&2; exit 1; }
fi
read -r python pyver <<<"$picked"
# venv + ensurepip and Python.h (a C extension builds against it): Debian/Ubuntu split them off.
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null || \
   ! "$python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  if command -v apt-get >/dev/null; then
    apt_has "python$pyver-venv" || apt_update
    for part in venv dev; do
      if apt_has "python$pyver-$part"; then need+=("python$pyver-$part"); else need+=("python3-$part"); fi
    done
  fi
fi
if [ $for_tests = 1 ]; then
  # the compiler cache inside the sandbox (README "Compiler cache"), CMake + Ninja for its C++ example
  command -v ccache >/dev/null || need+=(ccache)
  command -v cmake >/dev/null || need+=(cmake)
  command -v ninja >/dev/null || need+=(ninja-build)
  # headless Chromium: tests/observe/test_build_telemetry.py renders `rocmforge report`'s page
  # offline and looks at its console and a screenshot (docs/telemetry.md)
  if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
    need+=(chromium)
  fi
  # a real OCI registry on loopback for the oci:// binary-cache tests (docs/sharing.md)
  command -v docker-registry >/dev/null || need+=(docker-registry)
  # a private single-node Slurm on loopback for the --executor slurm tests (docs/cluster.md,
  # scripts/slurm-up.sh): slurmctld, slurmd and the clients, and munge for their authentication
  command -v slurmctld >/dev/null || need+=(slurm-wlm)
  command -v munged >/dev/null || need+=(munge)
  # hipcc (Debian 12: ROCm 5.2.3, clang-15) for the real HIP build tests (recipes/hip-demo.toml);
  # only where apt-get exists - elsewhere those tests skip, except under CI=true where they fail.
  if ! command -v hipcc >/dev/null && command -v apt-get >/dev/null; then
    need+=(hipcc)
  fi
  # A plain clang-19 as the HIP compiler (gfx942, which Debian's hipcc cannot target): the compiler,
  # its device linker, bundler and llvm-objcopy, the HIP headers/runtime and the device libraries,
  # whose package name depends on the Debian release (12: rocm-device-libs, 13: rocm-device-libs-17).
  if command -v apt-get >/dev/null; then
    debian=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}")
    case "$debian" in
      13*) devlibs=rocm-device-libs-17 ;;
      *) devlibs=rocm-device-libs ;;
    esac
    for pkg in clang-19 lld-19 clang-tools-19 llvm-19 libamdhip64-dev "$devlibs"; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
    done
  fi
  # libyaml (the C-extension-against-a-Debian-library test of tests/e2e/test_backends.py: PyYAML)
  if [ ! -f /usr/include/yaml.h ] && command -v apt-get >/dev/null; then
    need+=(libyaml-dev)
  fi
  # Rust (the maturin tests of tests/e2e/test_backends.py): Debian's rustc and cargo in /usr/bin, for
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
  # mmdebstrap: tests/e2e/test_second_distro.py makes a Debian 13 root from Debian's mirror with it;
  # rpm and rpmbuild: tests/toolchain/test_rpmdb.py builds real rpms and installs them into throwaway roots
  # (a dpkg machine keeps dpkg's database as its own)
  if command -v apt-get >/dev/null; then
    command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
    command -v rpmbuild >/dev/null || need+=(rpm)
  fi
fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup: missing: ${need[*]}; install them with this system's package manager" >&2
    exit 1
  fi
  echo "setup: installing system packages: ${need[*]}" >&2
  apt_update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The merged device-library directory recipes/hip-gfx942.toml names (adds the gfx942 ISA file).
if [ $for_tests = 1 ] && command -v clang-19 >/dev/null; then
  $sudo mkdir -p /usr/local/lib/rocmforge
  $sudo bash scripts/make-device-libs.sh /usr/local/lib/rocmforge/device-libs clang-19
fi
# A clang that emits gfx950 (MI355X) for tests/toolchain/test_gfx950.py, which clang-19 cannot:
# clang-22 + lld-22 from apt where it has them (Debian 13 main; Debian 12 bookworm-security,
# ~54 MB), else Debian 13's unpacked under /usr/local/lib/rocmforge/trixie-llvm with its own
# loader (~69 MB, sha256-checked); either way /usr/local/lib/rocmforge/clang-gfx950.
if [ $for_tests = 1 ] && command -v apt-get >/dev/null; then
  dpkg-query -W -f='${Status}' clang-22 2>/dev/null | grep -q "ok installed" || apt_update
  $sudo bash scripts/gfx950-clang.sh /usr/local/lib/rocmforge
fi

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# compat mode: a plain .pth entry; the default import-hook finder adds ~18 ms to every start;
# the test tools (pytest, mypy, ruff, uv ...: the [test] extra) only for the tests.
extra=""; [ $for_tests = 1 ] && extra="[test]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".$extra" \
  --config-settings editable_mode=compat
# Byte-compile now: an editable install writes no .pyc when PYTHONDONTWRITEBYTECODE is set, and
# compiling every module on each start would triple a no-op realize.
.venv/bin/python -m compileall -q rocmforge
