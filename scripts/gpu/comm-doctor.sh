#!/usr/bin/env bash
# `rocmforge doctor --comm` on the lent GPU machine (issue 28, point 7): the static part, the
# timed init_process_group + all_reduce through the node's torch (bwrap, then no sandbox), a
# NIC that does not exist, and a timeout too short for the run. Needs what
# `bash scripts/gpu/host-check.sh --prepare` puts in CARRY (default .carry/). Output: a report
# on stdout; with OUT set, $OUT/comm-doctor.log and the --json report.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.carry}
PY=${PYTHON:-python3}
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python}
out=${OUT:-/tmp}
exec > >(tee "$out/comm-doctor.log") 2>&1
step() { printf '\n== %s\n' "$*"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step "host ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
. /etc/os-release && echo "os: $PRETTY_NAME"
. scripts/gpu/carried.sh
timed() { local t; t=$(date +%s.%N); "$@"; local rc=$?
  echo "exit $rc in $(python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.1f} s')" "$t")"; }

step "doctor --comm (static)"
timed rf doctor --comm
step "doctor --comm --python (timed run in bwrap)"
timed rf doctor --comm --python "$TORCH_PY"
step "doctor --comm --python --sandbox none --json"
rf doctor --comm --python "$TORCH_PY" --sandbox none --json > "$out/comm-doctor.json"; echo "exit $?"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['run']; print({k: t.get(k) for k in ('stage','status','seconds','bootstrap','network','nccl_version','detail')}); print('advice:', r.get('advice'))" "$out/comm-doctor.json"
step "NCCL_SOCKET_IFNAME=nosuch0"
NCCL_SOCKET_IFNAME=nosuch0 timed rf doctor --comm --python "$TORCH_PY"
step "--timeout 2"
timed rf doctor --comm --python "$TORCH_PY" --timeout 2
step "done"
