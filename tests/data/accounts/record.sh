#!/bin/bash
# Record `sacctmgr -P -n show` output for tests/unit/test_accounts.py from a lab with accounting:
#   slurmkit lab up --accounting --nodes 2 --gpus-per-node 4 --nodes-per-leaf 2 [--slurm 24.11] --port-base P --dir D
#   eval "$(slurmkit lab env --dir D)"; bash tests/data/accounts/record.sh OUTDIR
# Scene: the inventory applied (clean), then three manual edits (drifted): QOS high GrpTRES=gres/gpu=6, user eve
# added to team-a, team-b's fairshare set to 5. Leaves the lab drifted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?OUTDIR}
mkdir -p "$out"
fmt_q=$(python3 -c 'from slurmkit.accounts.plan import QOS_FORMAT; print(QOS_FORMAT)')
fmt_a=$(python3 -c 'from slurmkit.accounts.plan import ASSOC_FORMAT; print(ASSOC_FORMAT)')
fmt_u=$(python3 -c 'from slurmkit.accounts.plan import USER_FORMAT; print(USER_FORMAT)')
rec() {
  sacctmgr -P -n show qos format="$fmt_q" >"$out/$1_qos.txt"
  sacctmgr -P -n show assoc where cluster=lab format="$fmt_a" >"$out/$1_assoc.txt"
  sacctmgr -P -n show user format="$fmt_u" >"$out/$1_user.txt"
}
slurmkit accounts apply --prune "$here/inventory.yaml" >/dev/null
rec clean
sacctmgr -i modify qos where name=high set GrpTRES=gres/gpu=6 >/dev/null
sacctmgr -i add user eve account=team-a cluster=lab >/dev/null
sacctmgr -i modify account where name=team-b cluster=lab set fairshare=5 >/dev/null
rec drifted
# gpusub's tenant preflight (tests/unit/test_accounts.py): root also in team-a, daemon's 3-GPU job running in team-a
sacctmgr -i add user root account=team-a cluster=lab >/dev/null
(cd /tmp && runuser -u daemon -- sbatch -w node1 --gres=gpu:3 -n1 -o /dev/null --wrap 'sleep 300' >/dev/null)
sleep 3
scontrol -o show assoc_mgr flags=assoc,qos >"$out/assoc_mgr.txt"
sacctmgr -P -n show assoc where users=root cluster=lab format=Account,Partition,QOS,DefaultQOS >"$out/user_assoc_root.txt"
# accounts plan --prune's blocked deletes (squeue_jobs.txt): nobody's job behind daemon's on node1, nobody's held array,
# bin's job on node2 (which of them runs and which pends may differ per release; each has one line)
(cd /tmp && runuser -u nobody -- sbatch -w node1 -n8 --mem=1000 -o /dev/null --wrap 'sleep 100' >/dev/null
 runuser -u nobody -- sbatch -a 1-3 -H -o /dev/null --wrap 'sleep 100' >/dev/null
 runuser -u bin -- sbatch -w node2 -n1 -o /dev/null --wrap 'sleep 100' >/dev/null)
sleep 3
fmt_j=$(python3 -c 'from slurmkit.accounts.plan import JOBS_FORMAT; print(JOBS_FORMAT)')
squeue -h --all -o "$fmt_j" >"$out/squeue_jobs.txt"
scancel -u nobody; scancel -u bin
scancel -u daemon
