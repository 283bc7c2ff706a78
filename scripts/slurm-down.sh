#!/bin/bash
# Stop what slurm-up.sh BASE started: cancel every job, then the daemons by pid file (never by name).
BASE=$1
stop() {  # SIGTERM all given pidfiles at once, wait up to 10 s, then SIGKILL
  local pids=() f p
  for f in "$@"; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 1 200); do
    local alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.05
  done
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && { echo "SIGKILL $p"; kill -KILL "$p"; }; done
  rm -f "$@"
}
export SLURM_CONF=$BASE/slurm.conf
# 1) cancel all jobs first: slurmstepd and the job's processes survive a slurmd shutdown otherwise
if [ -f "$BASE/slurmctld.pid" ] && kill -0 "$(cat "$BASE/slurmctld.pid")" 2>/dev/null; then
  ids=$(squeue -h -o %A 2>/dev/null); [ -n "$ids" ] && scancel --full $ids
  for i in $(seq 1 200); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.05; done
fi
stop "$BASE/slurmd.pid" "$BASE/slurmctld.pid"   # 2) both daemons in parallel
stop "$BASE/munge/munged.pid"                   # 3) munged last
