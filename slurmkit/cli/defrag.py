"""``slurmkit defrag plan|run``: free a whole leaf for a job blocked by fragmentation by moving checkpointing jobs.

The edge: gathers node states, topology, the running jobs (``scontrol -o -d show job``) and the blocked job's shape,
hands them to ``slurmkit.defrag.plan`` (pure) and, for ``run``, to ``slurmkit.defrag.run`` (the backend sequence).
Exit codes: 0 a plan (or done), 1 blocked with no plan / the run failed (rolled back), 2 bad input, 3 not blocked.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def defrag() -> None:
    """Move the cheapest checkpointing jobs so that a job blocked by fragmentation gets one whole leaf."""


def _shape(for_job: str | None, nodes: int | None, gpus_per_node: int | None):  # type: ignore[no-untyped-def]
    from slurmkit.errors import UsageError

    if (for_job is None) == (nodes is None):
        raise UsageError("give --for JOBID (a pending job) or --nodes N (a hypothetical one), not both")
    return for_job, nodes, gpus_per_node


def _gather(for_job: str | None, nodes: int | None, gpus_per_node: int | None, inventory: str | None):  # type: ignore[no-untyped-def]
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.cli.report import _topology
    from slurmkit.defrag.gather import policy_from, running_jobs, target_of
    from slurmkit.defrag.plan import Target
    from slurmkit.placement.state import node_states, partition_nodes
    from slurmkit.siteinv import find_inventory

    backend = CLIBackend()
    inventory = inventory or find_inventory(os.environ)
    raw_inv = None
    if inventory:
        from slurmkit.model import load_cluster
        from slurmkit.model.yamlio import load as load_yaml

        load_cluster(inventory)  # the loader checks defrag: (key-path errors) with the rest
        with open(inventory) as fh:
            raw_inv = load_yaml(fh)
    details = backend.job_details()
    states = node_states(backend.nodes())
    topo, source = _topology(backend, inventory, states.keys())
    partition = None
    if for_job is not None:
        target, partition = target_of(details, for_job)
    else:
        total = max((s.total_gpus for s in states.values()), default=0)
        target = Target(nodes or 1, gpus_per_node if gpus_per_node is not None else total,
                        exclusive=gpus_per_node is None)
    if partition:
        topo = topo.restrict(partition_nodes(backend.partitions(), partition.split(",")[0]))
    jobs = running_jobs(details, policy_from(raw_inv if isinstance(raw_inv, dict) else None))
    return backend, topo, states, jobs, target, source, details


def _plan_doc(verdict, target, source) -> dict:  # type: ignore[no-untyped-def]
    p = verdict.plan
    return {
        "blocked": verdict.blocked, "reason": verdict.reason, "topology": source,
        "target": {"nodes": target.nodes, "gpus_per_node": target.gpus_per_node, "exclusive": target.exclusive},
        "plan": None if p is None else {
            "leaf": p.leaf, "nodes": list(p.nodes), "cost_gpu_s": p.cost, "exact": p.exact,
            "moves": [{"job": m.job_id, "cost_gpu_s": m.cost, "frees": list(m.frees), "goes_to": list(m.goes_to)}
                      for m in p.moves]},
        "notes": list(verdict.notes),
    }


def _hold(verdict, topo, states, jobs, target, details):  # type: ignore[no-untyped-def]
    """When moves alone free no leaf: the leaf the job can have first counting the time limits of the jobs that may
    not move (slurmkit.defrag.plan.plan_reservation), else None."""
    from slurmkit.defrag.plan import plan_reservation
    from slurmkit.defrag.watch import job_ends

    if not verdict.blocked or verdict.plan is not None:
        return None
    return plan_reservation(topo, states, jobs, job_ends(details), target, time.time())


def _print(verdict, target) -> None:  # type: ignore[no-untyped-def]
    from slurmkit import hostlist

    click.echo(f"target: {target.nodes} node(s) x {target.gpus_per_node} GPU(s)"
               + (" (whole nodes)" if target.exclusive else "") + f": {verdict.reason}")
    p = verdict.plan
    if p is None:
        return
    click.echo(f"plan: {p.leaf} ({hostlist.fold(p.nodes)}) by moving {len(p.moves)} job(s), "
               f"{p.cost:.0f} GPU-seconds lost" + ("" if p.exact else " (approximate)"))
    for m in p.moves:
        click.echo(f"  move job {m.job_id}: frees {hostlist.fold(m.frees)}, {m.cost:.0f} GPU-s, "
                   f"restarts on {hostlist.fold(m.goes_to)}")
    for n in verdict.notes:
        click.echo(f"  note: {n}")


_common = [
    click.option("--for", "for_job", default=None, metavar="JOBID", help="A pending job."),
    click.option("--nodes", type=click.IntRange(1), default=None, help="A hypothetical job of N nodes."),
    click.option("--gpus-per-node", type=click.IntRange(0), default=None,
                 help="With --nodes: GPUs per node [whole nodes]."),
    click.option("--inventory", default=None, help="Site inventory (topology, defrag policy) [the site's]."),
]


def _opts(f):  # type: ignore[no-untyped-def]
    for o in reversed(_common):
        f = o(f)
    return f


@defrag.command("plan")
@_opts
@click.option("--json", "as_json", is_flag=True,
              help="The verdict, the moves and the hold as one JSON document (keys: those of the text output).")
def plan_cmd(for_job: str | None, nodes: int | None, gpus_per_node: int | None, inventory: str | None,
             as_json: bool) -> None:
    """Whether the job is blocked by fragmentation and the cheapest set of jobs to move."""
    from slurmkit.defrag.plan import plan_defrag

    _shape(for_job, nodes, gpus_per_node)
    _backend, topo, states, jobs, target, source, details = _gather(for_job, nodes, gpus_per_node, inventory)
    verdict = plan_defrag(topo, states, jobs, target)
    hold = _hold(verdict, topo, states, jobs, target, details)
    if as_json:
        doc = _plan_doc(verdict, target, source)
        doc["hold"] = None if hold is None else {
            "leaf": hold.leaf, "nodes": list(hold.nodes), "start": hold.start, "waits_for": list(hold.waits_for),
            "moves": list(hold.moves), "cost_gpu_s": hold.cost}
        click.echo(json.dumps(doc, indent=1))
    else:
        _print(verdict, target)
        if hold is not None:
            from slurmkit.defrag.plan import hold_note

            click.echo(f"no move frees a {topo.unit} now: {hold_note(hold, topo.unit, time.time())}")
    sys.exit(0 if verdict.plan else (1 if verdict.blocked else 3))


@defrag.command("run")
@click.option("--for", "for_job", required=True, metavar="JOBID", help="The pending job to unblock.")
@click.option("--inventory", default=None, help="Site inventory (topology, defrag policy) [the site's].")
@click.option("--timeout", type=click.IntRange(1), default=300, show_default=True,
              help="Seconds to wait for the job to start after the moves.")
@click.option("--dry-run", is_flag=True, help="Print the plan and the steps; change nothing.")
def run_cmd(for_job: str, inventory: str | None, timeout: int, dry_run: bool) -> None:
    """Carry the plan out: reserve the leaf's nodes for the job, move the planned jobs (checkpoint + requeue), wait
    for the job to start there, release the reservation. A failure or Ctrl-C rolls back the reservation."""
    from slurmkit.backend.jobjson import job_table
    from slurmkit.defrag.gather import job_run_dir
    from slurmkit.defrag.plan import plan_defrag
    from slurmkit.defrag.run import carry_out

    backend, topo, states, jobs, target, _source, details = _gather(for_job, None, None, inventory)
    verdict = plan_defrag(topo, states, jobs, target)
    _print(verdict, target)
    if verdict.plan is None:
        sys.exit(1 if verdict.blocked else 3)
    recs: dict[str, dict[str, str]] = {r["JobId"]: r for r in job_table(details) if "JobId" in r}
    user = recs[for_job].get("UserId", "").split("(", 1)[0]
    gpusub_jobs = {j for j in verdict.plan.job_ids if job_run_dir(recs.get(j, {}))}
    if dry_run:
        click.echo("dry run: nothing changed")
        return
    nodes = carry_out(verdict.plan, for_job, user, gpusub_jobs, backend,
                      log=lambda m: click.echo(f"defrag: {m}"), timeout=timeout)
    click.echo(f"job {for_job} started on {nodes}")


def _state_default() -> str:
    return os.path.join(os.environ.get("SLURMKIT_STATE_DIR") or "/var/lib/slurmkit", "defrag-watch.json")


@defrag.command("watch")
@click.option("--once", is_flag=True, help="One pass, then exit (1 when its action was rolled back).")
@click.option("--interval", type=click.IntRange(5), default=60, show_default=True, help="Seconds between passes.")
@click.option("--inventory", default=None, help="Site inventory (topology, defrag policy) [the site's].")
@click.option("--state-file", default=None, help="Rate limits and counters [$SLURMKIT_STATE_DIR or "
              "/var/lib/slurmkit, defrag-watch.json].")
@click.option("--metrics-dir", default=None, help="Write slurmkit_defrag.prom here each pass (Prometheus textfile).")
@click.option("--timeout", type=click.IntRange(1), default=300, show_default=True,
              help="Seconds to wait for an unblocked job to start after the moves.")
@click.option("--dry-run", is_flag=True, help="Say what each pass would do; change nothing.")
@click.option("--print-unit", is_flag=True, help="Print the systemd unit that runs this service with these options.")
def watch_cmd(once: bool, interval: int, inventory: str | None, state_file: str | None, metrics_dir: str | None,
              timeout: int, dry_run: bool, print_unit: bool) -> None:
    """The policy service: each pass acts for the longest-blocked job the inventory's defrag: policy allows
    (partitions, QOS, min_wait_s, max_moves_per_hour, max_moves_per_job, protect_h, quiet_hours), with the safety
    of `defrag run`; when nothing may move it holds the leaf that frees first with a future reservation (max_holds,
    hold_grace_s). One line per pass and per action."""
    import signal
    import time

    from slurmkit.defrag.watch import run_pass

    if print_unit:
        click.echo(_unit(once, interval, inventory, state_file, metrics_dir, timeout), nl=False)
        return
    policy, inventory = _policy(inventory)
    state_path = state_file or _state_default()

    def term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt  # carry_out's finally removes the reservation before the process exits

    signal.signal(signal.SIGTERM, term)
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.errors import SlurmkitError

    backend = CLIBackend()

    def snapshot():  # type: ignore[no-untyped-def]
        from slurmkit.cli.report import _topology
        from slurmkit.defrag.watch import Snapshot
        from slurmkit.placement.state import node_states

        details = backend.job_details()
        states = node_states(backend.nodes())
        topo, _source = _topology(backend, inventory, states.keys())
        return Snapshot(details, states, topo, backend.partitions())

    def say(m: str) -> None:
        click.echo(f"defrag watch: {m}")

    try:
        while True:
            try:
                ok = run_pass(snapshot, backend, policy, state_path, metrics_dir, say, timeout=timeout,
                              dry_run=dry_run)
            except SlurmkitError as exc:
                if once:
                    raise
                say(f"pass failed: {exc.one_line()}")  # slurmctld away for a moment: the next pass tries again
            if once:
                sys.exit(0 if ok else 1)
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        say("stopped")
        sys.exit(130 if once else 0)


def _policy(inventory: str | None):  # type: ignore[no-untyped-def]
    from slurmkit.defrag.gather import policy_from
    from slurmkit.siteinv import find_inventory

    inventory = inventory or find_inventory(os.environ)
    if not inventory:
        from slurmkit.defrag.gather import Policy

        return Policy(), None
    from slurmkit.model import load_cluster
    from slurmkit.model.yamlio import load as load_yaml

    load_cluster(inventory)  # the loader checks defrag: (key-path errors) with the rest
    with open(inventory) as fh:
        raw = load_yaml(fh)
    return policy_from(raw if isinstance(raw, dict) else None), inventory


def _unit(once: bool, interval: int, inventory: str | None, state_file: str | None, metrics_dir: str | None,
          timeout: int) -> str:
    """The shipped unit (slurmkit/defrag/slurmkit-defrag-watch.service) with ExecStart for this host: the slurmkit
    this runs as, absolute paths, the options given (``--once`` never: a service loops)."""
    import shlex
    import shutil
    from importlib.resources import files

    # the slurmkit script beside this interpreter (a venv's bin), else on PATH, else this interpreter with -m
    beside = os.path.join(os.path.dirname(sys.executable), "slurmkit")
    exe = beside if os.access(beside, os.X_OK) else shutil.which("slurmkit")
    head = [os.path.abspath(exe)] if exe else [sys.executable, "-m", "slurmkit.cli.main"]
    argv = [*head, "defrag", "watch", "--interval", str(interval), "--timeout", str(timeout),
            "--state-file", os.path.abspath(state_file) if state_file else "/var/lib/slurmkit/defrag-watch.json"]
    if inventory:
        argv += ["--inventory", os.path.abspath(inventory)]
    if metrics_dir:
        argv += ["--metrics-dir", os.path.abspath(metrics_dir)]
    text = files("slurmkit.defrag").joinpath("slurmkit-defrag-watch.service").read_text()
    return text.replace("@EXEC@", " ".join(shlex.quote(a) for a in argv))
