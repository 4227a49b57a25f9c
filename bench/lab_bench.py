"""Lab start/stop times and memory, and CLI start-up times.

    python bench/lab_bench.py [--repeat 5]

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


def bench_lab(nodes: int, repeat: int) -> dict[str, object]:
    spec = LabSpec(dir=f"/tmp/slurmkit-bench-lab-{nodes}", nodes=nodes, port_base=25000)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'nodes':>5} {'cold up s':>10} {'warm up s (median/max)':>24} {'down s':>8} {'RSS MiB':>8}")
    for n in (4, 8):
        r = bench_lab(n, args.repeat)
        cold = f"{r['cold_up']:.3f}" + ("" if r["cold_is_cold"] else "*")
        print(f"{n:>5} {cold:>10} {r['warm_up_median']:>13.3f} / {r['warm_up_max']:.3f} {r['down_median']:>8.3f} {r['rss_mib']:>8.1f}")
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
