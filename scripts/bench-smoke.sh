#!/usr/bin/env bash
# Smoke-run the side-by-side benchmarks in their --quick mode (a few runs, small inputs): they
# must run to the end; their figures mean nothing at this size. The Nix and uv anchors are
# skipped, each with a line saying so, where nix or uv is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in bench_install bench_vs_nix bench_list bench_rehash bench_noop_scale bench_cache bench_slurm; do
  echo "== bench/$b.py --quick"
  .venv/bin/python "bench/$b.py" --quick
done
