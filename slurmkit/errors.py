"""Every error slurmkit raises on purpose derives from SlurmkitError.

Edges (CLIs, hooks) turn these into one line on stderr and an exit code; library code never prints.
"""

from __future__ import annotations

from collections.abc import Sequence


class SlurmkitError(Exception):
    """Base class. ``exit_code`` is what an edge exits with."""

    exit_code = 1

    def one_line(self) -> str:
        return " ".join(str(self).split())


class UsageError(SlurmkitError):
    """Bad input from a user (a flag, a file): exit 2 like click's own usage errors."""

    exit_code = 2


class InventoryError(UsageError):
    """An inventory problem, always tied to a key path such as ``node_groups[2].gpus.count``."""

    def __init__(self, path: str, message: str, source: str | None = None):
        self.path = path
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


class ParseError(SlurmkitError):
    """Output of a Slurm command (or a file in Slurm's format) that slurmkit cannot read as that command prints it."""


class ConfigValidationError(SlurmkitError):
    """Generated or on-disk Slurm config failed validation; ``problems`` lists every finding."""

    exit_code = 2

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        first = self.problems[0] if self.problems else "invalid configuration"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{first}{more}")


class SlurmCommandError(SlurmkitError):
    """A Slurm command exited non-zero (or could not be started)."""

    def __init__(self, argv: Sequence[str], rc: int, stderr: str):
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        msg = " ".join(stderr.strip().splitlines()[-1:]) if stderr.strip() else "no output"
        super().__init__(f"{self.argv[0]} failed (rc={rc}): {msg}")


class SlurmTimeout(SlurmCommandError):
    """A Slurm command did not finish within its timeout (slurmctld down or hung)."""

    def __init__(self, argv: Sequence[str], timeout: float):
        self.timeout = timeout
        SlurmkitError.__init__(
            self,
            f"{' '.join(argv[:3])} timed out after {timeout:g}s (is slurmctld up? check `scontrol ping`)",
        )
        self.argv = list(argv)
        self.rc = 124
        self.stderr = ""


class LabError(SlurmkitError):
    """The local Slurm lab could not be started, queried or stopped."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGHUP reached a slurmkit CLI (``timeout 1 slurmkit ...``, a CI step cancelled, Ctrl-C, a
    closed terminal): raised in the main thread by the edge's handler (cli/main.py) so that every ``finally`` and
    ``with`` runs -- the real parse stops its slurmctld and removes its temp dir -- where the default action would end
    Python on the spot. A KeyboardInterrupt, so code that already stops cleanly on Ctrl-C does the same here."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)
