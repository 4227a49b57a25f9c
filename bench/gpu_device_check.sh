#!/usr/bin/env bash
# slurmkit health hooks on a real NVIDIA GPU: every check through real NVML, prolog timings next to a shell prolog
# that calls nvidia-smi once per check, and the real NVML answers recorded as a fake-NVML fixture.
#
#   OUT=/some/dir bash bench/gpu_device_check.sh        (run from the repository root; ~1-3 minutes)
#
# Everything lands in $OUT: env.txt, check.txt/check.json (no inventory), check-inv.json (with an inventory that
# expects this machine's GPUs), healthy-<gpu>x<N>.json (the fixture), prolog_bench.txt/.json, unit.txt, summary.txt.
# Each step has its own timeout and the script goes on after a failing step; the exit status counts failed steps.
set -u
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
START=$(date +%s)
FAILED=0
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt" >&2; }
step() {  # step NAME TIMEOUT CMD...: run with a timeout, record the status, never abort the script
  local name=$1 t=$2; shift 2
  log "start $name"
  timeout --kill-after=5 "$t" "$@"
  local rc=$?
  log "end $name rc=$rc"
  [ "$rc" -eq 0 ] || FAILED=$((FAILED + 1))
  return 0
}

PY=${PYTHON:-python3}
{
  echo "date: $(date -Is)"; uname -a; echo "python: $($PY --version 2>&1) ($PY)"
  nvidia-smi -L 2>&1; nvidia-smi --query-gpu=name,driver_version,persistence_mode,mig.mode.current,ecc.mode.current \
    --format=csv 2>&1
} >"$OUT/env.txt" 2>&1

# --- make slurmkit importable: an editable install if pip can, else the source tree on PYTHONPATH --------------
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing() { $PY - <<'EOF'
import importlib, sys
mods = ["click", "yaml", "ClusterShell", "pynvml", "psutil", "jinja2"]
sys.stdout.write(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
EOF
}
MISSING=$(missing)
if [ -n "$MISSING" ]; then
  log "missing python modules: $MISSING; trying local wheels (bench/wheels), then the index"
  if [ -d bench/wheels ]; then
    timeout 120 $PY -m pip install -q --no-index --find-links bench/wheels nvidia-ml-py click pyyaml ClusterShell \
      psutil jinja2 >>"$OUT/summary.txt" 2>&1 || true
  fi
  MISSING=$(missing)
  if [ -n "$MISSING" ]; then
    timeout 120 $PY -m pip install -q -e . >>"$OUT/summary.txt" 2>&1 || true
    MISSING=$(missing)
  fi
fi
if ! $PY -c 'import pynvml' 2>/dev/null; then
  log "FATAL: pynvml (nvidia-ml-py) is not importable; see bench/README.md 'Health hooks' for the wheel"
  exit 3
fi
[ -z "$MISSING" ] || log "still missing: $MISSING (the hooks need click, yaml, ClusterShell; pynvml found)"
SK() { $PY -m slurmkit.cli.main "$@"; }
unset SLURMKIT_FAKE_NVML

# --- 1. every check against real NVML -------------------------------------------------------------------------
export SLURMKIT_STATE_DIR="$OUT/state"
step "check-table" 60 bash -c "$(declare -f SK); PY=$PY; SK check >'$OUT/check.txt' 2>&1; rc=\$?; cat '$OUT/check.txt'; [ \$rc -le 1 ]"
step "check-json" 60 bash -c "$(declare -f SK); PY=$PY; SK check --json >'$OUT/check.json' 2>'$OUT/check.err'; [ \$? -le 1 ]"

# an inventory that expects exactly what this machine has, so gpu_count/type/nvlink/mig are judged too
$PY - "$OUT/inventory.yaml" <<'EOF' || log "could not write the inventory"
import socket, sys, pynvml, yaml
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
name = name.decode() if isinstance(name, bytes) else name
gtype = (name.replace("NVIDIA", "").split() or ["gpu"])[0].lower()
host = socket.gethostname().split(".")[0]
inv = {"cluster": "gpucheck", "slurm_version": "24.05", "controller": {"hosts": ["localhost"]},
       "node_groups": [{"name": "gpu", "hosts": host, "cpu": {"sockets": 1, "cores_per_socket": 1},
                        "memory_mb": 1024, "gpus": {"type": gtype, "count": n,
                        "files": f"/dev/nvidia[0-{n - 1}]" if n > 1 else "/dev/nvidia0",
                        "links": "none" if n == 1 else "nvlink"}}],
       "hooks": {"checks": {"driver": {"version": pynvml.nvmlSystemGetDriverVersion()}}}}
yaml.safe_dump(inv, open(sys.argv[1], "w"))
EOF
step "check-inventory" 60 bash -c "$(declare -f SK); PY=$PY; SK check --json --inventory '$OUT/inventory.yaml' >'$OUT/check-inv.json' 2>>'$OUT/check.err'; [ \$? -le 1 ]"

# --- 2. the real NVML answers as a fixture (a healthy H200 if this is one) -------------------------------------
FIX_NAME=$($PY - <<'EOF'
import pynvml
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
name = name.decode() if isinstance(name, bytes) else name
print(f"healthy-{(name.replace('NVIDIA', '').split() or ['gpu'])[0].lower()}x{n}.json")
EOF
)
step "record-fixture" 60 bash -c "$(declare -f SK); PY=$PY; SK check --record-fixture '$OUT/${FIX_NAME:-healthy-gpu.json}'"
# the recording must give the same verdicts through the fake NVML as the real run did
step "fixture-replay" 60 bash -c "$(declare -f SK); PY=$PY; SLURMKIT_FAKE_NVML='$OUT/${FIX_NAME:-healthy-gpu.json}' SK check --json --inventory '$OUT/inventory.yaml' >'$OUT/check-replay.json'; [ \$? -le 1 ]"
$PY - "$OUT/check-inv.json" "$OUT/check-replay.json" >>"$OUT/summary.txt" 2>&1 <<'EOF' || FAILED=$((FAILED + 1))
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
va = {c["check"]: c["status"] for c in a["checks"]}
vb = {c["check"]: c["status"] for c in b["checks"]}
diff = {k: (va[k], vb.get(k)) for k in va if k not in ("xid", "slurmd_oom", "memory", "disk_space") and va[k] != vb.get(k)}
print("replay verdicts match the real run" if not diff else f"replay differs: {diff}")
sys.exit(1 if diff else 0)
EOF

# --- 3. prolog timing: real NVML vs nvidia-smi once per check (+ the fake-NVML hang cases: the budget holds) -----
step "prolog-bench-real" 150 bash -c "set -o pipefail; $PY bench/prolog_bench.py --real --runs 50 --hang-runs 2 --cap-s 45 --json '$OUT/prolog_bench.json' | tee '$OUT/prolog_bench.txt'"

# --- 4. the health unit tests on this machine (fake NVML; fast) ---------------------------------------------------
if $PY -c 'import pytest' 2>/dev/null; then
  step "unit-tests" 90 bash -c "$PY -m pytest -q -p no:cacheprovider tests/unit/test_health_checks.py tests/unit/test_health_hooks.py >'$OUT/unit.txt' 2>&1; rc=\$?; tail -3 '$OUT/unit.txt'; exit \$rc"
else
  log "pytest not installed: unit tests skipped"
fi

log "done in $(( $(date +%s) - START ))s, failed steps: $FAILED"
exit "$FAILED"
