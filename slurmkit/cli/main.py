"""The `slurmkit` command. Subcommands are imported only when used (`--help` stays fast)."""

from __future__ import annotations

import sys


def _hook_fast_path() -> None:
    """slurmd runs ``slurmkit hook prolog|epilog|health`` on every job start: serve it before importing click
    (``hookrun.fast_main`` returns when it cannot parse the arguments; click then takes them)."""
    if sys.argv[1:2] == ["hook"] and __name__ in ("__main__", "slurmkit.cli.main") and \
            sys.argv[0].rsplit("/", 1)[-1] in ("slurmkit", "main.py", "__main__.py"):
        from slurmkit.cli.hookrun import fast_main

        fast_main(sys.argv[1:])


_hook_fast_path()

import importlib  # noqa: E402

import click  # noqa: E402

from slurmkit import __version__  # noqa: E402

# name -> "module:attribute"; each module owns its commands (small commands calling the library)
COMMANDS: dict[str, tuple[str, str]] = {
    "accounts": ("slurmkit.cli.accounts:accounts",
                 "Accounts, users, QOS and GPU quotas from the inventory's tenants (plan/apply/drift)."),
    "lab": ("slurmkit.cli.lab:lab", "Run a real multi-node Slurm on this machine (up/status/env/down)."),
    "conf": ("slurmkit.cli.conf:conf", "Generate, validate, diff, apply Slurm config from an inventory."),
    "discover": ("slurmkit.cli.conf:discover", "Print an inventory fragment for this node (CPUs, GPUs, HCAs)."),
    "hook": ("slurmkit.cli.hook:hook", "Entry points for slurmd: prolog, epilog, health."),
    "check": ("slurmkit.cli.hook:check", "Run the node health checks now and print the results."),
    "nodes": ("slurmkit.cli.nodes:nodes", "Add or remove nodes on the running cluster ($SLURM_CONF's)."),
    "power": ("slurmkit.cli.power:power", "Power nodes off/on through their provider (slurmctld's power saving)."),
    "report": ("slurmkit.cli.report:report", "Cluster reports (fragmentation)."),
    "defrag": ("slurmkit.cli.defrag:defrag",
               "Free a whole leaf for a job blocked by fragmentation by moving checkpointing jobs (plan/run)."),
    "monitor": ("slurmkit.cli.monitor:monitor", "Prometheus config, alert rules and Grafana dashboards (generate)."),
    "exporter": ("slurmkit.cli.monitor:exporter", "Serve the cluster's view (GPUs, jobs, tenants) to Prometheus."),
    "bmc": ("slurmkit.cli.monitor:bmc",
            "Read BMC sensors (Redfish/IPMI): fans, PSUs, inlet temperature, power; findings and metrics."),
    "acceptance": ("slurmkit.cli.acceptance:acceptance",
                   "Measure all-reduce bandwidth per node/pair/leaf as Slurm jobs; name the slow node."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        target = COMMANDS[name][0]
        mod, attr = target.split(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            raise click.ClickException(f"command {name!r} is not available in this build ({exc})") from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmkit")
def cli() -> None:
    """slurmkit: Slurm config, topology-aware jobs and GPU health hooks for GPU clusters."""


def _unwind_on_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP raise ``Interrupted`` in the main thread instead of ending Python at once (their
    default action runs no ``finally``: an interrupted `conf validate` left its slurmctld and temp dir behind). Once:
    a second signal while the first unwinds is noted, not raised, so the cleanup finishes. A signal this process
    was started ignoring (nohup, a shell's background job) stays ignored; one a command handles itself (defrag watch)
    is its own."""
    import signal  # no threading import on the hooks' path: signal.signal refuses a thread (ValueError) itself

    from slurmkit.errors import Interrupted

    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        fired.append(signum)
        if len(fired) == 1:
            raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            try:
                signal.signal(sig, handler)
            except ValueError:  # not the main thread (run_cli called from a test's thread): leave them be
                return


def run_cli(command: click.Command, argv: list[str] | None = None, prog: str | None = None) -> None:
    """Run a click command; library errors become one line on stderr and their exit code (the edge's job)."""
    from slurmkit.errors import Interrupted, SlurmkitError

    _unwind_on_signals()
    try:
        rv = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except SlurmkitError as exc:
        click.echo(f"{prog or 'slurmkit'}: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, Interrupted) as exc:
        # click turns a KeyboardInterrupt (Interrupted is one) into Abort; the signal's exit code, as a shell has it
        sig = exc if isinstance(exc, Interrupted) else exc.__cause__ or exc.__context__
        if isinstance(sig, Interrupted):
            click.echo(f"{prog or 'slurmkit'}: interrupted by {sig.name}", err=True)
            sys.exit(128 + sig.signum)
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


def main(argv: list[str] | None = None) -> None:
    run_cli(cli, argv, "slurmkit")


if __name__ == "__main__":
    main()
