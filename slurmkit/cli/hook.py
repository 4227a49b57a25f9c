"""`slurmkit hook prolog|epilog|health` (run by slurmd) and `slurmkit check` (an admin on a node).

The edge for the health library: reads the Slurm environment, picks exit codes, prints. The hot path (slurmd's
``hook prolog|epilog|health``) does not come through here: ``slurmkit.cli.main`` hands it to ``hookrun.fast_main``
before importing click; these click commands (``--help``, odd spellings) end in the same ``hookrun.run``.
"""

from __future__ import annotations

import os
import sys

import click

from slurmkit.cli.hookrun import budget_start as _budget_start
from slurmkit.cli.hookrun import job_gpus as _job_gpus
from slurmkit.cli.hookrun import node_name as _node_name
from slurmkit.cli.hookrun import run as _run
from slurmkit.cli.hookrun import state_dir_default as _state_dir_default

_HOOK_TEXTFILE_HELP = ("Write the Prometheus textfile here (node_exporter --collector.textfile.directory); default: "
                       "hooks.checks.textfile_dir, else /var/lib/prometheus/node-exporter if it exists (never with "
                       "SLURMKIT_FAKE_NVML), else the node's state dir.")
_CHECK_TEXTFILE_HELP = ("Also write this run's verdicts (series with hook=\"check\") as a Prometheus textfile here "
                        "(node_exporter --collector.textfile.directory); the per-GPU values stay the health hook's "
                        "alone; without this flag check writes no textfile (it is read-only).")


def _common(f, textfile_help: str = _HOOK_TEXTFILE_HELP):  # type: ignore[no-untyped-def]
    """Options every hook takes (the generated wrappers pass --inventory <conf_dir>/slurmkit.yaml)."""
    f = click.option("--textfile-dir", type=click.Path(file_okay=False), help=textfile_help)(f)
    f = click.option("--policy", "policy_file", type=click.Path(dir_okay=False),
                     help="Site policy YAML (the shape of hooks.checks); overrides the inventory's.")(f)
    f = click.option("--state-dir", default=_state_dir_default, show_default="$SLURMKIT_STATE_DIR or /var/lib/slurmkit",
                     type=click.Path(file_okay=False), help="Per-node state lives in <state-dir>/<node>/.")(f)
    f = click.option("--inventory", type=click.Path(dir_okay=False),
                     help="The cluster inventory (expected GPUs/NICs and the hooks.checks policy).")(f)
    return f


def _check_common(f):  # type: ignore[no-untyped-def]
    return _common(f, _CHECK_TEXTFILE_HELP)


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
@_check_common
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON record instead of a table.")
@click.option("--node", help="Node name for the inventory lookup (default: SLURMD_NODENAME or the hostname).")
@click.option("--gpus", help="Only these gres indices, like SLURM_JOB_GPUS (e.g. 0,1): what a prolog of a job with "
                             "these GPUs checks.")
@click.option("--record-fixture", type=click.Path(dir_okay=False),
              help="Write what NVML reports as a fake-NVML fixture JSON and exit.")
@click.option("--clear-xid", is_flag=True, help="Forget sticky critical XIDs (after a GPU reset) and exit.")
@click.option("--active", is_flag=True, help="The active stage instead (minutes; after maintenance, on suspicion): "
              "dcgmi diag where installed, else a torch GEMM and memory-bandwidth test per GPU judged against the "
              "model's floor and the node's other GPUs. Writes last-active.json; exit 1 if a GPU fails.")
@click.option("--level", type=click.IntRange(1, 2), default=1, show_default=True, help="--active: dcgmi diag level.")
@click.option("--method", type=click.Choice(["auto", "dcgm", "torch"]), default="auto", show_default=True,
              help="--active: dcgmi when installed (auto), or force one.")
@click.option("--budget", type=click.FloatRange(min=1.0), default=120.0, show_default=True,
              help="--active: seconds for the whole stage.")
@click.option("--peer-pct", type=click.FloatRange(1.0, 100.0), default=85.0, show_default=True,
              help="--active: a GPU below this % of its peers' median fails.")
def check(inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None, as_json: bool,
          node: str | None, gpus: str | None, record_fixture: str | None, clear_xid: bool, active: bool, level: int,
          method: str, budget: float, peer_pct: float) -> None:
    """Run the node health checks now, read-only (no drains, no cursor moves). Exit 1 if a check would drain."""
    import json

    from slurmkit.health.hooks import HookEnv, run_hook
    from slurmkit.health.hooks import clear_xid as _clear
    from slurmkit.health.hooks import record_fixture as _record

    name = _node_name(node)
    fake = os.environ.get("SLURMKIT_FAKE_NVML") or None
    if inventory is None:  # the same lookup as the hooks: a check without expectations is not what they run
        from slurmkit.cli.hookrun import default_inventory

        inventory = default_inventory()
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
    if active:
        from slurmkit.health.hooks import run_active

        report = run_active(env, budget_s=budget, level=level, method=method, peer_pct=peer_pct)
    else:
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
