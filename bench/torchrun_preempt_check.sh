#!/usr/bin/env bash
# gpusub's torchrun preemption chain against whatever torch `python3` has, without Slurm (~90 s):
#
#   bash bench/torchrun_preempt_check.sh          (any machine with torch; no GPU needed)
#
# Two workers start under torchrun; SIGUSR2 then goes once to every process of the "step" (the agent and its
# workers), as slurmstepd's proctrack does. Each worker "checkpoints" for 40 s (longer than torchrun's default 30 s
# shutdown) and prints how many SIGUSR2 it got.
#   new: gpusub's agent (slurmkit.jobs.torchcompat.AGENT: a no-op SIGUSR2 handler, gpusub's rendezvous backend
#        registered (unused here: --standalone is c10d), then torchrun's main()):
#        expected rc=0, each rank signals=1, saved_s=40
#   old: torchrun --signals-to-handle=...,SIGUSR2 (gpusub before issue 10): the agent forwards SIGUSR2 again
#        and SIGKILLs the workers after 30 s (rc=1, SignalException, no rank line)
# It also prints which of --signals-to-handle / --shutdown-timeout this torchrun knows (slurmkit/jobs/torchcompat.py).
set -u
W=$(mktemp -d)
cat >"$W/w.py" <<'EOF'
import os,signal,sys,time,json
got=[]
signal.signal(signal.SIGUSR2, lambda s,f: got.append(1))
r=os.environ["RANK"]; open(os.path.join(sys.argv[1], f"up{r}"),"w").close()
while not got: time.sleep(0.05)
t=time.time(); time.sleep(40)
print(json.dumps({"rank":r,"signals":len(got),"saved_s":round(time.time()-t)}),flush=True)
EOF
# the agent exactly as gpusub renders it, from this checkout (python3 needs no slurmkit dependency for this module)
A=$(cd "$(dirname "$0")/.." && python3 -c 'import sys; sys.path.insert(0, "."); from slurmkit.jobs.torchcompat import AGENT; print(AGENT)')
python3 -c 'import torch; print("torch", torch.__version__)'
echo "torchrun knows: $(python3 -m torch.distributed.run --help | grep -o -E -- '--signals-to-handle|--shutdown-timeout' | sort -u | tr '\n' ' ')"
go() {
  local tag=$1 a rc t0; shift; mkdir -p "$W/$tag"; t0=$(date +%s)
  "$@" --standalone --nproc-per-node=2 --max-restarts=0 "$W/w.py" "$W/$tag" >"$W/$tag.out" 2>&1 &
  a=$!
  while [ ! -e "$W/$tag/up0" ] || [ ! -e "$W/$tag/up1" ]; do sleep 0.2; done
  sleep 1
  for p in $a $(pgrep -P $a); do kill -USR2 "$p"; done  # like slurmstepd: every process of the step, once
  wait $a; rc=$?
  echo "== $tag rc=$rc elapsed=$(( $(date +%s) - t0 ))s"
  grep -E '^\{|SignalException|forcefully' "$W/$tag.out" | head -6
}
go new python3 -c "$A"
go old python3 -m torch.distributed.run --signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2
rm -rf "$W"
