#!/usr/bin/env bash
# The acceptance run's single-node level, measured over NCCL on this machine's GPUs without Slurm: the same
# slurmkit/acceptance/measure.py that `slurmkit acceptance run` submits (there under srun, one task per GPU; here
# under torchrun, one process per GPU), printing the bus-bandwidth sweep (nccl-tests' definitions:
# busbw = algbw x 2(n-1)/n; with a single GPU n = 1 and busbw is 0 by that definition: algbw is the number then).
#
#   bash bench/acceptance_gpu_check.sh                       # every GPU torch sees, NCCL
#   TRANSPORT=gloo NPROC=2 bash bench/acceptance_gpu_check.sh  # the CPU path (no GPU needed)
#   SIZES=1M,16M,256M,1G,4G OUT=/tmp/x bash bench/acceptance_gpu_check.sh
#
# Needs python3 with torch (CUDA build for NCCL); slurmkit is used from this checkout (PYTHONPATH), no Slurm, no
# ClusterShell. Writes $OUT/result.json (default: a new temp dir) and $OUT/measure.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d /tmp/acceptance-gpu-check.XXXXXX)}
mkdir -p "$OUT"
SIZES=${SIZES:-1M,4M,16M,64M,256M,1G}
ITERS=${ITERS:-20}
TRANSPORT=${TRANSPORT:-auto}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "== host $(hostname), $(date -Is)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || echo "(no nvidia-smi)"
read -r CUDA_N TORCH_V < <("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0, torch.__version__)')
echo "== torch $TORCH_V, CUDA devices: $CUDA_N"
if [ "$TRANSPORT" = auto ]; then
  if [ "$CUDA_N" -gt 0 ]; then TRANSPORT=nccl; else TRANSPORT=gloo; fi
fi
if [ "$TRANSPORT" = nccl ]; then
  NPROC=${NPROC:-$CUDA_N}
  [ "$NPROC" -ge 1 ] || { echo "--transport nccl: torch sees no CUDA GPU" >&2; exit 2; }
  [ "$NPROC" -eq 1 ] && echo "note: one GPU: an all-reduce over one rank moves nothing between GPUs (busbw 0 by definition); read algbw"
else
  NPROC=${NPROC:-2}
fi
if command -v all_reduce_perf >/dev/null && [ "$TRANSPORT" != gloo ]; then
  echo "== nccl-tests all_reduce_perf found: the node level's first choice (one process, $NPROC GPU(s))"
  "$PY" slurmkit/acceptance/measure.py --transport nccl-tests --gpus "$NPROC" --sizes "$SIZES" --iters "$ITERS" \
    --out "$OUT/result-nccl-tests.json" 2>&1 | tee "$OUT/measure-nccl-tests.log"
fi
echo "== measure.py over $TRANSPORT, $NPROC rank(s), sizes $SIZES (torchrun --standalone, no Slurm)"
t0=$(date +%s.%N)
"$PY" -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node="$NPROC" \
  slurmkit/acceptance/measure.py --transport "$TRANSPORT" --sizes "$SIZES" --iters "$ITERS" --out "$OUT/result.json" \
  2>&1 | tee "$OUT/measure.log"
echo "== took $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo '?') s; result: $OUT/result.json"
"$PY" - "$OUT/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"transport {r['transport']} ({r.get('device')}, NCCL {r.get('nccl')}, torch {r.get('torch')}), {r['world']} rank(s)")
print(f"peak busbw {r['peak_busbw']:.4g} GB/s; peak algbw {max(p['algbw'] for p in r['points']):.4g} GB/s")
PY
