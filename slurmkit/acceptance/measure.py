"""The measurement an acceptance job runs: an all-reduce bus-bandwidth sweep. Also runs by hand, without Slurm.

    python3 measure.py --sizes 1M,16M,256M --out result.json            # under srun (one task per GPU) or torchrun
    torchrun --standalone --nproc-per-node=8 measure.py --transport nccl  # one node, no Slurm

Ranks come from the launcher's environment: ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (torchrun, or gpusub's srun
launcher, which sets them from ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``), ``MASTER_ADDR``/``MASTER_PORT``
for the rendezvous. Transports, first one available: nccl-tests' ``all_reduce_perf``/``alltoall_perf`` (``--op``)
(one process driving ``--gpus`` GPUs on one node; between nodes one process per GPU, ``-g 1``, each srun task
running the binary under the PMI that srun gives it: PMIx or PMI-2, ``SLURM_MPI_TYPE``, so an MPI build of
nccl-tests finds its peers without mpirun), torch.distributed over NCCL (CUDA GPUs), gloo on CPU. Bus bandwidth
as nccl-tests defines it (``busbw.py``). Rank 0 writes ``--out`` (JSON) and prints an nccl-tests-like table.

Run as a file by the job (``python3 -u .../measure.py``): it imports only the standard library, torch, and
slurmkit.acceptance.busbw (with the repository or the installed package on sys.path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the package is two levels up (repository or site-packages)
    sys.path[0:1] = [str(Path(__file__).resolve().parents[2])]
from slurmkit.acceptance.busbw import (  # noqa: E402
    OPS,
    Point,
    busbw_allreduce,
    busbw_alltoall,
    parse_all_reduce_perf,
    parse_sizes,
    peak,
    point,
)

TRANSPORTS = ("auto", "nccl-tests", "nccl", "gloo")


def visible_gpu_count(value: str) -> int:
    """How many GPUs CUDA_VISIBLE_DEVICES names: indexes (``0,1``) or, with gres.conf Flags=env_uuid (26.05) and
    for MIG devices, UUIDs (``GPU-8932f937-...,MIG-...``; gres_common.c common_gres_set_env() at slurm-26-05-3-1
    writes the device's unique_id there). Counted, never read as numbers."""
    return len([d for d in value.split(",") if d.strip()])


def _env_int(*names: str, default: int) -> int:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(str(v).split("(")[0])
            except ValueError:
                continue
    return default


def run_nccl_tests(sizes: list[int], gpus: int, iters: int, warmup: int, exe: str) -> tuple[list[Point], str]:
    """``all_reduce_perf -b MIN -e MAX -f 2 -g GPUS`` (or ``alltoall_perf``): one process per srun task. On one
    node it drives every GPU (``-g GPUS``); between nodes each task drives one GPU (``-g 1``) and the MPI build
    of nccl-tests joins the others through the PMI server of the task's slurmstepd: PMIx by its environment
    variables, PMI-2 by the descriptor in ``PMI_FD``, which is passed on to the binary."""
    argv = [exe, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2", "-g", str(gpus), "-n", str(iters),
            "-w", str(warmup)]
    fds: tuple[int, ...] = ()
    if os.environ.get("PMI_FD", "").isdigit():
        fds = (int(os.environ["PMI_FD"]),)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, pass_fds=fds)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    pts = parse_all_reduce_perf(proc.stdout)
    if not pts:
        raise RuntimeError(f"{' '.join(argv)}: no result rows in its output")
    return pts, proc.stdout


def run_torch(sizes: list[int], iters: int, warmup: int, transport: str, timeout_s: int, blocks: int = 5,
              min_block: float = 0.2, op: str = "all_reduce") -> tuple[list[Point], dict]:
    """Per size: ``blocks`` timed blocks of at least ``iters`` all-reduces and ``min_block`` seconds each; the
    point is the best block (its mean time per all-reduce), ``mean_busbw`` the mean over blocks."""
    import torch
    import torch.distributed as dist

    rank = _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", default=0)
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", default=1)
    local = _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    use_nccl = transport == "nccl" or (transport in ("auto", "nccl-tests") and torch.cuda.is_available())
    if use_nccl and not torch.cuda.is_available():
        raise RuntimeError("--transport nccl: torch sees no CUDA GPU on this node")
    backend = "nccl" if use_nccl else "gloo"
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = os.environ.get("MASTER_PORT", "29500")
    if use_nccl:
        torch.cuda.set_device(local % max(1, torch.cuda.device_count()))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))

    def sync() -> None:
        if use_nccl:
            torch.cuda.synchronize()

    def agreed_max(x: float) -> float:  # every rank takes the same decision / the slowest rank's time
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    pts: list[Point] = []
    means: list[float] = []
    bus = busbw_alltoall if op == "alltoall" else busbw_allreduce
    try:
        for size in sizes:
            n_el = max(world, size // 4 // world * world)  # alltoall: equal chunks per rank
            buf = torch.ones(n_el, dtype=torch.float32, device=device)
            out_buf = torch.empty_like(buf) if op == "alltoall" else buf

            def coll(buf=buf, out_buf=out_buf) -> None:  # type: ignore[no-untyped-def]
                if op == "alltoall":  # all_to_all_single: NCCL, and gloo on CPU tensors (measured, torch 2.x)
                    dist.all_to_all_single(out_buf, buf)
                else:
                    dist.all_reduce(buf)

            for _ in range(warmup):
                coll()
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            coll()
            sync()
            one = agreed_max(time.perf_counter() - t0)
            # blocks of at least min_block seconds: a CPU quota (the lab's slow node) or a co-tenant cannot hide
            # inside one short block, and the best block is what the link can do when nothing else interferes
            n = max(iters, int(min_block / max(one, 1e-6)) + 1)
            times = []
            for _ in range(blocks):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(n):
                    coll()
                sync()
                times.append(agreed_max((time.perf_counter() - t0) / n))
            nbytes = buf.numel() * 4
            pts.append(point(nbytes, min(times), world, bus))
            means.append(point(nbytes, sum(times) / len(times), world, bus).busbw)
            del buf, out_buf
        hosts: list[object] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
    finally:
        dist.destroy_process_group()
    info = {"rank": rank, "world": world, "backend": backend, "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if use_nccl else None,
            "device": torch.cuda.get_device_name(device) if use_nccl else "cpu", "hosts": hosts,
            "mean_busbw": [round(x, 4) for x in means], "blocks": blocks, "min_block_s": min_block}
    return pts, info


def run_ib_write_bw(hca: str, seconds: int, retry_s: float = 60.0) -> int:
    """One HCA port between the job's two nodes: task 0 is perftest's server (``ib_write_bw -d DEV -i PORT -p
    TCP``), task 1 the client (the same and the server's address), which retries while the server is not yet
    listening and writes the result. ``MASTER_ADDR``/``MASTER_PORT`` (gpusub's rendezvous of the job, unused
    otherwise) give the server's address and a free TCP port for perftest's exchange."""
    from slurmkit.acceptance.ib import parse_ib_write_bw

    exe = shutil.which("ib_write_bw")
    if not exe:
        print("measure: ib_write_bw (perftest) is not on PATH", file=sys.stderr)
        return 2
    rank = _env_int("SLURM_PROCID", default=0)
    dev, port = hca.split(":", 1) if ":" in hca else (hca, "1")
    argv = [exe, "-d", dev, "-i", port, "-p", os.environ.get("MASTER_PORT", "18515"), "-F", "--report_gbits",
            "-D", str(seconds)]
    if rank == 0:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + retry_s + 60)
        if proc.returncode != 0:
            print(f"measure: server {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}",
                  file=sys.stderr)
        return proc.returncode
    argv.append(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    deadline = time.monotonic() + retry_s
    while True:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)  # the server on the other node is not listening yet
    if proc.returncode != 0:
        print(f"measure: client {' '.join(argv)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}",
              file=sys.stderr)
        return proc.returncode
    run = parse_ib_write_bw(proc.stdout)
    gbps = run.gbps
    result = {"transport": "ib_write_bw", "hca": f"{dev}:{port}", "device": run.device, "link_type": run.link_type,
              "unit": run.unit, "gbps": gbps, "world": 2, "hosts": [socket.gethostname()],
              "points": [{"size": r.size, "avg_gbps": r.avg_gbps, "peak_gbps": r.peak_gbps} for r in run.rows],
              # the plan compares GB/s like every other level
              "peak_busbw": gbps / 8, "raw_tail": proc.stdout[-2000:]}
    print(proc.stdout)
    print(f"measure: ib_write_bw {dev}:{port}: {gbps:.4g} Gb/s")
    if OUT:
        tmp = Path(OUT).with_name(f".{Path(OUT).name}.tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, OUT)
    return 0


OUT: str | None = None


def table(points: list[Point]) -> str:
    lines = [f"#{'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8}", f"#{'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    lines += [f" {p.size:>12} {p.time_us:>10.1f} {p.algbw:>8.3f} {p.busbw:>8.3f}" for p in points]
    lines.append(f"# peak bus bandwidth: {peak(points):.4g} GB/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="measure.py", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1M,4M,16M", help="buffer sizes (bytes; K/M/G suffixes)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=5, help="timed blocks per size (torch); the best one counts")
    ap.add_argument("--min-block", type=float, default=0.2, help="seconds each timed block lasts at least (torch)")
    ap.add_argument("--transport", choices=TRANSPORTS, default="auto")
    ap.add_argument("--op", choices=OPS, default="all_reduce", help="the collective (nccl-tests' <op>_perf)")
    ap.add_argument("--gpus", type=int, default=0, help="nccl-tests: GPUs the single process drives (0: all)")
    ap.add_argument("--timeout", type=int, default=300, help="rendezvous / collective timeout, seconds")
    ap.add_argument("--out", help="rank 0 writes the result here (JSON)")
    ap.add_argument("--ib-write-bw", metavar="HCA:PORT", help="measure this HCA port with perftest's ib_write_bw "
                    "between the job's two nodes (task 0 serves, task 1 measures and writes --out)")
    ap.add_argument("--seconds", type=int, default=5, help="ib_write_bw -D: seconds of each run")
    a = ap.parse_args(argv)
    if a.ib_write_bw:
        global OUT
        OUT = a.out
        return run_ib_write_bw(a.ib_write_bw, a.seconds)
    sizes = parse_sizes(a.sizes)
    t_start = time.time()
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    binary = f"{a.op}_perf"
    exe = shutil.which(binary)
    result: dict[str, object]
    if a.transport == "nccl-tests" or (a.transport == "auto" and exe and world == 1):
        if not exe:
            print(f"measure: --transport nccl-tests: {binary} is not on PATH", file=sys.stderr)
            return 2
        rank = _env_int("SLURM_PROCID", "PMIX_RANK", "PMI_RANK", default=0)
        if world > 1:  # one srun task per GPU, joined by srun's PMI (SLURM_MPI_TYPE)
            gpus, ranks = 1, world
            launch = f"srun --mpi={os.environ.get('SLURM_MPI_TYPE', '?')}, {world} tasks x -g 1"
        else:
            gpus = a.gpus or visible_gpu_count(os.environ.get("CUDA_VISIBLE_DEVICES", "")) or 1
            ranks, launch = gpus, f"one process, -g {gpus}"
        try:
            pts, raw = run_nccl_tests(sizes, gpus, a.iters, a.warmup, exe)
        except RuntimeError as exc:
            print(f"measure: rank {rank}: {exc}", file=sys.stderr)
            return 1
        result = {"transport": f"nccl-tests {binary}", "launch": launch, "world": ranks,
                  "hosts": [socket.gethostname()], "raw_tail": raw[-2000:]}
    else:
        pts, info = run_torch(sizes, a.iters, a.warmup, a.transport, a.timeout, a.blocks, a.min_block, a.op)
        rank = int(info.pop("rank"))
        result = {"transport": f"torch-{info['backend']}" + ("" if a.op == "all_reduce" else f" {a.op}"), **info}
    if rank != 0:
        return 0
    result.update({"points": [p.as_dict() for p in pts], "peak_busbw": peak(pts), "seconds": time.time() - t_start})
    print(table(pts))
    print(f"measure: {result['transport']} over {result['world']} rank(s): peak busbw {peak(pts):.4g} GB/s")
    if a.out:
        tmp = Path(a.out).with_name(f".{Path(a.out).name}.tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
