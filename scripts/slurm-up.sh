#!/bin/bash
# Single-node Slurm 22.05 (Debian 12) on loopback, no systemd, as root. Usage: slurm-up.sh BASE
# Ports from $SLURMCTLD_PORT/$SLURMD_PORT (tests pick free ones); state, logs and munge key under BASE.
# From ../shared DIST.md (tested as written); the tests and bench/bench_slurm.py start one each.
set -euo pipefail
BASE=$1; T0=$(date +%s.%N)
mkdir -p "$BASE"/{munge,state,spool,log}; chmod 755 "$BASE/munge"
[ -f "$BASE/munge/munge.key" ] || mungekey -c -k "$BASE/munge/munge.key"
chmod 600 "$BASE/munge/munge.key"
munged -f --socket="$BASE/munge/munge.socket" --key-file="$BASE/munge/munge.key" \
  --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" --seed-file="$BASE/munge/munged.seed"
munge -S "$BASE/munge/munge.socket" -n | unmunge -S "$BASE/munge/munge.socket" >/dev/null
MEM=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 512 ))
cat > "$BASE/slurm.conf" <<CONF
ClusterName=rocmforge
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
DependencyParameters=kill_invalid_depend
MinJobAge=3600
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
CommunicationParameters=NoInAddrAny
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$MEM State=UNKNOWN
PartitionName=build Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$BASE/slurm.conf
slurmctld -f "$SLURM_CONF" -c        # -c: start with no jobs (job-id counter is kept in BASE/state)
slurmd -f "$SLURM_CONF" -N localhost
st=
for i in $(seq 1 100); do st=$(sinfo -h -N -n localhost -o %t 2>/dev/null || true); [ "$st" = idle ] && break; sleep 0.1; done
[ "$st" = idle ] || { echo "node not idle ($st)"; tail -n 5 "$BASE"/log/slurm*.log; exit 1; }
echo "slurm up: idle after $(echo "$(date +%s.%N) - $T0" | bc) s; export SLURM_CONF=$SLURM_CONF"
