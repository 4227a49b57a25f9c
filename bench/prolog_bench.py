#!/usr/bin/env python3
"""Prolog wall time: `slurmkit hook prolog` on a fake 8-GPU H100 node vs a shell prolog calling nvidia-smi per check.

    python bench/prolog_bench.py [--runs 50] [--hang-runs 5] [--json out.json]
    python bench/prolog_bench.py --real      # on a GPU node: real NVML and the real nvidia-smi

Cases (each a fresh process per run, as slurmd starts it):
  slurmkit prolog, fake NVML (healthy 8x H100)       the hot path: one forked NVML gather, every check enabled
  shell prolog, fake nvidia-smi x<N> calls            the common practice: one nvidia-smi per check
  slurmkit prolog, NVML hung (in a query / in init)  must return (exit 1, "nvml hung") before the 5 s budget

The fake nvidia-smi is Python started with -S -E (no site packages) answering from the same fixture, so it costs
an interpreter start per call but no NVML init; a real nvidia-smi initialises NVML on every call and is slower
(bench/gpu_device_check.sh measures both against a real GPU). scontrol is a stub on PATH so the failing case
runs the real drain flow without a cluster. Nothing here asserts a time: it prints a table.

Everything it writes stays under its own temporary directory (removed at the end): the hooks' state and metrics
textfile (hooks.checks.textfile_dir, so `--real` on a GPU node never overwrites that node's node_exporter metrics
with a fake drain) and the interpreters' bytecode (PYTHONPYCACHEPREFIX, not __pycache__ in the source tree).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "nvml"

FAKE_NVIDIA_SMI = r'''
import json, os, sys
state = json.load(open(os.environ["FAKE_NVSMI_STATE"]))
devs = state["devices"]
a = sys.argv[1:]
def q(key):
    for x in a:
        if x.startswith(key + "="):
            return x.split("=", 1)[1].split(",")
    return []
def val(d, k):
    v = d.get(k)
    return "[N/A]" if isinstance(v, dict) else v
fields = {
    "index": lambda d: d["index"], "driver_version": lambda d: state["driver_version"],
    "ecc.errors.uncorrected.volatile.total": lambda d: val(d, "ecc_volatile_uncorrected"),
    "retired_pages.pending": lambda d: "No" if isinstance(d.get("retired_pages_pending"), dict) else "Yes",
    "clocks_event_reasons.active": lambda d: hex(d["clocks_event_reasons"]),
    "temperature.gpu": lambda d: d["temperature_c"], "persistence_mode": lambda d: "Enabled",
    "pcie.link.width.current": lambda d: d["pcie_width"][0], "pcie.link.width.max": lambda d: d["pcie_width"][1],
    "mig.mode.current": lambda d: "Disabled" if d["mig_mode"][0] == 0 else "Enabled",
    "gpu_bus_id": lambda d: d["pci_bus_id"],
    "remapped_rows.pending": lambda d: d["remapped_rows"][2], "remapped_rows.failure": lambda d: d["remapped_rows"][3],
}
if a and a[0] == "-L":
    for d in devs:
        print(f"GPU {d['index']}: {d['name']} (UUID: {d['uuid']})")
elif a and a[0] == "nvlink":
    for d in devs:
        print(f"GPU {d['index']}: {d['name']} (UUID: {d['uuid']})")
        for i, s in enumerate(d["nvlink_state"]):
            print(f"\t Link {i}: {'26.562 GB/s' if s == 1 else '<inactive>'}")
elif q("--query-compute-apps"):
    for d in devs:
        for p in d.get("compute_processes", []):
            print(f"{d['pci_bus_id']}, {p['pid']}")
else:
    keys = q("--query-gpu") or q("--query-remapped-rows")
    for d in devs:
        print(", ".join(str(fields[k](d)) for k in keys))
'''

SHELL_PROLOG = r'''#!/bin/bash
# The common practice: one nvidia-smi call per check, grep/awk the CSV, exit 1 on a hard failure.
set -u
fail() { echo "prolog: $*" >&2; scontrol update nodename="$SLURMD_NODENAME" state=drain reason="prolog: $*"; exit 1; }
n=$(nvidia-smi -L | wc -l); [ "$n" -ge "${EXPECTED_GPUS:-8}" ] || fail "gpu count $n"
nvidia-smi --query-gpu=driver_version --format=csv,noheader >/dev/null || fail "nvidia-smi"
nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader \
  | awk -F', ' '$2 != "0" && $2 != "[N/A]" {bad=1} END {exit bad}' || fail "ecc"
nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader \
  | awk -F', ' '($2 != "0" && $2 != "No") || ($3 != "0" && $3 != "No") {bad=1} END {exit bad}' || fail "row remap"
nvidia-smi --query-gpu=index,retired_pages.pending --format=csv,noheader | grep -q Yes && fail "retired pages"
nvidia-smi --query-gpu=index,clocks_event_reasons.active --format=csv,noheader >/dev/null
nvidia-smi --query-gpu=index,temperature.gpu --format=csv,noheader \
  | awk -F', ' '$2 >= 90 {bad=1} END {exit bad}' || fail "temperature"
nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader >/dev/null
nvidia-smi nvlink -s | grep -q inactive && fail "nvlink"
nvidia-smi --query-gpu=index,pcie.link.width.current,pcie.link.width.max --format=csv,noheader \
  | awk -F', ' '$2 < $3 {bad=1} END {exit bad}' || fail "pcie"
nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader | grep -q Enabled && fail "mig"
[ -z "$(nvidia-smi --query-compute-apps=gpu_bus_id,pid --format=csv,noheader)" ] || fail "busy gpu"
exit 0
'''
SHELL_NVSMI_CALLS = SHELL_PROLOG.count("nvidia-smi ") - SHELL_PROLOG.count("# The common practice: one nvidia-smi ")

STUB_SCONTROL = r'''#!/bin/sh
case "$*" in
  "-o show node "*) echo "NodeName=$5 Arch=x86_64 State=ALLOCATED ThreadsPerCore=1 Partitions=gpu" ;;
esac
exit 0
'''


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def time_runs(argv: list[str], env: dict[str, str], runs: int, cap_s: float = 1e9) -> tuple[list[float], set[int], str]:
    """``runs`` fresh processes, stopping early (after at least 5) once ``cap_s`` seconds are spent."""
    if runs <= 0:
        return [], set(), ""
    subprocess.run(argv, env=env, capture_output=True)  # warm the page cache and the expectations cache
    times: list[float] = []
    codes: set[int] = set()
    last = ""
    start = time.perf_counter()
    for _ in range(runs):
        if len(times) >= 5 and time.perf_counter() - start > cap_s:
            break
        t = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        codes.add(p.returncode)
        last = (p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout).strip() else ""
    return times, codes, last


def hooks_section(tmp: Path) -> dict:
    """The bench inventory's hooks: this machine has no HCAs; everything else runs with the shipped defaults; the
    metrics textfile goes under ``tmp``, never to the host's node_exporter directory."""
    return {"prolog": True, "checks": {"ib": False, "textfile_dir": str(tmp / "metrics")}}


def base_env(tmp: Path, bindir: Path, ngpu: int) -> dict[str, str]:
    return {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": ",".join(map(str, range(ngpu))),
        "EXPECTED_GPUS": str(ngpu),
        "SLURMKIT_STATE_DIR": str(tmp / "state"),
        # bytecode of the timed interpreters under tmp (kept across runs, as an installed package's is)
        "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
        # keep the caller's PYTHONPATH after ours: on the GPU machine the wheels it carries live there
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--hang-runs", type=int, default=5)
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--real", action="store_true", help="real NVML and the real nvidia-smi (a GPU node)")
    ap.add_argument("--cap-s", type=float, default=90.0, help="stop a case after this many seconds (min 5 runs)")
    args = ap.parse_args()

    import yaml

    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-prolog-bench-"))
    try:
        inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
        inv["hooks"] = hooks_section(tmp)
        ngpu, label = 8, "fake NVML 8x H100"
        if args.real:
            import pynvml

            pynvml.nvmlInit()
            ngpu = pynvml.nvmlDeviceGetCount()
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            name = name.decode() if isinstance(name, bytes) else name
            pynvml.nvmlShutdown()
            gtype = (name.replace("NVIDIA", "").split() or ["gpu"])[0].lower()
            g = inv["node_groups"][0]
            g.update(hosts="node1", nics=[], features=[gtype])
            g["gpus"].update(type=gtype, count=ngpu, files=f"/dev/nvidia[0-{ngpu - 1}]" if ngpu > 1 else "/dev/nvidia0",
                             cores=[], links="nvlink" if ngpu > 1 else "none")
            del g["gpus"]["cores"]
            inv["node_groups"][0] = g
            inv["partitions"][0]["groups"] = [g["name"]]
            inv.pop("topology", None)
            label = f"real NVML {ngpu}x {name}"
        (tmp / "slurmkit.yaml").write_text(yaml.safe_dump(inv))
        bindir = tmp / "bin"
        bindir.mkdir()
        if not args.real:
            (bindir / "nvidia-smi").write_text(f"#!{sys.executable} -SE\n{FAKE_NVIDIA_SMI}")
            (bindir / "nvidia-smi").chmod(0o755)
        (bindir / "scontrol").write_text(STUB_SCONTROL)
        (tmp / "prolog.sh").write_text(SHELL_PROLOG)
        for f in (bindir / "scontrol", tmp / "prolog.sh"):
            f.chmod(0o755)
        base = base_env(tmp, bindir, ngpu)
        hook = [sys.executable, "-m", "slurmkit.cli.main", "hook", "prolog", "--inventory", str(tmp / "slurmkit.yaml")]
        rows = []
        healthy = str(FIXTURES / "healthy-h100x8.json")
        hook_env = dict(base) if args.real else {**base, "SLURMKIT_FAKE_NVML": healthy}
        t, codes, last = time_runs(hook, hook_env, args.runs, args.cap_s)
        rec = json.loads((tmp / "state" / "node1" / "last-prolog.json").read_text())
        rows.append((f"slurmkit prolog, {label}", t, codes, f"{len(rec['checks'])} checks; {last[:60]}"))
        t, codes, last = time_runs(["/bin/bash", str(tmp / "prolog.sh")], {**base, "FAKE_NVSMI_STATE": healthy},
                                   args.runs, args.cap_s)
        kind = "real" if args.real else "fake"
        rows.append((f"shell prolog, {kind} nvidia-smi x{SHELL_NVSMI_CALLS}", t, codes, last[:60] or "all passed"))
        for fixture, case in (("nvml-hang.json", "slurmkit prolog, fake NVML hung in a query"),
                              ("nvml-hang-init.json", "slurmkit prolog, fake NVML hung in nvmlInit")):
            if args.hang_runs <= 0:
                break  # --hang-runs 0: skip the hang cases (they take the whole budget per run)
            t, codes, last = time_runs(hook, {**base, "SLURMKIT_FAKE_NVML": str(FIXTURES / fixture)}, args.hang_runs)
            rows.append((case, t, codes, last.split(" - ", 1)[-1][:60]))
        interp = time_runs([sys.executable, "-c", "pass"], base, args.runs)[0]
        rows.append(("(python -c pass, same interpreter)", interp, {0}, "interpreter start-up floor"))

        print(f"{'case':<52} {'runs':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  exit  note")
        out = []
        for name, ts, cs, note in rows:
            if not ts:
                continue
            ms = [x * 1000 for x in ts]
            print(f"{name:<52} {len(ms):>4} {statistics.median(ms):>8.1f} {pct(ms, 95):>8.1f} {max(ms):>8.1f}"
                  f"  {','.join(map(str, sorted(cs))):<4}  {note}")
            out.append({"case": name, "runs": len(ms), "p50_ms": statistics.median(ms), "p95_ms": pct(ms, 95),
                        "max_ms": max(ms), "exit_codes": sorted(cs), "note": note})
        print(f"\nmachine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
