"""`slurmkit nodes add|remove`: nodes join or leave the running cluster that $SLURM_CONF points at.

Exit codes: 0 done; 1 the change did not happen: the cluster did not take it, or the new nodes did not come into
service in time (both rolled back, the message says so), or another `nodes` command held the lock past
--lock-wait (nothing changed); 2 bad input, or jobs that the removal would fail (nothing changed)."""

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
                 help="Seconds to wait for slurmctld, and (add) for the new nodes to register or (remove) for their jobs to leave."),
    click.option("--dry-run", is_flag=True, help="Say what would change and how; change nothing."),
    click.option("--no-real-parse", is_flag=True, help="Static checks only; skip the slurmctld parse of the new files."),
    click.option("--ctld-restart", default="systemctl restart slurmctld", show_default=True,
                 help="How this site restarts slurmctld, where the release needs it (a lab restarts its own)."),
    click.option("--lock-wait", default=60.0, show_default=True, type=click.FloatRange(0),
                 help="Seconds to wait while another `nodes add|remove` changes this cluster (0: refuse at once)."),
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


def _command() -> str:
    """This command line, for the lock file (a second command names the holder with it)."""
    import shlex
    import sys

    return " ".join(["slurmkit", *(shlex.quote(a) for a in sys.argv[1:])])


def _reserve_lines(before: dict, after: dict) -> list[str]:
    """The planned reserve of each group the change resizes (issue 39 item 2); nothing where the inventory cannot be
    read as a whole (the change itself then reports the inventory's error)."""
    from slurmkit.elastic.reserve import plan_change
    from slurmkit.errors import SlurmkitError
    from slurmkit.model.load import load_cluster_dict

    try:
        return plan_change(load_cluster_dict(before), load_cluster_dict(after))
    except SlurmkitError:
        return []


@click.group()
def nodes() -> None:
    """Nodes join or leave the running cluster ($SLURM_CONF's), inventory and files along with it."""


@nodes.command()
@click.argument("hosts")
@click.option("--group", required=True, help="Node group to add them to (a new one is shaped like --like).")
@click.option("--like", default=None, help="For a new group: the group it copies (default: the only one).")
@click.option("--switch", default=None,
              help="Existing leaf switch for them (default: a new leaf under the top switch).")
@click.option("--new-switch", is_flag=True, help="--switch names a new leaf, to make under the top switch.")
@_opts
def add(hosts: str, group: str, like: str | None, switch: str | None, new_switch: bool, timeout: float,
        dry_run: bool, no_real_parse: bool, ctld_restart: str, lock_wait: float) -> None:
    """Add HOSTS (a hostlist, e.g. node[5-8]) to the cluster: the inventory copy beside slurm.conf grows, the files
    are regenerated, and the cluster takes them by the least disruptive path its release allows (said first).
    The new nodes stay drained until every one's slurmd has registered (the lab starts it; a site starts it
    itself, told when); if one has not within --timeout, everything is rolled back (exit 1)."""
    import shlex

    from slurmkit import hostlist
    from slurmkit.elastic import change, edit, path

    names = hostlist.expand(hosts, "HOSTS")
    site, backend, release = _target()
    from slurmkit.lab.elastic import LabSite

    if isinstance(site, LabSite):
        site.check_add(release)  # what the lab cannot bring in, refused before anything changes
    site.ctld_restart = tuple(shlex.split(ctld_restart))
    if dry_run:
        before = change.load_inventory(site.conf_dir)
        e = edit.add_hosts(before, names, group, like=like, switch=switch, new_switch=new_switch)
        p = path.choose(release, adding=True)
        _say(e.summary)
        for line in _reserve_lines(before, e.data):
            _say(line)
        _say(p.statement("add"))
        for i, step in enumerate(p.steps, 1):
            click.echo(f"  {i}. {step}")
        n = len(p.steps)
        click.echo(f"  {n + 1}. drain {hostlist.fold(names)} ({change.JOIN_REASON!r}); start their slurmd (the lab) "
                   "or the site starts it")
        click.echo(f"  {n + 2}. wait up to {timeout:g}s for every one to register, then resume them; "
                   "else roll everything back")
        return
    with change.locked(site.conf_dir, _command(), lock_wait, _say):  # from reading the inventory to the end
        before = change.load_inventory(site.conf_dir)
        e = edit.add_hosts(before, names, group, like=like, switch=switch, new_switch=new_switch)
        p = path.choose(release, adding=True)
        _say(e.summary)
        for line in _reserve_lines(before, e.data):
            _say(line)
        _say(p.statement("add"))
        res = change.add_nodes(site, backend, e, p, names, version=release, real_parse=not no_real_parse,
                               timeout=timeout, progress=_say)
    click.echo(f"added {hostlist.fold(names)} to group {group} by {p.kind} in {res.seconds:.1f}s; idle")


@nodes.command()
@click.argument("hosts")
@click.option("--requeue", is_flag=True, help="Requeue the jobs running on HOSTS instead of waiting for them to end.")
@click.option("--cancel-stranded", is_flag=True,
              help="Cancel the queued jobs Slurm would fail once HOSTS are gone (pinned to them with -w, or in a "
                   "partition that goes); without it such jobs make the command refuse.")
@_opts
def remove(hosts: str, requeue: bool, cancel_stranded: bool, timeout: float, dry_run: bool, no_real_parse: bool,
           ctld_restart: str, lock_wait: float) -> None:
    """Remove HOSTS: drain them, wait for their jobs (or requeue them), then shrink the inventory, regenerate and
    bring the cluster onto the new files; their slurmd is stopped (the lab) or is the site's to stop. Queued jobs
    that need HOSTS (sbatch -w) or a partition that goes would end NODE_FAIL: refused (exit 2, naming them)
    unless --cancel-stranded."""
    import shlex

    from slurmkit import hostlist
    from slurmkit.elastic import change, edit, path
    from slurmkit.errors import SlurmkitError, UsageError

    names = hostlist.expand(hosts, "HOSTS")
    site, backend, release = _target()
    site.ctld_restart = tuple(shlex.split(ctld_restart))

    def stranded(e: edit.Edit) -> dict[str, str]:
        return change.stranded_jobs(backend.jobs(), names, e.dropped_partitions, requeue)

    def refuse(jobs: dict[str, str]) -> UsageError:
        listed = "; ".join(f"job {j}: {why}" for j, why in sorted(jobs.items()))
        return UsageError(f"HOSTS: queued job(s) that Slurm would fail without {hostlist.fold(names)} ({listed}); "
                          "--cancel-stranded cancels them, or change them first (scontrol update jobid=... "
                          "ReqNodeList=/Partition=); nothing changed")

    if dry_run:
        before = change.load_inventory(site.conf_dir)
        e = edit.remove_hosts(before, names)
        p = path.choose(release, adding=False)
        _say(e.summary)
        for line in _reserve_lines(before, e.data):
            _say(line)
        _say(p.statement("remove"))
        try:
            jobs = stranded(e)
        except SlurmkitError:  # a dry run needs no controller; the real run asks again
            jobs = {}
        click.echo(f"  0. drain {hostlist.fold(names)}; " + ("requeue their jobs" if requeue else "wait for their jobs")
                   + (f"; cancel job(s) {', '.join(sorted(jobs))} (they need what goes)" if jobs else ""))
        for i, step in enumerate(p.steps, 1):
            click.echo(f"  {i}. {step}")
        return
    with change.locked(site.conf_dir, _command(), lock_wait, _say):  # from reading the inventory to the end
        before = change.load_inventory(site.conf_dir)
        e = edit.remove_hosts(before, names)
        p = path.choose(release, adding=False)
        _say(e.summary)
        for line in _reserve_lines(before, e.data):
            _say(line)
        _say(p.statement("remove"))
        jobs = stranded(e)
        if jobs and not cancel_stranded:
            raise refuse(jobs)
        drained = change.drain_and_wait(backend, names, requeue=requeue, timeout=timeout, progress=_say)
        try:
            jobs = stranded(e)  # again: a job may have been queued (or requeued) since
            if jobs and not cancel_stranded:
                raise refuse(jobs)
            if jobs:
                change.cancel_jobs(backend, jobs)
                _say(f"cancelled job(s) {', '.join(sorted(jobs))}: " + "; ".join(
                    f"{j} {why}" for j, why in sorted(jobs.items())))
        except BaseException:
            if drained:  # the cluster did not change: give the nodes back
                backend.resume(hostlist.fold(drained))
            raise
        # the change, then the slurmd stopped; a failure there rolls the change back and resumes the nodes
        res = change.remove_nodes(site, backend, e, p, names, drained, version=release,
                                  real_parse=not no_real_parse, timeout=timeout, progress=_say)
    click.echo(f"removed {hostlist.fold(names)} by {p.kind} in {res.seconds:.1f}s")
