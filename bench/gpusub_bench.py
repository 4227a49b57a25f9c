"""gpusub wall time next to the tools users would otherwise use, all in one run on a real Slurm lab.

    python bench/gpusub_bench.py [--repeat 15] [--lab-dir /tmp/gpusub-bench-lab] [--port-base 28817] [--accounting]

Starts its own lab (8 nodes x 8 fake H100, two leaves) unless ``--slurm-conf`` points at a running one, creates
a separate venv under /tmp with TorchX 0.7.0 and submitit 1.5.4 (``--venv``), and times whole processes, the
way a user waits for them:

* ``python -c pass``: interpreter start, the floor for every Python tool
* ``python -c 'import click, jinja2'``: the floor for gpusub (the CLI library and the template engine the product
  card requires), beside submitit's whole submit
* ``gpusub --help``: must stay fast (lazy imports)
* ``gpusub train.py -N 4 --dry-run --no-query``: inventory read, placement plan, render; no Slurm call (what TorchX's
  dry run does: the comparison line)
* ``gpusub train.py -N 4 --dry-run``: the same on Slurm's live states (node states, queue, reservations: the dry run
  is the submission), one round of side-by-side queries more
* ``gpusub train.py -N 4``: preflight (scontrol partition + nodes, sbatch --test-only), run dir, sbatch
* ``sbatch --parsable`` of the very script gpusub rendered (the floor for any submitter)
* the eight Slurm client calls of a pinned gpusub submit, from a shell (gpusub's floor on the Slurm side)
* ``torchx run --dryrun -s slurm dist.ddp -j 4x8 --script train.py``
* a submitit submit of a 4x8 job (``AutoExecutor`` + ``submit``) in its own process
* with ``--e2e ROUNDS`` (default 3): end to end, submit to COMPLETED, of a 2-node x 2-process gloo job (init, one
  all_reduce, destroy): ``gpusub ddp.py -N 2 --gpus-per-node 2 --follow`` (torchrun, and ``--launcher srun``)
  beside submitit's ``submit`` + ``job.results()`` of the same work (one srun task per process,
  ``helpers.TorchDistributedEnvironment``); the jobs import the test venv's torch (``--torch-python``)

Every command runs once as a warm-up, then ``--repeat`` rounds run each command once in turn (so a shared
machine's changing load reaches all of them alike). Prints medians of the wall time and of the CPU time (user +
system of the process and the children it waited for: sbatch, scontrol, git; a loaded machine stretches it far less
than the wall time) and both ratios, and the load average before and after. ``--compare ROOT`` adds gpusub from
another checkout (e.g. a worktree of main) to the same rounds. Submitted jobs are cancelled after each round.
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

DDP = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("sum", t.item(), flush=True)
dist.destroy_process_group()
"""

SUBMITIT_E2E = """\
import subprocess, sys, time, submitit
TORCH_SITE = sys.argv[2]
def train():
    import sys
    sys.path.append(TORCH_SITE)  # the same torch as gpusub's jobs (the bench venv has none)
    import submitit, torch, torch.distributed as dist
    submitit.helpers.TorchDistributedEnvironment().export()
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(nodes=2, gpus_per_node=2, tasks_per_node=2, timeout_min=5, slurm_partition="gpu")
job = ex.submit(train)
results = job.results()  # one per task: returns once every task's result pickle exists (submitit's done())
print("results_at", time.time(), results, flush=True)
# ... which is before the tasks have exited and before Slurm ends the job: wait for COMPLETED as gpusub --follow
# does, polling at 0.1 s (finer than gpusub's <= 1 s: in submitit's favour)
while True:
    out = subprocess.run(["scontrol", "-o", "show", "job", job.job_id], capture_output=True, text=True).stdout
    state = next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")
    if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
        break
    time.sleep(0.1)
print("state", state)
sys.exit(0 if state == "COMPLETED" else 1)
"""


# What `gpusub train.py -N 4` runs on a 22.05 lab (strace -f -e execve), in the order it runs them; the node query
# is scontrol's JSON from 24.11 on
SLURM_CALLS = ("squeue -h -t PD -o '%i|%D|%P|%n|%x|%v|%r' >/dev/null; scontrol -o show reservation >/dev/null; "
               "scontrol -o show partition >/dev/null; scontrol -o -d show node >/dev/null; "
               "sbatch --test-only job.sh 2>/dev/null; sbatch --parsable job.sh >/dev/null; "
               "squeue -h -t PD -o '%i|%D|%P|%n|%x|%v|%r' >/dev/null; scontrol -o -d show node >/dev/null")


def timed(argv: list[str], env: dict[str, str], repeat: int, cwd: str, check: bool = True) -> tuple[float, str]:
    ms, _, out = timed_cpu(argv, env, repeat, cwd, check)
    return ms, out


def timed_cpu(argv: list[str], env: dict[str, str], repeat: int, cwd: str,
              check: bool = True) -> tuple[float, float, str]:
    """Median wall ms, median CPU ms (user + system of the process and every child it waited for: the work done,
    which a loaded machine stretches far less than the wall time) and the last stdout."""
    import resource

    times, cpus = [], []
    out = ""
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
        if check and res.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])}... failed: {res.stderr.strip()[-400:]}")
        out = res.stdout
    return statistics.median(times) * 1000, statistics.median(cpus) * 1000, out


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


def _installed_from(console_script: Path, root: Path, env: dict[str, str]) -> bool:
    """True when ``console_script`` exists and its interpreter, in the bench's environment (PYTHONPATH=root),
    imports slurmkit from ``root``: then the console script runs this tree's code, as a user's would."""
    if not console_script.exists():
        return False
    res = subprocess.run([str(console_script.parent / "python"), "-c", "import slurmkit; print(slurmkit.__file__)"],
                         capture_output=True, text=True, env=env)
    return res.returncode == 0 and Path(res.stdout.strip()).resolve().is_relative_to(root.resolve())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--lab-dir", default="/tmp/gpusub-bench-lab")
    ap.add_argument("--port-base", type=int, default=28817)
    ap.add_argument("--slurm-conf", default=None, help="use this running cluster instead of starting a lab")
    ap.add_argument("--accounting", action="store_true",
                    help="start the lab with accounting (slurmdbd + MariaDB, AccountingStorageEnforce): the tenant "
                         "preflight's queries run on every submit and live dry run")
    ap.add_argument("--venv", default="/tmp/gpusub-bench-venv")
    ap.add_argument("--e2e", type=int, default=3, metavar="ROUNDS", help="end-to-end rounds (0: none)")
    ap.add_argument("--torch-python", default=sys.executable, help="interpreter with torch for the e2e jobs")
    ap.add_argument("--compare", default=None, metavar="ROOT",
                    help="also time gpusub from this other checkout (e.g. a worktree of main), in the same rounds")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    lab = None
    if args.slurm_conf:
        conf = args.slurm_conf
        inventory = str(Path(conf).with_name("slurmkit.yaml"))
    else:
        from slurmkit.lab import Lab, LabSpec

        lab = Lab(LabSpec(dir=args.lab_dir, port_base=args.port_base, accounting=args.accounting))
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
           "SLURMKIT_STATE_DIR": f"{work}/state", "GPUSUB_RUN_ROOT": f"{work}/runs", "XDG_CACHE_HOME": f"{work}/cache"}
    # the `gpusub` console script, as users run it (and as torchx is run), when this interpreter's environment has
    # this source tree installed (the test venv is an editable install); else `python -m`, which adds runpy
    script_gpusub = Path(sys.executable).parent / "gpusub"
    gpusub = [str(script_gpusub)] if _installed_from(script_gpusub, ROOT, env) else [sys.executable, "-m",
                                                                                   "slurmkit.cli.gpusub"]
    load0 = f"{os.getloadavg()[0]:.2f}"
    rows: list[tuple[str, float]] = []
    cpu_rows: dict[str, float] = {}
    e2e_rows: dict[str, list[float]] = {}
    try:
        r = args.repeat
        _, script = timed([*gpusub, "train.py", "-N", "4", "--dry-run"], env, 1, work)
        body = script.split("# sbatch argv:", 1)[0]
        (Path(work) / "job.sh").write_text(body)
        cmds: list[tuple[str, list[str]]] = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            # the floor under any gpusub call: the two libraries the product card requires (the CLI and the job
            # templates), imported and nothing else
            ("python -c 'import click, jinja2'", [sys.executable, "-c", "import click, jinja2"]),
            ("gpusub --help", [*gpusub, "--help"]),
            ("gpusub --dry-run (4x8)", [*gpusub, "train.py", "-N", "4", "--dry-run", "--no-query"]),
            ("gpusub --dry-run live (4x8)", [*gpusub, "train.py", "-N", "4", "--dry-run"]),
            ("gpusub submit (4x8)", [*gpusub, "train.py", "-N", "4", "--time", "5"]),
            ("sbatch --parsable (same script)", ["sbatch", "--parsable", "job.sh"]),
            # the other floor: the Slurm clients a pinned submit runs (live placement's four queries, sbatch
            # --test-only, sbatch, the pin check's two), one after another, without any Python
            ("the Slurm calls of a pinned submit (8 clients)", ["sh", "-c", SLURM_CALLS]),
        ]
        if args.compare:
            other = str(Path(args.compare).resolve())
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{other}/slurmkit"], check=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
            # what its console script would run (no runpy), with that checkout first on sys.path
            # with its own cache dir: the facts cache's stamp holds the code's mtimes, so two checkouts sharing one
            # would throw each other's entries out on every call
            entry = [sys.executable, "-c", f"import os, sys; os.environ['XDG_CACHE_HOME'] = {work + '/cache-compare'!r}; "
                     f"sys.path.insert(0, {other!r}); sys.argv[0] = 'gpusub'; "
                     "from slurmkit.cli.gpusub import main; main()"]
            cmds += [("gpusub --dry-run (4x8) [compare]", [*entry, "train.py", "-N", "4", "--dry-run", "--no-query"]),
                     ("gpusub submit (4x8) [compare]", [*entry, "train.py", "-N", "4", "--time", "5"])]
        py = ensure_venv(Path(args.venv))
        if py is not None:
            torchx = str(Path(py).parent / "torchx")
            (Path(work) / "submitit_submit.py").write_text(SUBMITIT)
            cmds += [
                ("torchx run --dryrun dist.ddp -j 4x8",
                 [torchx, "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "4x8", "--script", "train.py"]),
                ("submitit submit (4x8)", [str(py), "submitit_submit.py", f"{work}/submitit"]),
            ]
        # one warm-up each, then rounds that run every command once, so a change in the machine's load (a shared
        # machine) reaches every command alike instead of whichever ran during it
        for _, argv in cmds:
            timed(argv, env, 1, work)
        times: dict[str, list[float]] = {name: [] for name, _ in cmds}
        cpu: dict[str, list[float]] = {name: [] for name, _ in cmds}
        for _ in range(r):
            for name, argv in cmds:
                wall_ms, cpu_ms, _ = timed_cpu(argv, env, 1, work)
                times[name].append(wall_ms)
                cpu[name].append(cpu_ms)
            subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env, capture_output=True)
        rows = [(name, statistics.median(times[name])) for name, _ in cmds]
        cpu_rows = {name: statistics.median(cpu[name]) for name, _ in cmds}
        e2e_rows = run_e2e(args, gpusub, env, work, py)
    finally:
        subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], env=env, capture_output=True)
        if lab is not None:
            lab.down()
    by = dict(rows)
    print(f"\n{len(rows)} commands, median of {args.repeat} rounds each, on the lab ({conf}, accounting "
          f"{'on' if args.accounting else 'off'}); load average "
          f"{load0} before, {os.getloadavg()[0]:.2f} after\n")
    print("| command | median wall ms | median CPU ms |")
    print("|---|---:|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} | {cpu_rows.get(name, 0.0):.1f} |")
    print()
    for label, table in (("wall", by), ("CPU", cpu_rows)):
        tx = table.get("torchx run --dryrun dist.ddp -j 4x8")
        si = table.get("submitit submit (4x8)")
        for suffix in ("", " [compare]"):
            dry, sub = table.get(f"gpusub --dry-run (4x8){suffix}"), table.get(f"gpusub submit (4x8){suffix}")
            live = table.get(f"gpusub --dry-run live (4x8){suffix}")
            if tx and dry:
                print(f"{label}: gpusub{suffix} --dry-run / torchx --dryrun = {dry / tx:.2f}x (target <= 0.5x)")
            if tx and live:
                print(f"{label}: gpusub{suffix} --dry-run live / torchx --dryrun = {live / tx:.2f}x (target <= 0.5x)")
            if si and sub:
                print(f"{label}: gpusub{suffix} submit / submitit submit = {sub / si:.2f}x (target <= 1.0x)")
    print(f"gpusub submit / bare sbatch = {by['gpusub submit (4x8)'] / by['sbatch --parsable (same script)']:.1f}x")
    if e2e_rows:
        print("\n| end to end, submit to COMPLETED (2 nodes x 2 processes, gloo) | median wall s | runs (s) |")
        print("|---|---:|---|")
        for name, runs in e2e_rows.items():
            print(f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{x:.2f}' for x in runs)} |")
        si = e2e_rows.get("submitit submit + results(), to COMPLETED")
        for name, runs in e2e_rows.items():
            if si and name.startswith("gpusub"):
                print(f"wall: {name} / submitit = {statistics.median(runs) / statistics.median(si):.2f}x "
                      "(target <= 1.0x)")


def run_e2e(args: argparse.Namespace, gpusub: list[str], env: dict[str, str], work: str,
            py: Path | None) -> dict[str, list[float]]:
    """Wall seconds from starting the submitting process to its exit once the job is COMPLETED, in rounds."""
    if args.e2e <= 0:
        return {}
    (Path(work) / "ddp.py").write_text(DDP)
    tpy = Path(args.torch_python)
    site = subprocess.run([str(tpy), "-c", "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the e2e jobs run under the torch interpreter (gpusub pins the one it runs under: the console script's)
    e_env = {**env, "PATH": f"{tpy.parent}:{env.get('PATH', '/usr/bin:/bin')}"}
    cmds: list[tuple[str, list[str]]] = [
        ("gpusub --follow (torchrun)", [*gpusub, "ddp.py", "-N", "2", "--gpus-per-node", "2", "--time", "5",
                                        "--follow"]),
        ("gpusub --follow (--launcher srun)", [*gpusub, "ddp.py", "-N", "2", "--gpus-per-node", "2", "--time", "5",
                                               "--launcher", "srun", "--follow"]),
        # what torchrun adds by design: its agent (one per node) imports torch before it starts the workers, which
        # then import it again; one import, alone, in the same rounds
        ("python -c 'import torch' (a torchrun agent's import)", [str(tpy), "-c", "import torch"]),
    ]
    if py is not None:
        (Path(work) / "submitit_e2e.py").write_text(SUBMITIT_E2E)
        cmds.append(("submitit submit + results(), to COMPLETED", [str(py), "submitit_e2e.py", f"{work}/submitit-e2e",
                                                                  site]))
    runs: dict[str, list[float]] = {name: [] for name, _ in cmds}
    if py is not None:
        runs["submitit submit + results(), to results"] = []
    for _ in range(args.e2e):
        for name, argv in cmds:
            t, t0 = time.perf_counter(), time.time()
            res = subprocess.run(argv, env=e_env, cwd=work, capture_output=True, text=True, timeout=300)
            runs[name].append(time.perf_counter() - t)
            if res.returncode != 0:
                raise SystemExit(f"{name}: exit {res.returncode}: {(res.stderr or res.stdout).strip()[-600:]}")
            if name.startswith("submitit"):
                at = next(float(x.split()[1]) for x in res.stdout.splitlines() if x.startswith("results_at"))
                runs["submitit submit + results(), to results"].append(at - t0)
    return runs


if __name__ == "__main__":
    main()
