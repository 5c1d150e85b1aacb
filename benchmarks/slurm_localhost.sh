#!/usr/bin/env bash
# A real single-node SLURM (slurmctld + slurmd, munge) on this machine, for checking
# hydra/launcher=slurm end to end without a cluster. Needs root and Debian/Ubuntu apt.
#   sudo bash benchmarks/slurm_localhost.sh          # install if needed, (re)start, show sinfo
#   sudo bash benchmarks/slurm_localhost.sh stop
# Then e.g.: python benchmarks/launchers.py compare --launchers slurm
# The node offers this machine's CPUs and no GPU; partition "debug".
set -euo pipefail
CONF_DIR=/etc/slurm
NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

stop() {
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
}
if [[ "${1:-start}" == "stop" ]]; then stop; exit 0; fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge
fi
stop
grep -q "[[:space:]]$NODE\b" /etc/hosts || echo "127.0.0.1 $NODE" >> /etc/hosts

mkdir -p /etc/munge /var/log/munge /var/lib/munge /run/munge
[[ -s /etc/munge/munge.key ]] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
chown -R munge:munge /etc/munge /var/log/munge /var/lib/munge /run/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
sudo -u munge /usr/sbin/munged --force 2>/dev/null || runuser -u munge -- /usr/sbin/munged --force

mkdir -p "$CONF_DIR" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
cat > "$CONF_DIR/slurm.conf" <<CONF
ClusterName=localhost
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld
slurmd
for _ in $(seq 30); do
  if sinfo -h -o "%T" 2>/dev/null | grep -qE "idle|mix|alloc"; then break; fi
  sleep 1
done
scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true
sinfo
srun -N1 -n1 hostname
