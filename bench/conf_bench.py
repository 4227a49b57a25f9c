"""Config generation at scale: generate() for 1k, 10k and 100k GPU nodes.

Each cluster is a fat tree (32 nodes per leaf, 8 leaves per spine, one core) of two node shapes
(8 x H100 and 4 x L40S, half each), so slurm.conf must stay the same size whatever the node count.
Prints wall time (best of --repeat) of loading the inventory (the loader folds every hostlist once), of generate() (best of
--repeat, model already loaded), of the static cross-file check,
the size of every file and the slurm.conf line count.

    python bench/conf_bench.py [--sizes 1000,10000,100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from slurmkit.generate import generate
from slurmkit.generate.validate import static_check
from slurmkit.model.load import load_cluster_dict


def inventory(n: int) -> dict:
    half = n // 2
    width = len(str(n))
    hosts = [f"gpu{i:0{width}d}" for i in range(1, n + 1)]
    leaves = [hosts[i:i + 32] for i in range(0, n, 32)]
    switches = [{"name": f"leaf{k:05d}", "nodes": f"gpu[{leaf[0][3:]}-{leaf[-1][3:]}]"} for k, leaf in enumerate(leaves)]
    spines = [switches[i:i + 8] for i in range(0, len(switches), 8)]
    switches += [{"name": f"spine{k:04d}", "switches": [s["name"] for s in grp]} for k, grp in enumerate(spines)]
    switches.append({"name": "core", "switches": [f"spine{k:04d}" for k in range(len(spines))]})
    return {
        "cluster": "bench",
        "slurm_version": "24.11",
        "controller": {"hosts": ["ctl1", "ctl2"], "state_dir": "/shared/slurm/statesave"},
        "accounting": {"host": "dbd1"},
        "node_groups": [
            {"name": "h100", "hosts": f"gpu[{1:0{width}d}-{half:0{width}d}]",
             "cpu": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2}, "memory_mb": 2063521,
             "reserve": {"memory_mb": 32768, "cores": 2},
             "gpus": {"type": "h100", "count": 8, "files": "/dev/nvidia[0-7]",
                      "cores": ["0-55"] * 4 + ["56-111"] * 4, "links": "nvlink"},
             "features": ["h100"], "weight": 10},
            {"name": "l40s", "hosts": f"gpu[{half + 1:0{width}d}-{n:0{width}d}]",
             "cpu": {"sockets": 1, "cores_per_socket": 64, "threads_per_core": 2}, "memory_mb": 773840,
             "gpus": {"type": "l40s", "count": 4, "files": "/dev/nvidia[0-3]", "cores": ["0-63"] * 4, "shards": 32},
             "features": ["l40s"], "weight": 20},
        ],
        "partitions": [{"name": "h100", "groups": ["h100"], "default": True}, {"name": "l40s", "groups": ["l40s"]}],
        "topology": {"switches": switches},
    }


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| nodes | load s | generate s | static check s | slurm.conf lines | slurm.conf B | gres.conf B | topology.conf B | cgroup.conf B |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        inv = inventory(n)
        t_load, cluster = best(lambda inv=inv: load_cluster_dict(inv), args.repeat)
        t_gen, files = best(lambda c=cluster: generate(c), args.repeat)  # type: ignore[misc]
        t_chk, rep = best(lambda f=files: static_check(f), args.repeat)  # type: ignore[misc]
        assert not rep.errors, rep.errors[:3]  # type: ignore[attr-defined]
        f: dict[str, str] = files  # type: ignore[assignment]
        lines = len(f["slurm.conf"].splitlines())
        print(f"| {n:,} | {t_load:.3f} | {t_gen:.3f} | {t_chk:.3f} | {lines} | {len(f['slurm.conf']):,} | "
              f"{len(f['gres.conf']):,} | {len(f['topology.conf']):,} | {len(f['cgroup.conf']):,} |")


def preset(path: str, repeat: int) -> None:
    """`conf generate` vs `conf import` of its files (issue 19: import of the 4,096-node preset < 1 s)."""
    from slurmkit.adopt.importer import import_site
    from slurmkit.model import yamlio
    from slurmkit.model.load import load_cluster, load_cluster_text

    print("| preset | release | generate s | import s | import + load s | lost |")
    print("|---|---|---:|---:|---:|---:|")
    for ver in ("22.05", "24.11"):
        cluster = load_cluster(path)
        t_gen, files = best(lambda c=cluster, v=ver: generate(c, version=v), repeat)  # type: ignore[misc]
        t_imp, res = best(lambda f=files, v=ver: import_site(f, v), repeat)  # type: ignore[misc]
        t_all, _c = best(lambda f=files, v=ver: load_cluster_text(yamlio.dump(import_site(f, v).inventory)), repeat)  # type: ignore[misc]
        print(f"| {path} | {ver} | {t_gen:.3f} | {t_imp:.3f} | {t_all:.3f} | {len(res.lost)} |")  # type: ignore[attr-defined]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--preset":
        preset(sys.argv[2], 3)
        sys.exit(0)
    main()
