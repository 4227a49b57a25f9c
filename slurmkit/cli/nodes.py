"""`slurmkit nodes add|remove`: nodes join or leave the running cluster that $SLURM_CONF points at.

Exit codes: 0 done, 1 the cluster did not take the change (rolled back, the message says so) or the new nodes did
not come up in time, 2 bad input (nothing changed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.elastic.change import Site

_common = [
    click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(1),
                 help="Seconds to wait for slurmctld, for jobs to leave, for new nodes to be idle."),
    click.option("--dry-run", is_flag=True, help="Say what would change and how; change nothing."),
    click.option("--no-real-parse", is_flag=True, help="Static checks only; skip the slurmctld parse of the new files."),
    click.option("--ctld-restart", default="systemctl restart slurmctld", show_default=True,
                 help="How this site restarts slurmctld, where the release needs it (a lab restarts its own)."),
]


def _opts(f):  # type: ignore[no-untyped-def]
    for o in reversed(_common):
        f = o(f)
    return f


def _target() -> tuple[Site, CLIBackend, str]:
    """(site, backend, release) for the cluster $SLURM_CONF points at (default /etc/slurm/slurm.conf)."""
    from slurmkit.lab.elastic import LabSite, lab_for_conf

    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if not conf.is_file():
        raise click.UsageError(f"$SLURM_CONF={conf}: no such file (the cluster to change)")
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.elastic.change import Site

    lab = lab_for_conf(conf)
    site: Site = LabSite(lab) if lab else Site(conf.parent)
    backend = CLIBackend(env=lab.env if lab else {"SLURM_CONF": str(conf)})
    return site, backend, ".".join(backend.version().split(".")[:2])


def _say(msg: str) -> None:
    click.echo(f"nodes: {msg}", err=True)


@click.group()
def nodes() -> None:
    """Nodes join or leave the running cluster ($SLURM_CONF's), inventory and files along with it."""


@nodes.command()
@click.argument("hosts")
@click.option("--group", required=True, help="Node group to add them to (a new one is shaped like --like).")
@click.option("--like", default=None, help="For a new group: the group it copies (default: the only one).")
@click.option("--switch", default=None, help="Leaf switch for them (default: a new leaf under the top switch).")
@_opts
def add(hosts: str, group: str, like: str | None, switch: str | None, timeout: float, dry_run: bool,
        no_real_parse: bool, ctld_restart: str) -> None:
    """Add HOSTS (a hostlist, e.g. node[5-8]) to the cluster: the inventory copy beside slurm.conf grows, the files
    are regenerated, and the cluster takes them by the least disruptive path its release allows (said first)."""
    import shlex

    from slurmkit import hostlist
    from slurmkit.elastic import change, edit, path

    names = hostlist.expand(hosts, "HOSTS")
    site, backend, release = _target()
    from slurmkit.lab.elastic import LabSite

    if isinstance(site, LabSite):
        site.check_add(release)  # what the lab cannot bring in, refused before anything changes
    site.ctld_restart = tuple(shlex.split(ctld_restart))
    e = edit.add_hosts(change.load_inventory(site.conf_dir), names, group, like=like, switch=switch)
    p = path.choose(release, adding=True)
    _say(e.summary)
    _say(p.statement("add"))
    if dry_run:
        for i, step in enumerate(p.steps, 1):
            click.echo(f"  {i}. {step}")
        click.echo(f"  {len(p.steps) + 1}. start slurmd on {hostlist.fold(names)}; wait until idle")
        return
    res = change.apply_edit(site, backend, e, p, version=release, real_parse=not no_real_parse, timeout=timeout,
                            progress=_say)
    site.start_nodes(names, _say)
    change.wait_idle(backend, names, timeout)
    click.echo(f"added {hostlist.fold(names)} to group {group} by {p.kind} in {res.seconds:.1f}s; idle")


@nodes.command()
@click.argument("hosts")
@click.option("--requeue", is_flag=True, help="Requeue the jobs running on HOSTS instead of waiting for them to end.")
@_opts
def remove(hosts: str, requeue: bool, timeout: float, dry_run: bool, no_real_parse: bool, ctld_restart: str) -> None:
    """Remove HOSTS: drain them, wait for their jobs (or requeue them), then shrink the inventory, regenerate and
    bring the cluster onto the new files; their slurmd is stopped (the lab) or is the site's to stop."""
    import shlex

    from slurmkit import hostlist
    from slurmkit.elastic import change, edit, path

    names = hostlist.expand(hosts, "HOSTS")
    site, backend, release = _target()
    site.ctld_restart = tuple(shlex.split(ctld_restart))
    e = edit.remove_hosts(change.load_inventory(site.conf_dir), names)
    p = path.choose(release, adding=False)
    _say(e.summary)
    _say(p.statement("remove"))
    if dry_run:
        click.echo(f"  0. drain {hostlist.fold(names)}; " + ("requeue their jobs" if requeue else "wait for their jobs"))
        for i, step in enumerate(p.steps, 1):
            click.echo(f"  {i}. {step}")
        return
    drained = change.drain_and_wait(backend, names, requeue=requeue, timeout=timeout, progress=_say)
    try:
        res = change.apply_edit(site, backend, e, p, version=release, real_parse=not no_real_parse,
                                timeout=timeout, progress=_say)
    except BaseException:
        if drained:  # nothing else changed: give the nodes back
            backend.resume(hostlist.fold(drained))
        raise
    site.stop_nodes(names, _say)
    click.echo(f"removed {hostlist.fold(names)} by {p.kind} in {res.seconds:.1f}s")
