#!/usr/bin/env bash
# GPU acceptance on the lent GPU machine (issue 28, point 7): `rocmforge test` of the torch
# installed there (--python), smoke tier and comm tier (world size 1: one GPU), plus a comm
# run with a NIC that does not exist (how a bootstrap failure is reported). Needs what
# `bash scripts/gpu/host-check.sh --prepare` puts in CARRY (default .carry/). Output: a report
# on stdout; with OUT set, $OUT/acceptance.log, the --json reports and the attestations.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.carry}
PY=${PYTHON:-python3}
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python}
out=${OUT:-/tmp}
exec > >(tee "$out/acceptance.log") 2>&1
step() { printf '\n== %s\n' "$*"; }
# NVLink multicast stays off on these machines (../shared/GPU-ACCEPTANCE.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step "host ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
. /etc/os-release && echo "os: $PRETTY_NAME"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
. scripts/gpu/carried.sh
rf --version

timed() { local t; t=$(date +%s.%N); "$@"; local rc=$?
  echo "exit $rc in $(python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.1f} s')" "$t")"; }

step "smoke tier, text (the venv exists: only the checks are timed)"
timed rf test --python "$TORCH_PY" --attestation "$out/smoke.intoto.json"
step "smoke tier again, --json"
rf test --python "$TORCH_PY" --json > "$out/smoke.json"; echo "exit $?"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['result'], r['seconds'], [(c['name'], c['status']) for c in r['checks']])" "$out/smoke.json"

step "comm tier, world size 1, 8 B to 8 GiB"
rf test --python "$TORCH_PY" --tier comm --json --attestation "$out/comm.intoto.json" > "$out/comm.json"
echo "exit $?"
python3 - "$out/comm.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["result"], f"{r['seconds']:.1f} s")
for c in r["checks"]:
    print(f"{c['status']:>8}  {c['name']:<12} {c['seconds']:7.2f} s  {c['detail']}")
    if c["name"] == "sweep":
        for row in c["figures"]["rows"][::4] + c["figures"]["rows"][-1:]:
            print(f"          {row['bytes']:>12} B  {row['time_us']:>12.1f} us  algbw {row['algbw']:8.2f} GB/s  busbw {row['busbw']:.2f}")
PY

step "comm tier with NCCL_SOCKET_IFNAME=nosuch0 (a bootstrap failure)"
NCCL_SOCKET_IFNAME=nosuch0 NCCL_DEBUG=INFO rf test --python "$TORCH_PY" --tier comm --max-bytes 1048576 --json > "$out/comm-nosuch0.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['result']); [print(f\"{c['status']:>8}  {c['name']:<12} {c['detail']}\") for c in r['checks']]; print(open(r['log']).read()[-1500:])" "$out/comm-nosuch0.json"
step "a hung check: --timeout import=1"
timed rf test --python "$TORCH_PY" --timeout import=1

# rocmforge test TARGET: the demo (a C extension) realized here, tested over the node's torch
# with its [test] script (scripts/gpu/demo_gpu_check.py: GPU work through that torch) and the
# smoke tier; the statements kept with the entry, then show and audit read them back.
export ROCMFORGE_PIP_ARGS="--no-index --find-links $PWD/$CARRY/reqs"
work=/tmp/rf-accept
rm -rf "$work" && mkdir -p "$work" && cp -r examples/demo "$work/" && cp scripts/gpu/demo_gpu_check.py "$work/"
pyxy=$($PY -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
sed -e "s#../examples/demo#demo#" -e "s/^python = .*/python = \"$pyxy\"/" recipes/demo.toml > "$work/demo.toml"
printf '\n[test]\nscript = "demo_gpu_check.py"\n' >> "$work/demo.toml"
export ROCMFORGE_STORE=$work/store
step "realize the demo with a [test] table"
rf lock "$work/demo.toml" 2>&1 | tail -1
timed rf realize "$work/demo.toml" -o "$work/result"
step "rocmforge test RECIPE --over the node's torch (the [test] script), text"
timed rf test "$work/demo.toml" --over "$TORCH_PY"
step "rocmforge test RECIPE --over ... --tier smoke --json (the smoke tier, then the script; trees warm)"
t=$(date +%s.%N)
rf test "$work/demo.toml" --over "$TORCH_PY" --tier smoke --json > "$out/target.json"; echo "exit $?"
python3 - "$out/target.json" "$t" <<'PY'
import json, sys, time
r = json.load(open(sys.argv[1]))
print(f"whole command {time.time() - float(sys.argv[2]):.1f} s; install {r['install_seconds']:.3f} s, {r['installed_files']} files")
for run in r["runs"]:
    print(run["tier"], run["result"], f"{run['seconds']:.1f} s", "kept:", run["kept"])
    for c in run["checks"]:
        print(f"  {c['status']:>8}  {c['name']:<13} {c['seconds']:7.2f} s  {c['detail']}")
PY
cp "$work"/store/accepted/*/*.json "$out/" 2>/dev/null
step "show and audit read the runs back"
rf show "$work/result" | grep -A1 "test run"
rf audit "$work"/result/*.whl | grep -E "VERIFIED|test run"
step "done"
