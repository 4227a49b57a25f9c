"""`slurmkit hook prolog|epilog|health` (run by slurmd) and `slurmkit check` (an admin on a node).

The edge for the health library: reads the Slurm environment, picks exit codes, prints. Hot path: this module
imports click and the small health modules only; NVML is imported in the forked gather worker, YAML only when the
inventory changed since the cached expectations.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import click

_T0 = time.monotonic()  # the budget counts from as early as this module can see


def _budget_start() -> float:
    """Import time counts against the budget, but a module imported long ago (a test runner, a long-lived caller)
    must not start a run with its budget already spent: count at most one second before the command."""
    return max(_T0, time.monotonic() - 1.0)

DEFAULT_STATE_DIR = "/var/lib/slurmkit"


def _state_dir_default() -> str:
    return os.environ.get("SLURMKIT_STATE_DIR") or DEFAULT_STATE_DIR


def _common(f):  # type: ignore[no-untyped-def]
    """Options every hook takes (the generated wrappers pass --inventory <conf_dir>/slurmkit.yaml)."""
    f = click.option("--textfile-dir", type=click.Path(file_okay=False),
                     help="Write the Prometheus textfile here (node_exporter --collector.textfile.directory); "
                          "default: the node's state dir.")(f)
    f = click.option("--policy", "policy_file", type=click.Path(dir_okay=False),
                     help="Site policy YAML (the shape of hooks.checks); overrides the inventory's.")(f)
    f = click.option("--state-dir", default=_state_dir_default, show_default="$SLURMKIT_STATE_DIR or /var/lib/slurmkit",
                     type=click.Path(file_okay=False), help="Per-node state lives in <state-dir>/<node>/.")(f)
    f = click.option("--inventory", type=click.Path(dir_okay=False),
                     help="The cluster inventory (expected GPUs/NICs and the hooks.checks policy).")(f)
    return f


def _node_name(explicit: str | None = None) -> str:
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _job_gpus(raw: str | None, where: str | None = None) -> list[int] | None:
    """SLURM_JOB_GPUS: node-level gres indices (``0,1,4``; ranges in some versions).

    ``where`` names a flag: bad input there is a one-line usage error. From slurmd's environment an unreadable
    value widens the hardware checks to every GPU (a superset of the job's) rather than failing the job on a parse;
    processes of other running jobs are still never judged or killed (their owner is read from /proc).
    """
    if raw is None or not raw.strip():
        return None
    from slurmkit.backend.records import expand_ints

    try:
        return expand_ints(raw)
    except ValueError:
        if where:
            from slurmkit.errors import UsageError

            raise UsageError(f"{where}: expected GPU indices like 0,1 or 0-3, got {raw!r}") from None
        return None


def _prepare_env(inventory: str | None) -> None:
    # slurmd runs hooks without PATH (and HealthCheckProgram without SLURM_CONF): give scontrol a chance.
    if not os.environ.get("PATH"):
        from slurmkit.health.slurmctl import HOOK_PATH

        os.environ["PATH"] = HOOK_PATH
    if not os.environ.get("SLURM_CONF") and inventory:
        conf = os.path.join(os.path.dirname(os.path.abspath(inventory)), "slurm.conf")
        if os.path.exists(conf):  # the generated wrappers sit next to slurm.conf and the inventory copy
            os.environ["SLURM_CONF"] = conf


def _run(hook: str, inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None) -> None:
    from slurmkit.health.hooks import HookEnv, run_hook
    from slurmkit.health.output import log_line, to_syslog

    _prepare_env(inventory)
    uid = os.environ.get("SLURM_JOB_UID")
    raw_gpus = os.environ.get("SLURM_JOB_GPUS")
    # unset: the job has no GPUs (Slurm sets it only for a job with gpu/shard/mps gres), so its scope is empty
    job_gpus = [] if raw_gpus is None or not raw_gpus.strip() else _job_gpus(raw_gpus)
    env = HookEnv(
        hook=hook, node=_node_name(), state_dir=state_dir, inventory=inventory, policy_file=policy_file,
        fake_nvml=os.environ.get("SLURMKIT_FAKE_NVML") or None, job_id=os.environ.get("SLURM_JOB_ID"),
        job_uid=int(uid) if uid and uid.isdigit() else None, job_user=os.environ.get("SLURM_JOB_USER"),
        job_gpus=job_gpus, textfile_dir=textfile_dir, ppid=os.getppid(),
        started_mono=_budget_start(),
    )
    try:
        report = run_hook(env)
    except Exception as exc:  # a bug or a broken inventory: say so in one line, fail closed in prolog/epilog
        line = f"slurmkit {hook} {env.node}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"
        click.echo(line, err=True)
        to_syslog(line, failed=True)
        code = 1 if hook in ("prolog", "epilog") else 2
        from slurmkit.health.hooks import record_internal_error

        record_internal_error(state_dir, env.node, hook, env.job_id, line, code)
        _exit(code)
    line = log_line(report)
    click.echo(line, err=True)  # slurmd logs a failing hook's stderr; the JSON record has the rest
    to_syslog(line, failed=report.exit_code != 0)
    _exit(report.exit_code)


def _exit(code: int) -> None:
    import threading

    if threading.active_count() > 1:
        # A gather thread is stuck (a dead mount): do not let interpreter shutdown wait on it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def hook() -> None:
    """Entry points slurmd runs: Prolog, Epilog, HealthCheckProgram."""


@hook.command()
@_common
def prolog(inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None) -> None:
    """Check the job's GPUs before it starts; on a hard failure drain with our reason and exit 1 (Slurm requeues)."""
    _run("prolog", inventory, state_dir, policy_file, textfile_dir)


@hook.command()
@_common
def epilog(inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None) -> None:
    """Kill the job user's leftover GPU processes, clean /dev/shm, re-check; exit 1 only if the node must drain."""
    _run("epilog", inventory, state_dir, policy_file, textfile_dir)


@hook.command()
@_common
def health(inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None) -> None:
    """HealthCheckProgram: check every GPU, drain on failure, resume our own drains after N passes."""
    _run("health", inventory, state_dir, policy_file, textfile_dir)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_common
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON record instead of a table.")
@click.option("--node", help="Node name for the inventory lookup (default: SLURMD_NODENAME or the hostname).")
@click.option("--gpus", help="Only these gres indices, like SLURM_JOB_GPUS (e.g. 0,1).")
@click.option("--record-fixture", type=click.Path(dir_okay=False),
              help="Write what NVML reports as a fake-NVML fixture JSON and exit.")
@click.option("--clear-xid", is_flag=True, help="Forget sticky critical XIDs (after a GPU reset) and exit.")
def check(inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None, as_json: bool,
          node: str | None, gpus: str | None, record_fixture: str | None, clear_xid: bool) -> None:
    """Run the node health checks now, read-only (no drains, no cursor moves). Exit 1 if a check would drain."""
    import json

    from slurmkit.health.hooks import HookEnv, run_hook
    from slurmkit.health.hooks import clear_xid as _clear
    from slurmkit.health.hooks import record_fixture as _record

    name = _node_name(node)
    fake = os.environ.get("SLURMKIT_FAKE_NVML") or None
    if record_fixture:
        data = _record(fake, name)
        from slurmkit.health.state import atomic_write

        atomic_write(record_fixture, json.dumps(data, indent=1, sort_keys=True) + "\n")
        n = len(data["devices"])
        click.echo(f"recorded {n} GPU(s), driver {data['driver_version']} -> {record_fixture}", err=True)
        problems = [k for k in ("stalled", "crashed", "load_error", "init_error") if data["recorded"].get(k)]
        sys.exit(1 if problems or not n else 0)
    if clear_xid:
        n = _clear(state_dir, name)
        click.echo(f"cleared {n} sticky XID record(s) for {name}")
        return
    env = HookEnv(hook="check", node=name, state_dir=state_dir, inventory=inventory, policy_file=policy_file,
                  fake_nvml=fake, job_gpus=_job_gpus(gpus, "--gpus"), textfile_dir=textfile_dir, ppid=os.getppid(),
                  started_mono=_budget_start())
    report = run_hook(env)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=1, sort_keys=True))
    else:
        rows = [(r.name, r.status.label, r.action.label if r.action else "", r.summary) for r in report.results]
        w = max(len(r[0]) for r in rows) if rows else 5
        click.echo(f"{'CHECK':<{w}}  {'STATUS':<6}  {'ACTION':<12}  SUMMARY")
        for name_, st, act, summ in rows:
            click.echo(f"{name_:<{w}}  {st:<6}  {act:<12}  {summ}")
        tail = f"reason: {report.reason}" if report.reason else "no drain-level failures"
        click.echo(f"{report.node}: {report.status.label}, action {report.action.label}, "
                   f"{report.duration_s * 1000:.0f} ms; {tail}")
    sys.exit(report.exit_code)


if __name__ == "__main__":
    hook()
