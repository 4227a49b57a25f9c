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
A='import signal, sys
keep = (signal.SIGUSR2, signal.SIGTERM); real = signal.signal
for s in keep: real(s, lambda *_: None)
signal.signal = lambda s, h: signal.getsignal(s) if s in keep else real(s, h)
import os, socket, time
from datetime import timedelta
from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic import rendezvous as rdzv
class GpusubRendezvous(rdzv.RendezvousHandler):
    def __init__(self, params):
        node, world = os.environ.get("SLURM_NODEID", ""), params.max_nodes
        if not (node.isascii() and node.isdigit() and int(node) < world):
            raise SystemExit(f"gpusub rendezvous: SLURM_NODEID={node!r} is not a node index below --nnodes={world} (the agent runs as a task of the step gpusub started)")
        addr, _, port = params.endpoint.rpartition(":")
        if not (addr and port.isascii() and port.isdigit()):
            raise SystemExit(f"gpusub rendezvous: --rdzv-endpoint={params.endpoint!r} is not HOST:PORT")
        self.rank, self.world, self.run_id, self.addr, self.port = int(node), world, params.run_id, addr, int(port)
        self.host = bool(params.get_as_bool("is_host", False))
        self.timeout = timedelta(seconds=params.get_as_int("timeout", 900))
        self.tcp = None
    def get_backend(self): return "gpusub"
    @property
    def use_agent_store(self): return True
    def listening(self):
        end = time.monotonic() + self.timeout.total_seconds()
        while True:
            try: return socket.create_connection((self.addr, self.port), timeout=5).close()
            except OSError as e:
                if time.monotonic() > end: raise SystemExit(f"gpusub rendezvous: nothing listens on {self.addr}:{self.port} after {self.timeout.total_seconds():.0f} s (the store on the first node): {e}")
            time.sleep(0.05)
    def next_rendezvous(self):
        if self.tcp is None:
            if not self.host: self.listening()
            self.tcp = TCPStore(self.addr, self.port, is_master=self.host, timeout=self.timeout, multi_tenant=True)
        store = PrefixStore(self.run_id, self.tcp)
        if not hasattr(rdzv, "RendezvousInfo"): return store, self.rank, self.world
        return rdzv.RendezvousInfo(store, self.rank, self.world, rdzv.RendezvousStoreInfo(self.addr, self.port))
    def is_closed(self): return False
    def set_closed(self): pass
    def num_nodes_waiting(self): return 0
    def get_run_id(self): return self.run_id
    def shutdown(self): return True
rdzv.rendezvous_handler_registry.register("gpusub", GpusubRendezvous)
from torch.distributed.run import main; sys.argv[0] = "torchrun"; sys.exit(main())'
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
