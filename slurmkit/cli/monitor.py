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
