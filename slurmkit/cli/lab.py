"""`slurmkit lab up|status|env|down`."""

from __future__ import annotations

import json
import os

import click

from slurmkit.lab import DEFAULT_DIR, DEFAULT_PORT_BASE, Lab, LabSpec

_dir = click.option(
    "--dir", "directory", default=lambda: os.environ.get("SLURMKIT_LAB_DIR", DEFAULT_DIR), show_default=DEFAULT_DIR,
    help="Lab directory (env SLURMKIT_LAB_DIR).",
)


@click.group()
def lab() -> None:
    """A real multi-node Slurm (munged, slurmctld, N slurmd) on this one machine."""


@lab.command()
@_dir
@click.option("--nodes", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 16))
@click.option("--gpu-type", default="h100", show_default=True)
@click.option("--nodes-per-leaf", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--accounting", is_flag=True, help="Add MariaDB + slurmdbd so sacct works.")
@click.option("--hooks", is_flag=True, help="Wire slurmkit's prolog/epilog/health hooks (fake NVML per node).")
@click.option("--healthcheck-interval", default=0, type=click.IntRange(0), help="HealthCheckInterval with --hooks.")
@click.option("--fake-nvml", "fake_nvml", type=click.Path(exists=True, dir_okay=False),
              help="With --hooks: recorded NVML state (JSON) served to every node's checks.")
@click.option("--port-base", default=lambda: int(os.environ.get("SLURMKIT_LAB_PORT_BASE", DEFAULT_PORT_BASE)),
              show_default=str(DEFAULT_PORT_BASE), type=click.IntRange(1024, 60000),
              help="slurmctld port; slurmd of nodeI on base+I (env SLURMKIT_LAB_PORT_BASE).")
def up(directory: str, nodes: int, gpus_per_node: int, gpu_type: str, nodes_per_leaf: int, accounting: bool,
       hooks: bool, healthcheck_interval: int, fake_nvml: str | None, port_base: int) -> None:
    """Start the lab and wait until every node is idle."""
    spec = LabSpec(dir=directory, nodes=nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type,
                   nodes_per_leaf=nodes_per_leaf, accounting=accounting, port_base=port_base, hooks=hooks,
                   healthcheck_interval=healthcheck_interval, fake_nvml_template=fake_nvml)
    lab_ = Lab(spec)
    took = lab_.up(progress=lambda m: click.echo(f"lab: {m}", err=True))
    click.echo(f"lab: up in {took:.2f}s: {nodes} nodes x {gpus_per_node} {gpu_type}, leaves of {nodes_per_leaf}, in {lab_.dir}")
    click.echo("Use it:")
    click.echo(f"  export SLURM_CONF={lab_.conf}     # or: eval \"$(slurmkit lab env --dir {lab_.dir})\"")
    click.echo("  sinfo; srun -N4 hostname; gpusub train.py --nodes 4 --dry-run")
    click.echo(f"  slurmkit lab down --dir {lab_.dir}")


@lab.command()
@_dir
@click.option("--json", "as_json", is_flag=True)
def status(directory: str, as_json: bool) -> None:
    """Daemons and node states of the lab."""
    st = Lab.load(directory).status()
    if as_json:
        click.echo(json.dumps(st, indent=1))
        return
    if not st["up"]:
        click.echo(f"lab: not running in {directory}")
        return
    daemons = st["daemons"]
    assert isinstance(daemons, dict)
    click.echo(f"lab: up in {st['dir']}  (SLURM_CONF={st['slurm_conf']})")
    click.echo("daemons: " + ", ".join(f"{k}[{v}]" for k, v in daemons.items()))
    click.echo(f"{'NODE':<10} {'STATE':<22} {'GRES':<22} REASON")
    nodes = st["nodes"]
    assert isinstance(nodes, list)
    for n in nodes:
        click.echo(f"{n['name']:<10} {n['state']:<22} {n['gres']:<22} {n['reason']}")


@lab.command()
@_dir
def env(directory: str) -> None:
    """Print `export SLURM_CONF=...` for the lab (use with eval)."""
    lab_ = Lab.load(directory)
    if not lab_.conf.exists():
        raise click.ClickException(f"no lab config in {lab_.dir}; run `slurmkit lab up` first")
    click.echo(f"export SLURM_CONF={lab_.conf}")


@lab.command()
@_dir
def down(directory: str) -> None:
    """Cancel jobs and stop exactly what `up` started (and processes jobs left behind)."""
    lab_ = Lab.load(directory)
    if not lab_.is_up():
        click.echo(f"lab: nothing running in {lab_.dir}")
        return
    stopped = lab_.down()
    click.echo(f"lab: stopped {len(stopped)} daemons in {lab_.dir}")
