#!/usr/bin/env bash
# slurmkit health hooks on a real NVIDIA GPU: every check through real NVML, prolog timings next to a shell prolog
# that calls nvidia-smi once per check, and the real NVML answers recorded as a fake-NVML fixture.
#
#   OUT=/some/dir bash bench/gpu_device_check.sh        (run from the repository root; ~1-3 minutes)
#
# Everything lands in $OUT: env.txt, check.txt/check.json (no inventory), check-inv.json (with an inventory that
# expects this machine's GPUs), healthy-<gpu>x<N>.json (the fixture), hookstate/ + prom/ (two real prologs: the
# second judges NVLink/PCIe counter growth), new-checks.txt (every check's status and time, nvml_init_s, the new
# checks' evidence), prolog_bench.txt/.json, unit.txt, summary.txt.
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
# GPU_CHECK_FAKE=<fixture.json>: a dry run of this script on a machine without a GPU (the fake NVML stands in
# everywhere, prolog_bench runs without --real); the real run leaves it unset.
if [ -n "${GPU_CHECK_FAKE:-}" ]; then
  export SLURMKIT_FAKE_NVML="$GPU_CHECK_FAKE"
  log "DRY RUN: fake NVML from $GPU_CHECK_FAKE"
else
  unset SLURMKIT_FAKE_NVML
fi
# the NVML module for the helper snippets below: pynvml itself, or the fake in a dry run
export NVPY='import os
from slurmkit.health.nvmlworker import load_nvml
nv = load_nvml(os.environ.get("SLURMKIT_FAKE_NVML") or None, None)
nv.nvmlInit()
def _s(v):
    return v.decode() if isinstance(v, bytes) else v
'

# --- 1. every check against real NVML -------------------------------------------------------------------------
export SLURMKIT_STATE_DIR="$OUT/state"
step "check-table" 60 bash -c "$(declare -f SK); PY=$PY; SK check >'$OUT/check.txt' 2>&1; rc=\$?; cat '$OUT/check.txt'; [ \$rc -le 1 ]"
step "check-json" 60 bash -c "$(declare -f SK); PY=$PY; SK check --json >'$OUT/check.json' 2>'$OUT/check.err'; [ \$? -le 1 ]"

# an inventory that expects exactly what this machine has, so gpu_count/type/nvlink/mig are judged too
$PY - "$OUT/inventory.yaml" <<'EOF' || log "could not write the inventory"
import os, socket, sys, yaml
exec(os.environ["NVPY"])
n = nv.nvmlDeviceGetCount()
name = _s(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(0)))
gtype = (name.replace("NVIDIA", "").split() or ["gpu"])[0].lower()
host = socket.gethostname().split(".")[0]
inv = {"cluster": "gpucheck", "slurm_version": "24.05", "controller": {"hosts": ["localhost"]},
       "node_groups": [{"name": "gpu", "hosts": host, "cpu": {"sockets": 1, "cores_per_socket": 1},
                        "memory_mb": 1024, "gpus": {"type": gtype, "count": n,
                        "files": f"/dev/nvidia[0-{n - 1}]" if n > 1 else "/dev/nvidia0",
                        "links": "none" if n == 1 else "nvlink"}}],
       "hooks": {"checks": {"driver": {"version": _s(nv.nvmlSystemGetDriverVersion())}}}}
yaml.safe_dump(inv, open(sys.argv[1], "w"))
EOF
step "check-inventory" 60 bash -c "$(declare -f SK); PY=$PY; SK check --json --inventory '$OUT/inventory.yaml' >'$OUT/check-inv.json' 2>>'$OUT/check.err'; [ \$? -le 1 ]"

# --- 2. the real NVML answers as a fixture (a healthy H200 if this is one) -------------------------------------
FIX_NAME=$($PY - <<'EOF'
import os
exec(os.environ["NVPY"])
n = nv.nvmlDeviceGetCount()
name = _s(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(0)))
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

# --- 2b. the hooks' own path on real NVML: two prologs (the second judges counter growth since the first), then
# what the new checks said, the NVML init time the budget is sized from, and every check's status ----------------
HOSTSHORT=$(hostname | cut -d. -f1)
NGPU=$($PY -c 'import os; exec(os.environ["NVPY"]); print(nv.nvmlDeviceGetCount())' 2>/dev/null || echo 1)
step "prolog-twice" 60 bash -c "$(declare -f SK); PY=$PY; export SLURMD_NODENAME=$HOSTSHORT SLURM_JOB_ID=1 SLURM_JOB_GPUS=\$(seq -s, 0 $((NGPU - 1))); SK hook prolog --inventory '$OUT/inventory.yaml' --state-dir '$OUT/hookstate' --textfile-dir '$OUT/prom' 2>'$OUT/prolog1.err'; SK hook prolog --inventory '$OUT/inventory.yaml' --state-dir '$OUT/hookstate' --textfile-dir '$OUT/prom' 2>'$OUT/prolog2.err'; rc=\$?; cat '$OUT/prolog2.err'; [ \$rc -le 1 ]"
$PY - "$OUT/check-inv.json" "$OUT/hookstate/$HOSTSHORT/last-prolog.json" >"$OUT/new-checks.txt" 2>&1 <<'EOF2' || FAILED=$((FAILED + 1))
import json, sys
rec = json.load(open(sys.argv[1]))
print(f"nvml_init_s (check, read-only): {rec.get('nvml_init_s')}")
try:
    pro = json.load(open(sys.argv[2]))
    print(f"nvml_init_s (2nd prolog): {pro.get('nvml_init_s')}  prolog duration_s: {pro.get('duration_s')}  "
          f"exit {pro.get('exit_code')}  bookkeeping {pro.get('bookkeeping')}")
except OSError as exc:
    pro = None
    print(f"no prolog record: {exc}")
for c in rec["checks"]:
    print(f"{c['check']:<16} {c['status']:<5} {c['duration_s'] * 1000:8.1f} ms  {c['summary'][:110]}")
new = ("ecc", "remapped_rows", "nvlink_errors", "pcie", "fabric", "inforom", "power", "persistence", "recovery_action")
for c in (pro or rec)["checks"]:
    if c["check"] in new:
        gpus = c.get("evidence", {}).get("gpus", {})
        first = next(iter(gpus.items()), None)
        print(f"evidence {c['check']}: {json.dumps(first)[:300]}")
# a crash or an unexpected error value in a new probe would show as WARN '<what> <ErrorName>' findings
odd = [f for c in rec["checks"] for f in c.get("findings", []) if any(w in f for w in ("TypeError", "AttributeError",
       "ValueError", "unreadable"))]
print("odd findings:", odd or "none")
sys.exit(1 if odd else 0)
EOF2
cat "$OUT/new-checks.txt" >>"$OUT/summary.txt"

# --- 3. prolog timing: real NVML vs nvidia-smi once per check (+ the fake-NVML hang cases: the budget holds) -----
REAL=--real; [ -n "${GPU_CHECK_FAKE:-}" ] && REAL=
step "prolog-bench-real" 150 bash -c "set -o pipefail; $PY bench/prolog_bench.py $REAL --runs 50 --hang-runs 2 --cap-s 45 --json '$OUT/prolog_bench.json' | tee '$OUT/prolog_bench.txt'"

# --- 4. the health unit tests on this machine (fake NVML; fast) ---------------------------------------------------
if $PY -c 'import pytest' 2>/dev/null; then
  step "unit-tests" 90 bash -c "$PY -m pytest -q -p no:cacheprovider tests/unit/test_health_checks.py tests/unit/test_health_hooks.py >'$OUT/unit.txt' 2>&1; rc=\$?; tail -3 '$OUT/unit.txt'; exit \$rc"
else
  log "pytest not installed: unit tests skipped"
fi

log "done in $(( $(date +%s) - START ))s, failed steps: $FAILED"
exit "$FAILED"
