#!/usr/bin/env bash
# A throw-away two-node Slurm on this machine, for testing scripts/slurm_ftrun.sbatch.
#
#   scripts/slurm_local.sh up DIR     # munged + slurmctld + two `slurmd -N n1|n2`; config, state, logs in DIR
#   export SLURM_CONF=DIR/slurm.conf  # then sbatch/squeue/scancel/sacct... talk to it
#   scripts/slurm_local.sh down DIR   # stops every daemon it started (pids in DIR/*.pid), removes nothing else
#
# Needs root and Debian's slurm-wlm + munge (`apt-get install slurm-wlm munge`; the system's own
# munge/slurm services are not touched: a private munge key and socket live in DIR). Nodes n1 and
# n2 are this host (NodeAddr 127.0.0.1, CPUs = this host's cores each), one partition "cpu"
# (default), proctrack/linuxproc, task/none: no cgroups, no GPUs. The nodes share this
# machine's file system, as a cluster's nodes share theirs.
set -euo pipefail
cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: $0 up|down DIR" >&2; exit 2; }

stop_pidfile() {  # $1: a pid file; SIGTERM, then SIGKILL after 10 s
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

if [ "$cmd" = down ]; then
  # slurmd first (it kills its jobs' steps), then the controller, then munge
  for f in "$DIR"/slurmd.*.pid "$DIR"/slurmctld.pid "$DIR"/munged.pid; do stop_pidfile "$f"; done
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: $0 up|down DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm_local: needs root (slurmd runs jobs as their users)" >&2; exit 2; }
for exe in munged slurmctld slurmd sbatch; do
  command -v "$exe" >/dev/null || { echo "slurm_local: $exe not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
chmod 700 "$DIR"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
chmod 700 "$DIR/munge"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(port); N1_PORT=$(port); N2_PORT=$(port)
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
HOST=$(hostname)

dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.sock" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/seed"

cat > "$DIR/slurm.conf" <<EOF
ClusterName=ftrunlocal
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=600
NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$N1_PORT CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$N2_PORT CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=cpu Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF="$DIR/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N n1
slurmd -f "$SLURM_CONF" -N n2
for _ in $(seq 100); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^idle/ {n++} END {print n+0}')
  [ "$idle" = 2 ] && { echo "slurm_local: up (SLURM_CONF=$SLURM_CONF, nodes n1 n2, $CPUS CPUs each)"; exit 0; }
  sleep 0.2
done
echo "slurm_local: nodes did not come up; logs in $DIR" >&2
sinfo -N >&2 || true
exit 1
