"""`slurmkit accounts plan|apply|drift INVENTORY`: the inventory's ``tenants:`` (QOS, accounts, users, limits) against
the slurmdbd of the cluster ``$SLURM_CONF`` points at. Exit codes: 0 ok / no drift, 1 drift found or a sacctmgr
step failed (what was applied is listed) or a --prune delete was held back by active jobs (the rest applied), 2 bad
input or no accounting, 3 (drift) sacctmgr could not read the live records, so whether there is drift is unknown (a
monitor must not read that as "drift found")."""

from __future__ import annotations

import os

import click

from slurmkit.errors import SlurmkitError

_inventory = click.argument("inventory", type=click.Path(dir_okay=False, exists=True))
_prune = click.option("--prune", is_flag=True,
                      help="Also delete QOS, accounts and user associations the inventory does not name "
                           "(never root, root's user or the 'normal' QOS); a delete that running or pending jobs "
                           "use is marked blocked (one squeue call) and skipped by apply (exit 1).")


class BackendError(SlurmkitError):
    """``drift`` could not read slurmdbd (sacctmgr failed or timed out): exit 3, distinct from 1 = drift found."""

    exit_code = 3


@click.group()
def accounts() -> None:
    """Accounts, users, QOS and limits from the inventory's tenants: section (sacctmgr)."""


def _load(inventory: str) -> tuple[object, object, object]:
    """-> (tenants, target, live state)."""
    from slurmkit.accounts.sacct import read_state, target_from_conf
    from slurmkit.errors import UsageError
    from slurmkit.model.load import load_cluster

    cluster = load_cluster(inventory)
    if cluster.tenants is None:
        raise UsageError(f"{inventory}: no 'tenants:' section; nothing to plan")
    target = target_from_conf(os.environ.get("SLURM_CONF"))
    if target.cluster != cluster.name:
        raise UsageError(f"{inventory}: cluster {cluster.name!r}, but $SLURM_CONF's ClusterName is "
                         f"{target.cluster!r}; point SLURM_CONF at that cluster's slurm.conf")
    return cluster.tenants, target, read_state(target)


def _plan(inventory: str, prune: bool, shares: list | None = None) -> tuple[object, list, list]:
    """-> (target, changes, steps); with ``shares`` (a list), it gets the share lines of the planned state."""
    from slurmkit.accounts.plan import desired, diff, mark_blocked, needs_jobs, steps
    from slurmkit.accounts.sacct import read_jobs

    tenants, target, live = _load(inventory)
    want = desired(tenants)  # type: ignore[arg-type]
    changes = diff(live, want, prune=prune)  # type: ignore[arg-type]
    if needs_jobs(changes):
        # a delete under active jobs: slurmdbd refuses it (or, for a held job, orphans the job); one squeue call
        changes = mark_blocked(changes, live, read_jobs(target))  # type: ignore[arg-type]
    if shares is not None:
        shares += _share_lines(tenants, live, want, prune)
    return target, changes, steps(changes, target.cluster)  # type: ignore[attr-defined]


def _share_lines(tenants: object, live: object, want: object, prune: bool) -> list[str]:
    """Each account's fair share once applied, as `sshare -a` will print it (RawShares, NormShares), and its part of
    the cluster; a parent's summed share and siblings that are not the inventory's are named."""
    from slurmkit.accounts.plan import after, shares

    state = after(live, want, prune)  # type: ignore[arg-type]
    mine = {a.name: a for a in tenants.accounts}  # type: ignore[attr-defined]
    out = []
    for sh in shares(state):
        notes = []
        a = mine.get(sh.account)
        if a is not None and a.fairshare_from_children:
            notes.append("no fairshare given: the sum of its children's")
        others = sorted({f"{u}'s user association" for (u, acc) in state.users if acc == sh.parent}
                        | {x for x, rec in state.accounts.items() if rec.get("Parent") == sh.parent and x not in mine})
        if others:
            notes.append("beside " + ", ".join(others))
        out.append("  " * sh.depth + sh.describe("; ".join(notes)))
    return out


def _print(changes: list, cluster: str) -> None:
    todo = [c for c in changes if c.action != "extra" and not c.blocked]
    held = [c for c in changes if c.blocked]
    for c in changes:
        click.echo(c.describe())
    line = f"cluster {cluster}: {len(todo)} change(s)" if todo else f"cluster {cluster}: no change"
    click.echo(line + (f", {len(held)} delete(s) blocked by active jobs (apply skips them)" if held else ""))


@accounts.command()
@_inventory
@_prune
def plan(inventory: str, prune: bool) -> int:
    """Print the changes `apply` would make (nothing is changed), then each account's fair share once applied."""
    share_lines: list[str] = []
    target, changes, sts = _plan(inventory, prune, share_lines)
    _print(changes, target.cluster)  # type: ignore[attr-defined]
    for st in sts:
        click.echo("  sacctmgr -i " + " ".join(st.args))
    if share_lines:
        click.echo("fair share once applied (as `sshare -a` prints it; NormShares = RawShares over the raw shares of "
                   "everything under the same parent, Fair Tree):")
        for ln in share_lines:
            click.echo("  " + ln)
    return 0


@accounts.command()
@_inventory
@_prune
def apply(inventory: str, prune: bool) -> int:
    """Apply the plan with sacctmgr, read back and verify; a second apply changes nothing."""
    from slurmkit.accounts.plan import desired, diff
    from slurmkit.accounts.sacct import ApplyError, apply_steps, read_state

    target, changes, sts = _plan(inventory, prune)
    _print(changes, target.cluster)  # type: ignore[attr-defined]
    held = [c for c in changes if c.blocked]
    if not sts:
        return _held_back(held)
    try:
        apply_steps(target, sts, lambda st: click.echo("applied: sacctmgr -i " + " ".join(st.args)))  # type: ignore[arg-type]
    except ApplyError as exc:
        click.echo("failed:  sacctmgr -i " + " ".join(exc.failed.args), err=True)
        for st in exc.pending:
            click.echo("not run: sacctmgr -i " + " ".join(st.args), err=True)
        raise
    from slurmkit.model.load import load_cluster

    tenants = load_cluster(inventory).tenants
    skipped = {(c.kind, c.key) for c in held}
    left = [c for c in diff(read_state(target), desired(tenants), prune=prune)  # type: ignore[arg-type]
            if c.action != "extra" and (c.kind, c.key) not in skipped]
    if left:
        for c in left:
            click.echo(f"not converged: {c.describe()}", err=True)
        raise SlurmkitError(f"read back after apply: {len(left)} change(s) did not take; see above")
    click.echo(f"verified: slurmdbd of cluster {target.cluster} matches the inventory"  # type: ignore[attr-defined]
               + (" but for the deletes held back below" if held else ""))
    return _held_back(held)


def _held_back(held: list) -> int:
    """Deletes that active jobs block are skipped, everything else applied: a new tenant is not kept waiting for an
    old one's jobs. Each is listed and the exit is 1, so that a script sees the cluster is not yet what the
    inventory says; re-run once the jobs end (or are cancelled): it converges."""
    if not held:
        return 0
    from slurmkit.accounts.sacct import HeldBack

    for c in held:
        click.echo(f"held back: {c.describe()}", err=True)
    raise HeldBack(f"{len(held)} delete(s) held back by active jobs (slurmdbd refuses them: \"Job(s) active, cancel "
                   "job(s) before remove\"); re-run `slurmkit accounts apply --prune` once those jobs end")


@accounts.command()
@_inventory
def drift(inventory: str) -> int:
    """List every difference between slurmdbd and the inventory (manual sacctmgr edits).

    \b
    Exit codes: 0 no drift, 1 drift found (listed), 2 bad inventory or no
    slurmdbd, 3 sacctmgr failed (drift unknown; one line on stderr)."""
    from slurmkit.accounts.plan import describe_drift
    from slurmkit.errors import SlurmCommandError

    try:
        target, changes, _sts = _plan(inventory, False)
    except SlurmCommandError as exc:
        raise BackendError(f"cannot read slurmdbd's records, drift unknown: {exc.one_line()}") from exc
    for c in changes:
        click.echo(describe_drift(c))
    if changes:
        click.echo(f"cluster {target.cluster}: {len(changes)} difference(s)")  # type: ignore[attr-defined]
        return 1
    click.echo(f"cluster {target.cluster}: no drift")  # type: ignore[attr-defined]
    return 0
