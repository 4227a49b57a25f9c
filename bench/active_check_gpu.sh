#!/usr/bin/env bash
# `slurmkit check --active` on a real NVIDIA GPU node (issue 23 item 7): the torch GEMM / device-copy stage per GPU
# (and, issue 35 item 5, host<->GPU pinned-copy bandwidth against the PCIe floor and the application clocks)
# judged against the model's floor (active.py DATASHEET x FLOOR_FRACTION) and the node's other GPUs, and dcgmi diag
# -r 1 where dcgmi is installed. Prints the results table; needs only this repository and pip wheels (torch and
# nvidia-ml-py installed, or as wheels under bench/wheels).
#
#   OUT=/some/dir bash bench/active_check_gpu.sh          (run from the repository root; ~1-3 minutes)
#
# $OUT gets env.txt, active-torch.txt/.json (--method torch), active-dcgm.txt/.json (only with dcgmi), table.txt
# (per GPU: TFLOPS, GB/s, the floor, the verdict), unit.txt (the active stage's unit tests), summary.txt.
# Each step has its own timeout; the script goes on after a failing step; exit status = failed steps.
set -u
OUT=${OUT:-$PWD/active-check-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
START=$(date +%s)
FAILED=0
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt" >&2; }
step() {  # step NAME TIMEOUT CMD...: a timeout, the status recorded, never abort
  local name=$1 t=$2; shift 2
  log "start $name"
  timeout --kill-after=5 "$t" "$@"
  local rc=$?
  log "end $name rc=$rc"
  return $rc
}
PY=${PYTHON:-python3}
{
  echo "date: $(date -Is)"; uname -a; echo "python: $($PY --version 2>&1) ($PY)"
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=index,name,pci.bus_id,clocks.max.sm,power.limit,temperature.gpu --format=csv 2>&1
  echo "dcgmi: $(command -v dcgmi || echo none)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# --- slurmkit importable from the source tree; missing modules from bench/wheels (no index: the machine is offline)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing() { $PY -c 'import importlib.util as u, sys
mods = ["click", "yaml", "ClusterShell", "pynvml", "psutil", "jinja2", "torch"]
sys.stdout.write(" ".join(m for m in mods if u.find_spec(m) is None))'; }
MISSING=$(missing)
for W in bench/wheels .whl; do  # carried wheels (.whl: git-ignored, as for bench/gpu_device_check.sh)
  if [ -n "$MISSING" ] && ls "$W"/*.whl >/dev/null 2>&1; then
    log "missing python modules: $MISSING; installing the wheels in $W into /tmp/site"
    timeout 300 $PY -m pip install -q --no-index --no-deps --target /tmp/site "$W"/*.whl >>"$OUT/summary.txt" 2>&1 || true
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
    MISSING=$(missing)
  fi
done
[ -z "$MISSING" ] || log "still missing: $MISSING (torch missing: the torch stage reports SKIP)"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' \
  2>&1 | tee -a "$OUT/env.txt"

NODE=$(hostname -s)
run_active() {  # run_active METHOD EXTRA...: the table to stdout and .txt, the record to .json
  local m=$1; shift
  step "check --active --method $m" 600 $PY -m slurmkit.cli.main check --active --method "$m" --node "$NODE" \
    --state-dir "$OUT/state" --textfile-dir "$OUT/prom" "$@" >"$OUT/active-$m.txt" 2>&1
  local rc=$?
  cat "$OUT/active-$m.txt"
  cp "$OUT/state/$NODE/last-active.json" "$OUT/active-$m.json" 2>/dev/null || true
  # exit 1 = a GPU failed the stage (a finding, not a script failure); anything else is a failed step
  [ "$rc" -le 1 ] || FAILED=$((FAILED + 1))
}
run_active torch --budget "${BUDGET:-90}"
if command -v dcgmi >/dev/null; then
  run_active dcgm --level 1 --budget 300
fi

# --- the per-GPU table: what was measured, the model's floor, the peers' median, the verdict --------------------
$PY - "$OUT/active-torch.json" <<'PYEOF' | tee "$OUT/table.txt"
import json, statistics, sys
from slurmkit.health.active import model_floor
try:
    rec = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no torch record: {exc}")
res = {c["check"]: c for c in rec["checks"]}
names = {g["label"]: g.get("name") for g in rec.get("gpus", [])}
g, b = res.get("active_gemm", {}).get("evidence", {}), res.get("active_membw", {}).get("evidence", {})
gv, bv = g.get("values", {}), b.get("values", {})
print(f"{'GPU':<20} {'MODEL':<24} {'GEMM TFLOPS':>11} {'FLOOR':>7} {'PEERS':>7} {'COPY GB/s':>10} {'FLOOR':>7} {'PEERS':>7}")
for lab in sorted(set(gv) | set(bv) | set(names)):
    fl = model_floor(names.get(lab) or "") or (None, None)
    pg = statistics.median([v for k, v in gv.items() if k != lab]) if len(gv) > 1 else None
    pb = statistics.median([v for k, v in bv.items() if k != lab]) if len(bv) > 1 else None
    f = lambda x, w: f"{x:>{w}.1f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"
    print(f"{lab:<20} {str(names.get(lab))[:24]:<24} {f(gv.get(lab), 11)} {f(fl[0], 7)} {f(pg, 7)} "
          f"{f(bv.get(lab), 10)} {f(fl[1], 7)} {f(pb, 7)}")
for name in ("active_gemm", "active_membw", "active_h2d", "active_app_clocks", "dcgm_diag", "active"):
    if name in res:
        print(f"{name}: {res[name]['status']} - {res[name]['summary']}")
print(f"verdict: {rec['status']}, exit {rec['exit_code']}, {rec['duration_s']:.1f}s; reason: {rec['reason'] or '-'}")
PYEOF

if $PY -c 'import pytest' 2>/dev/null; then
  step "unit tests (active stage)" 300 $PY -m pytest -q -p no:cacheprovider tests/unit/test_health_active.py \
    >"$OUT/unit.txt" 2>&1 || FAILED=$((FAILED + 1))
  tail -3 "$OUT/unit.txt"
else
  log "pytest not installed: unit tests skipped"
fi
log "done: $FAILED failed step(s)"
exit "$FAILED"
