#!/usr/bin/env bash
# The demo (README's first command), on a fresh Debian 12 machine as root:
# installs what it needs, brings up a real 8-node Slurm lab on this machine, submits a 4-node PyTorch DDP job
# with gpusub (torchrun, c10d rendezvous, gloo on the CPU), follows it to the end and shows each node's output.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup-env.sh

LAB_DIR=${SLURMKIT_LAB_DIR:-/tmp/slurmkit-lab}
export SLURMKIT_LAB_DIR="$LAB_DIR"
if slurmkit lab status --dir "$LAB_DIR" | grep -q '^lab: up'; then
  echo "== reusing the lab already up in $LAB_DIR"
else
  echo "== slurmkit lab up"
  slurmkit lab up --dir "$LAB_DIR"
fi
eval "$(slurmkit lab env --dir "$LAB_DIR")"
echo
echo "== sinfo"
sinfo -N -o '%N %T %G'
RUNS=$(mktemp -d /tmp/slurmkit-demo.XXXXXX)
chmod 755 "$RUNS"
export DDP_RESULT_DIR="$RUNS/results"
mkdir -p "$DDP_RESULT_DIR"
chmod 777 "$DDP_RESULT_DIR"
echo
echo "== gpusub examples/train_ddp.py --nodes 4 --gpus-per-node 2 --dry-run   (what would be submitted)"
gpusub examples/train_ddp.py --nodes 4 --gpus-per-node 2 --run-dir "$RUNS/dry" --dry-run --env DDP_RESULT_DIR="$DDP_RESULT_DIR" -- --lr 3e-4 | sed -n '1,40p'
echo "   ..."
echo
echo "== gpusub examples/train_ddp.py --nodes 4 --gpus-per-node 2 --follow"
# torch's shutdown chatter is quietened for the demo: every lab node shares 127.0.0.1, and the agents that leave the
# rendezvous after the store's host has closed it print C++ stack traces although the job succeeded
gpusub examples/train_ddp.py --nodes 4 --gpus-per-node 2 --run-dir "$RUNS/run" --follow --env DDP_RESULT_DIR="$DDP_RESULT_DIR" \
  --env TORCH_CPP_LOG_LEVEL=ERROR --env LOGLEVEL=ERROR -- --lr 3e-4
echo
echo "== each rank's result (one file per rank, written on its node)"
"$PWD/.venv/bin/python" - "$DDP_RESULT_DIR" <<'PY'
import json, pathlib, sys
rows = sorted((json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).glob("rank*.json")), key=lambda r: r["rank"])
print(f"{'rank':>4} {'node':<8} {'local':>5} {'world':>5} {'sum':>5}  args")
for r in rows:
    print(f"{r['rank']:>4} {r['host']:<8} {r['local_rank']:>5} {r['world_size']:>5} {r['sum']:>5g}  {' '.join(r['args'])}")
nodes = sorted({r["host"] for r in rows})
ok = len(rows) == 8 and all(r["sum"] == r["expected"] for r in rows) and len(nodes) == 4
print(f"{len(rows)} ranks on {len(nodes)} nodes {nodes}: {'OK' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
echo
echo "The lab is still up: try 'eval \"\$(slurmkit lab env)\"; sinfo', 'gpusub --help'; stop it with: slurmkit lab down --dir $LAB_DIR"
