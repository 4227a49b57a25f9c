"""`slurmkit monitor generate` and `slurmkit exporter`: Prometheus and Grafana for the cluster."""

from __future__ import annotations

import click


@click.group()
def monitor() -> None:
    """Prometheus scrape config, alert rules and Grafana dashboards from the inventory."""


@monitor.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False),
              help="Directory for prometheus.yml, slurmkit-alerts.yml and the dashboards' JSON.")
def generate(inventory: str, out: str) -> None:
    """Write prometheus.yml (node_exporter per node, dcgm-exporter where the inventory says, the slurmkit
    exporter), the alert rules and the Grafana dashboards into OUT (replaced files are backed up)."""
    from slurmkit.generate.rollout import write_files
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.generate import generate as gen

    files = gen(load_cluster(inventory))
    write_files(files, out)
    for name in sorted(files):
        click.echo(f"wrote {out.rstrip('/')}/{name}")


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--listen", default="0.0.0.0:9799", show_default=True, help="host:port to serve /metrics on.")
@click.option("--cache", "cache_s", default=15.0, show_default=True,
              help="Seconds a scrape's answer is reused (one batch of Slurm queries per period).")
@click.option("--timeout", default=10.0, show_default=True, help="Seconds each Slurm query may take.")
@click.option("--once", is_flag=True, help="Print one scrape and exit.")
def exporter(inventory: str, listen: str, cache_s: float, timeout: float, once: bool) -> None:
    """Serve the cluster's view for Prometheus: GPUs by state per partition/group/type, jobs and GPUs per
    account/QOS/user, pending GPU jobs by reason, free nodes per leaf, GPU-hours per account (with accounting)."""
    from slurmkit.backend.cli import default_backend
    from slurmkit.errors import UsageError
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.exporter import Scraper, serve

    cluster = load_cluster(inventory)
    backend = default_backend(timeout=timeout)
    sacct = None
    if cluster.accounting is not None:
        from slurmkit.backend.run import run

        def sacct() -> str:
            return run(["sacct", "-a", "-X", "-n", "-P", "--truncate", "-S", "now-1days", "-E", "now",
                        "-o", "Account,ElapsedRaw,AllocTRES"], timeout=timeout).stdout

    scraper = Scraper(cluster, backend, cache_s, sacct)
    if once:
        click.echo(scraper.text(), nl=False)
        return
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise UsageError(f"--listen: expected host:port, got {listen!r}")
    srv = serve(scraper, host or "0.0.0.0", int(port))
    click.echo(f"slurmkit exporter on http://{listen}/metrics", err=True)
    srv.serve_forever()
