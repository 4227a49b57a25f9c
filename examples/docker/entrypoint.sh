#!/bin/sh
# One entrypoint, one role per container: config | slurmdbd | slurmctld | slurmd.
set -eu
role="$1"
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
if [ "$role" = config ]; then
  # generate slurm.conf, gres.conf, cgroup.conf, topology.conf from the inventory, validated before writing
  slurmkit conf generate /inventory/compose.yaml -o /etc/slurm
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; chmod 0400 /etc/munge/munge.key; }
  cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=slurmdbd
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=mariadb
StorageUser=slurm
StoragePass=${MYSQL_PASSWORD:-slurm}
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
  chmod 0600 /etc/slurm/slurmdbd.conf
  exit 0
fi
munged --force
case "$role" in
  slurmdbd) exec slurmdbd -D ;;
  slurmctld) exec slurmctld -D -i ;;
  slurmd) exec slurmd -D -N "$(hostname)" ;;
  *) echo "unknown role $role" >&2; exit 2 ;;
esac
