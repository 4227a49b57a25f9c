"""gpusub wall time next to the tools users would otherwise use, all in one run on a real Slurm lab.

    python bench/gpusub_bench.py [--repeat 15] [--lab-dir /tmp/gpusub-bench-lab] [--port-base 28817]

Starts its own lab (8 nodes x 8 fake H100, two leaves) unless ``--slurm-conf`` points at a running one, creates
a separate venv under /tmp with TorchX 0.7.0 and submitit 1.5.4 (``--venv``), and times whole processes, the
way a user waits for them:

* ``python -c pass``: interpreter start, the floor for every Python tool
* ``gpusub --help``: must stay fast (lazy imports)
* ``gpusub train.py -N 4 --dry-run``: inventory read, placement plan, render; no Slurm call
* ``gpusub train.py -N 4``: preflight (scontrol partition + nodes, sbatch --test-only), run dir, sbatch
* ``sbatch --parsable`` of the very script gpusub rendered (the floor for any submitter)
* ``torchx run --dryrun -s slurm dist.ddp -j 4x8 --script train.py``
* a submitit submit of a 4x8 job (``AutoExecutor`` + ``submit``) in its own process

Prints medians and ratios as a Markdown table. Submitted jobs are cancelled at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUBMITIT = """\
import sys, submitit
def train():
    return 0
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(nodes=4, gpus_per_node=8, tasks_per_node=8, timeout_min=10, slurm_partition="gpu",
                     slurm_signal_delay_s=120)
print(ex.submit(train).job_id)
"""


def timed(argv: list[str], env: dict[str, str], repeat: int, cwd: str, check: bool = True) -> tuple[float, str]:
    times = []
    out = ""
    for _ in range(repeat):
        t = time.perf_counter()
        res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if check and res.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])}... failed: {res.stderr.strip()[-400:]}")
        out = res.stdout
    return statistics.median(times) * 1000, out


def ensure_venv(venv: Path) -> Path | None:
    py = venv / "bin" / "python"
    if not (venv / "bin" / "torchx").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        res = subprocess.run([str(py), "-m", "pip", "install", "-q", "torchx==0.7.0", "submitit==1.5.4"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(f"# could not install torchx/submitit: {res.stderr.strip()[-300:]}", file=sys.stderr)
            return None
    return py


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--lab-dir", default="/tmp/gpusub-bench-lab")
    ap.add_argument("--port-base", type=int, default=28817)
    ap.add_argument("--slurm-conf", default=None, help="use this running cluster instead of starting a lab")
    ap.add_argument("--venv", default="/tmp/gpusub-bench-venv")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    lab = None
    if args.slurm_conf:
        conf = args.slurm_conf
        inventory = str(Path(conf).with_name("slurmkit.yaml"))
    else:
        from slurmkit.lab import Lab, LabSpec

        lab = Lab(LabSpec(dir=args.lab_dir, port_base=args.port_base))
        if lab.is_up():
            lab.down()
        lab.up()
        conf = str(lab.conf)
        inventory = str(lab.etc / "slurmkit.yaml")
    work = tempfile.mkdtemp(prefix="gpusub-bench-")
    (Path(work) / "train.py").write_text("print('train')\n")
    # the comparison tools were pip-installed, which writes their .pyc files; give slurmkit's source tree the same
    # (this machine exports PYTHONDONTWRITEBYTECODE=1, so without this every gpusub run recompiles ~20 modules)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "slurmkit")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    env = {**os.environ, "SLURM_CONF": conf, "SLURMKIT_INVENTORY": inventory, "PYTHONPATH": str(ROOT),
           "SLURMKIT_STATE_DIR": f"{work}/state", "GPUSUB_RUN_ROOT": f"{work}/runs"}
    gpusub = [sys.executable, "-m", "slurmkit.cli.gpusub"]
    rows: list[tuple[str, float]] = []
    try:
        r = args.repeat
        rows.append(("python -c pass", timed([sys.executable, "-c", "pass"], env, r, work)[0]))
        rows.append(("gpusub --help", timed([*gpusub, "--help"], env, r, work)[0]))
        dry, script = timed([*gpusub, "train.py", "-N", "4", "--dry-run"], env, r, work)
        rows.append(("gpusub --dry-run (4x8)", dry))
        rows.append(("gpusub submit (4x8)", timed([*gpusub, "train.py", "-N", "4", "--time", "5"], env, r, work)[0]))
        body = script.split("# sbatch argv:", 1)[0]
        (Path(work) / "job.sh").write_text(body)
        rows.append(("sbatch --parsable (same script)", timed(["sbatch", "--parsable", "job.sh"], env, r, work)[0]))
        py = ensure_venv(Path(args.venv))
        if py is not None:
            torchx = str(Path(py).parent / "torchx")
            rows.append(("torchx run --dryrun dist.ddp -j 4x8",
                         timed([torchx, "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "4x8", "--script",
                                "train.py"], env, r, work)[0]))
            (Path(work) / "submitit_submit.py").write_text(SUBMITIT)
            rows.append(("submitit submit (4x8)",
                         timed([str(py), "submitit_submit.py", f"{work}/submitit"], env, r, work)[0]))
    finally:
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env, capture_output=True)
        if lab is not None:
            lab.down()
    by = dict(rows)
    print(f"\n{len(rows)} commands, median of {args.repeat} runs each, on the lab ({conf})\n")
    print("| command | median ms |")
    print("|---|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} |")
    print()
    tx = by.get("torchx run --dryrun dist.ddp -j 4x8")
    si = by.get("submitit submit (4x8)")
    if tx:
        ratio = by["gpusub --dry-run (4x8)"] / tx
        print(f"gpusub --dry-run / torchx --dryrun = {ratio:.2f}x (target <= 0.5x)")
    if si:
        ratio = by["gpusub submit (4x8)"] / si
        print(f"gpusub submit / submitit submit = {ratio:.2f}x (target <= 1.0x)")
    print(f"gpusub submit / bare sbatch = {by['gpusub submit (4x8)'] / by['sbatch --parsable (same script)']:.1f}x")


if __name__ == "__main__":
    main()
