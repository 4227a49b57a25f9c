"""Lab start/stop times and memory per Slurm release, root build time, client+parse times, CLI start-up times.

    python bench/lab_bench.py [--repeat 5] [--slurm host --slurm 24.11] [--build-root 24.11] [--port-base 25000]

--slurm: which releases to start labs of ("host" = the host's own; another one runs from its cached root).
--build-root REL: also time a cold build of REL's root (debootstrap + apt, into a temporary image dir, removed).

cold = the first `up` after dropping the kernel's page cache (binaries and libraries read from disk again);
warm = later `up`s. RSS is summed over every daemon the lab started (munged, slurmctld, slurmscriptd, slurmd).
CLI start-up: median wall time of `--help`, next to `python -c pass` on the same interpreter.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkit.backend import parse  # noqa: E402
from slurmkit.lab import Lab, LabSpec  # noqa: E402


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def rss_mib(pids: list[int]) -> float:
    total = 0
    seen = set(pids)
    # slurmctld forks slurmscriptd: count children of the recorded daemons too
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid in pids:
                seen.add(int(d))
    for pid in seen:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def bench_lab(nodes: int, repeat: int, slurm: str | None = None, port_base: int = 25000) -> dict[str, object]:
    spec = LabSpec(dir=f"/tmp/slurmkit-bench-lab-{nodes}", nodes=nodes, port_base=port_base, slurm=slurm)
    ups, downs, rss = [], [], []
    cold = None
    for i in range(repeat + 1):
        if i == 0:
            dropped = drop_caches()
        lab = Lab(spec)
        t = lab.up()
        pids = list(lab.running_pids().values())
        rss.append(rss_mib(pids))
        t0 = time.monotonic()
        lab.down()
        downs.append(time.monotonic() - t0)
        if i == 0:
            cold = (t, dropped)
        else:
            ups.append(t)
    return {
        "nodes": nodes,
        "cold_up": cold[0] if cold else 0,
        "cold_is_cold": cold[1] if cold else False,
        "warm_up_median": statistics.median(ups),
        "warm_up_max": max(ups),
        "down_median": statistics.median(downs),
        "rss_mib": statistics.median(rss),
    }


def time_cmd(argv: list[str], repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.monotonic()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        ts.append(time.monotonic() - t)
    return statistics.median(ts)


def bench_root_build(release: str) -> float:
    """Cold build of a release's root into a throw-away image dir (the cached one is left alone)."""
    import tempfile

    from slurmkit.lab import image

    with tempfile.TemporaryDirectory(prefix="slurmkit-bench-roots-", dir="/var/tmp") as d:
        os.environ["SLURMKIT_IMAGE_DIR"] = d
        try:
            t = time.monotonic()
            image.build(release, progress=lambda m: print(f"  image: {m}", file=sys.stderr))
            return time.monotonic() - t
        finally:
            del os.environ["SLURMKIT_IMAGE_DIR"]


# (name, argv after the program, parser): the same scene, every way the backend can read it
PARSES = [
    ("sinfo -N -o fmt", ["sinfo", "-N", "-h", "-o", parse.SINFO_NODE_FORMAT], parse.parse_sinfo_nodes),
    ("scontrol -o -d show node", ["scontrol", "-o", "-d", "show", "node"], parse.parse_scontrol_nodes),
    ("squeue -o fmt", ["squeue", "-h", "-o", parse.SQUEUE_FORMAT], parse.parse_squeue),
    ("sinfo --json", ["sinfo", "--json"], parse.parse_nodes_json),
    ("scontrol --json show node", ["scontrol", "--json", "show", "node"], parse.parse_nodes_json),
    ("squeue --json", ["squeue", "--json"], parse.parse_squeue_json),
]


def bench_parse(slurm: str | None, repeat: int, port_base: int) -> list[tuple[str, float, float, int]]:
    """On an 8-node lab with 4 running jobs: median wall ms of the client command and of the parse."""
    lab = Lab(LabSpec(dir="/tmp/slurmkit-bench-parse", nodes=8, port_base=port_base, slurm=slurm))
    lab.up()
    env = {**os.environ, **lab.env}
    rows = []
    try:
        for argv in (["-N2", "--exclusive"], ["-N1", "--gres=gpu:2"], ["-N1", "--gres=gpu:4"], ["-N3", "--exclusive"]):
            subprocess.run(["sbatch", "-o", "/dev/null", *argv, "--wrap", "sleep 300"], env=env, check=True,
                           capture_output=True, cwd="/tmp")
        for name, argv, fn in PARSES:
            cmd_t, parse_t, n = [], [], 0
            for _ in range(repeat):
                t = time.monotonic()
                r = subprocess.run(argv, env=env, capture_output=True, text=True)
                cmd_t.append(time.monotonic() - t)
                if r.returncode != 0:  # --json where the release lacks it
                    break
                t = time.monotonic()
                n = len(fn(r.stdout))  # type: ignore[operator]
                parse_t.append(time.monotonic() - t)
            if parse_t:
                rows.append((name, statistics.median(cmd_t) * 1000, statistics.median(parse_t) * 1000, n))
    finally:
        lab.down()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--slurm", action="append", default=None, help="release, or 'host' (repeatable; default: host)")
    ap.add_argument("--build-root", action="append", default=[], help="time a cold root build of this release")
    ap.add_argument("--port-base", type=int, default=25000)
    args = ap.parse_args()
    for rel in args.build_root:
        print(f"root build, Slurm {rel} (cold: debootstrap + apt-get install): {bench_root_build(rel):.1f} s")
        print()
    releases = [None if r == "host" else r for r in (args.slurm or ["host"])]
    print(f"{'slurm':>6} {'nodes':>5} {'cold up s':>10} {'warm up s (median/max)':>24} {'down s':>8} {'RSS MiB':>8}")
    for rel in releases:
        shown = rel or Lab(LabSpec()).release
        for n in (4, 8):
            r = bench_lab(n, args.repeat, rel, args.port_base)
            cold = f"{r['cold_up']:.3f}" + ("" if r["cold_is_cold"] else "*")
            print(f"{shown:>6} {n:>5} {cold:>10} {r['warm_up_median']:>13.3f} / {r['warm_up_max']:.3f} "
                  f"{r['down_median']:>8.3f} {r['rss_mib']:>8.1f}")
    print()
    print(f"{'slurm':>6} {'command (8 nodes, 4 jobs)':<27} {'client ms':>10} {'parse ms':>9} {'records':>8}")
    for rel in releases:
        shown = rel or Lab(LabSpec()).release
        for name, cmd_ms, parse_ms, n in bench_parse(rel, max(args.repeat, 5), args.port_base):
            print(f"{shown:>6} {name:<27} {cmd_ms:>10.1f} {parse_ms:>9.2f} {n:>8}")
    py = sys.executable
    bindir = Path(py).parent
    base = time_cmd([py, "-c", "pass"], 20)
    rows = [("python -c pass", base)]
    for name in ("slurmkit", "gpusub"):
        exe = bindir / name
        argv = [str(exe), "--help"] if exe.exists() else [py, "-m", f"slurmkit.cli.{'main' if name == 'slurmkit' else 'gpusub'}", "--help"]
        rows.append((f"{name} --help", time_cmd(argv, 20)))
    print()
    print(f"{'command':<18} {'median ms':>10} {'x python -c pass':>17}")
    for name, t in rows:
        print(f"{name:<18} {t * 1000:>10.1f} {t / base:>17.1f}")


if __name__ == "__main__":
    main()
