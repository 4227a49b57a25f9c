"""`slurmkit acceptance run`: the edge over slurmkit.acceptance (options, environment, printing, exit codes)."""

from __future__ import annotations

import json
import sys

import click


@click.group()
def acceptance() -> None:
    """Cluster acceptance: find the slow GPU, link or node before the users do."""


@acceptance.command("run")
@click.option("-p", "--partition", default=None, help="Partition to test (default: the default partition).")
@click.option("--nodes", default=None, metavar="LIST", help="Only these nodes (a host list, e.g. node[1-4]).")
@click.option("--levels", default=None,
              help="Comma list of node (each node's GPUs), pair, hca (ib_write_bw per HCA port), leaf (each leaf "
                   "switch), all. Default: all of them, hca where HCAs are known and perftest is installed.")
@click.option("--hcas", default=None, metavar="LIST",
              help="HCA ports for the hca level, e.g. mlx5_0,mlx5_1:2 (default: the inventory's compute IB/RoCE NICs, "
                   "port 1).")
@click.option("--drain", "do_drain", is_flag=True,
              help="Drain confirmed-bad nodes (reason 'slurmkit: acceptance ...'); without it nothing changes.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option("--transport", type=click.Choice(["auto", "nccl-tests", "nccl", "gloo"]), default="auto",
              show_default=True,
              help="auto: nccl-tests' all_reduce_perf if installed, NCCL if this host has the NVIDIA driver, else gloo.")
@click.option("--sizes", default=None, help="Buffer sizes of the sweep, e.g. 16M,256M,1G (default per transport).")
@click.option("--iters", default=None, type=click.IntRange(1, 10000), help="All-reduces per size.")
@click.option("-k", "mad_k", default=3.0, show_default=True, type=click.FloatRange(0, 100),
              help="Outlier rule: below median - k x MAD of log(busbw) ...")
@click.option("--tolerance", default=None, type=click.FloatRange(0.01, 0.99),
              help="... and below (1 - tolerance) x median (also the bisection's sibling margin). "
                   "Default: 0.25 over NCCL, 0.5 over gloo (CPU copies on shared hosts are noisy).")
@click.option("--out", "out", default="slurmkit-acceptance", show_default=True, type=click.Path(file_okay=False),
              help="Report dir (report.json, report.png, one run dir per job); a re-run resumes an unfinished report.")
@click.option("--fresh", is_flag=True, help="Start over instead of resuming an unfinished report.")
@click.option("--all-pairs", is_flag=True, help="Pair level: every pair instead of two matchings (the bench's baseline).")
@click.option("--job-time", default="15:00", show_default=True, help="Time limit of each measurement job.")
@click.option("--reservation", default=None, metavar="NAME",
              help="Run every measurement job in this reservation (a maintenance window); its nodes are the default.")
@click.option("--account", default=None, help="Charge the measurement jobs to this account (sbatch --account).")
@click.option("--qos", default=None, help="Run the measurement jobs under this QOS (sbatch --qos).")
@click.option("--op", type=click.Choice(["all_reduce", "alltoall"]), default="all_reduce", show_default=True,
              help="The collective: nccl-tests' all_reduce_perf / alltoall_perf, torch's all_reduce / all_to_all.")
@click.option("--mpi", default="auto", show_default=True,
              help="nccl-tests between nodes: srun's PMI plugin (pmix, pmi2; auto: $SLURM_MPI_TYPE, else PMIx, else "
                   "PMI-2 from srun --mpi=list; none: torch measures between nodes).")
def run(partition: str | None, nodes: str | None, levels: str | None, hcas: str | None, do_drain: bool, as_json: bool, transport: str,
        sizes: str | None, iters: int | None, mad_k: float, tolerance: float | None, out: str, fresh: bool,
        all_pairs: bool, job_time: str, reservation: str | None, account: str | None, qos: str | None, op: str,
        mpi: str) -> None:
    """Run the acceptance measurements on the cluster $SLURM_CONF points at."""
    import os
    import shutil

    from slurmkit.acceptance.busbw import Rule, default_tolerance
    from slurmkit.acceptance.report import table
    from slurmkit.acceptance.runner import Request, choose_transport
    from slurmkit.acceptance.runner import acceptance as run_acceptance
    from slurmkit.backend.cli import default_backend
    from slurmkit.jobs.spec import sbatch_value

    sbatch_value("--job-time", job_time)
    for flag, value in (("--reservation", reservation), ("--account", account), ("--qos", qos)):
        if value is not None:
            sbatch_value(flag, value)
    transport = choose_transport(transport, os.environ, shutil.which, op)
    if tolerance is None:
        tolerance = default_tolerance(transport)
    given = levels is not None
    levels = levels if levels is not None else "node,pair,hca,leaf,all"
    req = Request(partition=partition, nodes=nodes, levels=tuple(x.strip() for x in levels.split(",") if x.strip()),
                  levels_given=given, hcas=hcas,
                  transport=transport, sizes=sizes, iters=iters, out=os.path.abspath(out), drain=do_drain,
                  fresh=fresh, all_pairs=all_pairs, job_time=job_time, rule=Rule(k=mad_k, tol=tolerance),
                  reservation=reservation, account=account, qos=qos, op=op, mpi=mpi)
    try:
        doc = run_acceptance(req, default_backend(), lambda m: click.echo(f"acceptance: {m}", err=True))
    except KeyboardInterrupt:
        click.echo(f"acceptance: interrupted; {_in_flight(req.out)}", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        click.echo(table(doc))
    sys.stdout.flush()


def _in_flight(out: str) -> str:
    """What an interrupted run leaves behind, from its report: the jobs still queued or running keep going, and the
    same command resumes (waits for them, submits only what is missing)."""
    from pathlib import Path

    try:
        pending = json.loads((Path(out) / "report.json").read_text()).get("pending", {})
    except (OSError, ValueError):
        pending = {}
    ids = ",".join(p.get("job_id", "?") for p in pending.values())
    jobs = f"job(s) {ids} still in the queue (scancel {ids} to drop them); " if ids else ""
    return f"{jobs}the same command resumes from {out}/report.json"
