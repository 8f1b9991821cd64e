#!/usr/bin/env bash
# Starts a one-node Slurm cluster on this machine (munge, slurmctld, slurmd as
# root, no accounting, no cgroups), for trying an array job without a cluster
# and for CI (scripts/slurm/ci.sh). Debian/Ubuntu: apt-get install slurm-wlm munge.
#
#   source <(bash scripts/slurm/one-node.sh start DIR)   # prints: export SLURM_CONF=DIR/slurm.conf
#   sbatch --array=0-3 scripts/slurm/sweep-array.sh sweeps/quickstart.yaml
#   bash scripts/slurm/one-node.sh stop DIR
#
# DIR holds the configuration, state, logs and pid files; the node has as many
# CPUs as this machine and all of its memory.
set -euo pipefail
what=${1:?usage: one-node.sh start|stop DIR}
dir=$(mkdir -p "${2:?usage: one-node.sh start|stop DIR}" && cd "$2" && pwd)
conf=$dir/slurm.conf

if [ "$what" = stop ]; then
    for p in slurmd slurmctld munged; do
        [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
    done
    exit 0
fi
[ "$what" = start ] || { echo "one-node.sh: start or stop, not $what" >&2; exit 2; }

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
cat > "$conf" <<CONF
ClusterName=one-node
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=one Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$conf

# munge: the packaged key if there is one, else a new one in DIR.
key=/etc/munge/munge.key
if [ ! -r "$key" ]; then
    key=$dir/munge/munge.key
    [ -f "$key" ] || mungekey --create --keyfile="$key" 2>/dev/null || dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
    chmod 600 "$key"
fi
sock=/run/munge/munge.socket.2
if ! munge -n >/dev/null 2>&1; then
    mkdir -p /run/munge
    munged --force --key-file="$key" --socket="$sock" --pid-file="$dir/munged.pid" \
        --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
fi

slurmctld -f "$conf"
slurmd -f "$conf"
# Until the node takes jobs (a minute at most).
for _ in $(seq 60); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "export SLURM_CONF=$conf"
        exit 0
    fi
    sleep 1
done
echo "one-node.sh: the node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
exit 1
