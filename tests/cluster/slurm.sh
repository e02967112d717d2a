#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests and for trying the SLURM profile.
#
#   tests/cluster/slurm.sh start DIR   write DIR/slurm.conf, start munged, slurmctld and slurmd
#   tests/cluster/slurm.sh stop DIR    stop them again (and leave DIR for its logs)
#   export SLURM_CONF=DIR/slurm.conf   so sbatch, squeue, sacct and the executor find it
#
# Needs Debian's (or your distribution's) slurmctld, slurmd, slurm-client and munge, and root:
# the daemons run as root with everything - key, socket, state, spool, logs - inside DIR.
# There is no accounting database: finished jobs go to a job-completion log (DIR/jobcomp.log,
# read with `sacct --completion`), and MinJobAge keeps finished jobs visible to `squeue`, which
# is how the executor plugin follows them (`--slurm-status-command squeue`).
set -euo pipefail

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 2
}
[ "$#" -eq 2 ] || usage
action=$1
dir=$2

stop_pid() {
    local pidfile=$1
    [ -f "$pidfile" ] || return 0
    local pid
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

case "$action" in
start) ;;
stop)
    stop_pid "$dir/slurmd.pid"
    stop_pid "$dir/slurmctld.pid"
    stop_pid "$dir/munged.pid"
    if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$(cd "$dir" 2>/dev/null && pwd)/slurm.conf" ]; then
        rm -f /etc/slurm/slurm.conf
    fi
    exit 0
    ;;
*) usage ;;
esac

for tool in munged slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "$tool is not installed" >&2
        exit 1
    }
done

mkdir -p "$dir/state" "$dir/spool"
dir=$(cd "$dir" && pwd)
chmod 700 "$dir"
# A start that fails half-way stops what it had started.
trap '"$0" stop "$dir"' ERR

# munge: a fresh key and a daemon of our own on a socket inside DIR.
if [ ! -f "$dir/munge.key" ]; then
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge.key"
fi
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"

# The node as slurmd sees it (CPUs, sockets, cores, memory), without the uptime line.
node=$(slurmd -C | grep '^NodeName=')
name=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$node")

cat >"$dir/slurm.conf" <<EOF
ClusterName=simreport
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SIMREPORT_SLURMCTLD_PORT:-6817}
SlurmdPort=${SIMREPORT_SLURMD_PORT:-6818}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
$node State=UNKNOWN
PartitionName=debug Nodes=$name Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

# The executor plugin's job step drops every SLURM_* variable, SLURM_CONF too, before it calls
# srun inside a job, so srun looks for the default path: link it there unless a real one exists.
default_conf=/etc/slurm/slurm.conf
if [ -L "$default_conf" ] || [ ! -e "$default_conf" ]; then
    mkdir -p "$(dirname "$default_conf")"
    ln -sfn "$dir/slurm.conf" "$default_conf"
else
    echo "note: $default_conf exists; jobs' inner srun calls will read it, not $dir/slurm.conf" >&2
fi

# Without -D both daemons fork and write their pid files.
slurmctld -c
slurmd -c

# Ready when the node accepts jobs.
for _ in $(seq 100); do
    if sinfo --noheader --nodes="$name" --format=%t 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; then
        echo "SLURM is up: export SLURM_CONF=$dir/slurm.conf"
        exit 0
    fi
    sleep 0.2
done
echo "SLURM did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
"$0" stop "$dir"
exit 1
