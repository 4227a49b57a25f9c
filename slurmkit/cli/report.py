"""`slurmkit report fragmentation`: how usable the free GPUs are for multi-node jobs, now.

Three Slurm calls at most: ``scontrol -o -d show node`` (states and free GPUs of every node, once),
``scontrol -o show partition`` (only with --partition) and ``scontrol show topology`` (only without an
inventory that defines the topology). Everything else is ``slurmkit.placement``. Exit codes: 0 ok, 2 bad
input (unknown partition, a topology naming nodes Slurm does not know, --png without matplotlib).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.placement import PlacementTopology


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def report() -> None:
    """Cluster reports."""


@report.command("fragmentation")
@click.option("-p", "--partition", default=None, help="Only this partition's nodes [every node in the topology].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Also draw the switch tree coloured by free capacity (needs the 'plot' extra).")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Take the topology from this inventory [the site inventory: $SLURMKIT_INVENTORY, slurmkit.yaml "
                   "beside $SLURM_CONF, /etc/slurm/slurmkit.yaml; else scontrol show topology].")
def fragmentation_cmd(partition: str | None, as_json: bool, png: str | None, inventory: str | None) -> None:
    """Free GPUs, free whole nodes and leaves, the largest job that could start now, a fragmentation index.

    The index is 0 when every free node sits in a whole free leaf and approaches 1 - 1/leaf-size when free
    nodes are scattered one per leaf (see slurmkit.placement.fragmentation).
    """
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.errors import UsageError
    from slurmkit.placement import fragmentation
    from slurmkit.placement.render import format_table, require_matplotlib, write_png
    from slurmkit.placement.state import node_states, partition_nodes

    if png:
        require_matplotlib()  # before any Slurm call: a missing extra is a usage error, nothing is written
    if inventory is None:
        import os

        from slurmkit.siteinv import find_inventory

        inventory = find_inventory(os.environ)
    backend = CLIBackend()
    states = node_states(backend.nodes())
    topo, source = _topology(backend, inventory, states.keys())
    outside: list[str] = []
    if partition:
        members = partition_nodes(backend.partitions(), partition)
        outside = [n for n in members if n not in topo.node_index]
        topo_in = topo.restrict(members)
        if not topo_in.leaf_names:
            raise UsageError(f"partition {partition!r}: none of its nodes are in the {source} topology")
        topo = topo_in
    frag = fragmentation(topo, states)
    where = f"partition {partition}" if partition else "all nodes"
    title = f"fragmentation of {where}: {frag.nodes} nodes, {frag.gpus} GPUs, topology from {source}"
    if png:
        write_png(png, topo, states, frag, title=title)
    if as_json:
        doc = {"partition": partition, "topology": source, "kind": topo.kind, **frag.to_json(),
               "nodes_outside_topology": outside}
        if png:
            doc["png"] = png
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(format_table(frag, title), nl=False)
    if outside:
        from slurmkit import hostlist

        click.echo(f"\nnot counted: {hostlist.fold(outside)} ({len(outside)} node(s) of {partition} in no {frag.unit})")
    if png:
        click.echo(f"\npicture: {png}")


def _topology(
    backend: CLIBackend, inventory: str | None, known: Collection[str]
) -> tuple[PlacementTopology, str]:
    """The inventory's topology when it defines one, else Slurm's, else one flat pseudo-leaf of every node.

    ``known`` are the nodes Slurm reports: a topology naming any other node is a usage error (one line).
    """
    from slurmkit.errors import UsageError
    from slurmkit.placement import PlacementTopology

    if not known:
        raise UsageError("Slurm reports no nodes")
    if inventory:
        from slurmkit.model import load_cluster

        model = load_cluster(inventory).topology
        if model.switches or model.blocks:
            return PlacementTopology.from_model(model, known_nodes=known), f"inventory {inventory}"
    records = backend.topology()
    if records:
        return PlacementTopology.from_records(records, known_nodes=known), "slurm"
    blocks = backend.blocks()
    if blocks:
        return PlacementTopology.from_block_records(blocks, known_nodes=known), "slurm"
    return PlacementTopology.flat(known), "none (flat)"


@report.command("firmware")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False),
              help="The hooks' state dir holding <node>/last-health.json [$SLURMKIT_STATE_DIR or /var/lib/slurmkit].")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Take the expected versions from this inventory's hooks.checks.firmware [majority otherwise].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def firmware_cmd(state_dir: str | None, inventory: str | None, as_json: bool) -> None:
    """Driver, VBIOS and InfoROM versions across the fleet's health records, and the odd nodes out (exit 1 if any).

    Reads each node's latest health record (the firmware check's evidence); the expected set is the inventory's
    hooks.checks.firmware, else the version most nodes run.
    """
    from slurmkit.cli.hookrun import state_dir_default
    from slurmkit.errors import UsageError
    from slurmkit.health.fleet import firmware_report, format_report, load_records

    sdir = state_dir or state_dir_default()
    records = load_records(sdir)
    if not records:
        raise UsageError(f"{sdir}: no health records (<node>/last-health.json) to report on")
    expected = None
    if inventory:
        from slurmkit.health.policy import parse_policy
        from slurmkit.model import load_cluster

        fw = parse_policy(load_cluster(inventory).hooks.checks, source=inventory).check("firmware")
        expected = {k: fw.get(k) for k in ("driver", "vbios", "inforom")}
    rep = firmware_report(records, expected)
    click.echo(json.dumps(rep, indent=1, sort_keys=True) if as_json else format_report(rep))
    raise SystemExit(1 if rep["odd"] else 0)


def _when(s: str, now: float, flag: str) -> float:
    """``7d``, ``12h``, ``30m`` before now, ``now``, or a local date/time (``2026-11-27``, ``2026-11-27T08:00``)."""
    import re
    from datetime import datetime

    from slurmkit.errors import UsageError

    m = re.fullmatch(r"(\d+)([dhm])", s.strip())
    if m:
        return now - int(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
    if s.strip() == "now":
        return now
    try:
        return datetime.fromisoformat(s.strip()).timestamp()
    except ValueError:
        raise UsageError(f"{flag}: expected 7d, 12h, 30m, now or a date/time like 2026-11-27T08:00, got {s!r}") from None


@report.command("utilisation")
@click.option("--since", default="7d", show_default=True, help="Window start: 7d, 12h, 30m ago, or a local date/time.")
@click.option("--until", "until", default="now", show_default=True, help="Window end (at most now).")
@click.option("--by", type=click.Choice(["partition", "account", "user", "gpu-type"]), default="partition",
              show_default=True, help="Group the figures by this.")
@click.option("--target", type=click.FloatRange(0, 100), default=None,
              help="Utilisation target in percent [the inventory's capacity.utilisation_target_pct, else 92].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Also draw allocated against available GPU-hours per day (needs the 'plot' extra).")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Read the target from this inventory [the site inventory, as report fragmentation finds it].")
def utilisation_cmd(since: str, until: str, by: str, target: float | None, as_json: bool, png: str | None,
                    inventory: str | None) -> None:
    """GPU-hours available (less down and drained time), allocated, and the share against the target, for the
    cluster, per group and per day, from slurmdbd: one sacctmgr and one sacct query (docs/reports.md)."""
    import os
    import time

    from slurmkit.accounts import utilisation as ut
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.errors import UsageError
    from slurmkit.placement.render import require_matplotlib

    if png:
        require_matplotlib()
    now = time.time()
    start, end = _when(since, now, "--since"), min(_when(until, now, "--until"), now)
    if start >= end:
        raise UsageError(f"--since ({since}) is not before --until ({until})")
    if target is None:
        if inventory is None:
            from slurmkit.siteinv import find_inventory

            inventory = find_inventory(os.environ)
        pct = 92.0
        if inventory:
            from slurmkit.model.load import load_cluster

            pct = load_cluster(inventory).capacity.utilisation_target_pct
    else:
        pct = target
    nodes = [ut.NodeGPUs(n.name, ut.gpu_types(n.gres), n.partitions) for n in CLIBackend().nodes()]
    rep = ut.read(start, end, by, pct / 100, nodes, now=now)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=1))
    else:
        for line in ut.table(rep):
            click.echo(line)
    if png:
        ut.write_png(rep, png)
        if not as_json:
            click.echo(f"wrote {png}")


@report.command("reserve")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Node groups and capacity.reserve_pct from this inventory [the site inventory, as report "
                   "fragmentation finds it; without one: the whole cluster, 15%].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def reserve_cmd(inventory: str | None, as_json: bool) -> None:
    """Spare capacity now per node group (healthy idle nodes, powered up or down) against the planned reserve;
    exit 1 when a group is below its plan, so a cron job or a check can act on it."""
    import os

    from slurmkit.backend.cli import CLIBackend
    from slurmkit.elastic.reserve import reserve, table

    if inventory is None:
        from slurmkit.siteinv import find_inventory

        inventory = find_inventory(os.environ)
    cluster = None
    if inventory:
        from slurmkit.model.load import load_cluster

        cluster = load_cluster(inventory)
    rows = reserve(cluster, CLIBackend().nodes())
    pct = cluster.capacity.reserve_pct if cluster else 15.0
    if as_json:
        click.echo(json.dumps({"reserve_pct": pct, "groups": [r.to_json() for r in rows]}, indent=1))
    else:
        for line in table(rows, pct):
            click.echo(line)
    if any(r.below_plan for r in rows):
        raise SystemExit(1)
