"""The hook edge without click: what slurmd runs on every job start must import as little as possible.

``slurmkit hook prolog|epilog|health [--inventory F] [--state-dir D] [--policy F] [--textfile-dir D]`` is parsed
here (``fast_main``) before ``slurmkit.cli.main`` imports click; anything else (``--help``, an unknown flag) falls
back to the click command in ``slurmkit.cli.hook``, which calls the same ``run``. The NVML worker is forked as soon
as the node name is known, so loading NVML (and ``nvmlInit``, seconds without persistence mode) overlaps with
loading the inventory and the health library.
"""

from __future__ import annotations

import os
import sys
import time

_T0 = time.monotonic()  # the budget counts from as early as this module can see

DEFAULT_STATE_DIR = "/var/lib/slurmkit"
HOOKS = ("prolog", "epilog", "health")
_FLAGS = {"--inventory": "inventory", "--state-dir": "state_dir", "--policy": "policy_file",
          "--textfile-dir": "textfile_dir"}


def budget_start() -> float:
    """Import time counts against the budget, but a module imported long ago (a test runner, a long-lived caller)
    must not start a run with its budget already spent: count at most one second before the command."""
    return max(_T0, time.monotonic() - 1.0)


def state_dir_default() -> str:
    return os.environ.get("SLURMKIT_STATE_DIR") or DEFAULT_STATE_DIR


def node_name(explicit: str | None = None) -> str:
    return explicit or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def job_gpus(raw: str | None, where: str | None = None) -> list[int] | None:
    """SLURM_JOB_GPUS: node-level gres indices (``0,1,4``; ranges in some versions).

    ``where`` names a flag: bad input there is a one-line usage error. From slurmd's environment an unreadable
    value widens the hardware checks to every GPU (a superset of the job's) rather than failing the job on a parse;
    processes of other running jobs are still never judged or killed (their owner is read from /proc).
    """
    if raw is None or not raw.strip():
        return None
    from slurmkit.indexlist import expand_ints

    try:
        return expand_ints(raw)
    except ValueError:
        if where:
            from slurmkit.errors import UsageError

            raise UsageError(f"{where}: expected GPU indices like 0,1 or 0-3, got {raw!r}") from None
        return None


def prepare_env(inventory: str | None) -> None:
    # slurmd runs hooks without PATH (and HealthCheckProgram without SLURM_CONF): give scontrol a chance.
    if not os.environ.get("PATH"):
        from slurmkit.health.slurmctl import HOOK_PATH

        os.environ["PATH"] = HOOK_PATH
    if not os.environ.get("SLURM_CONF") and inventory:
        conf = os.path.join(os.path.dirname(os.path.abspath(inventory)), "slurm.conf")
        if os.path.exists(conf):  # the generated wrappers sit next to slurm.conf and the inventory copy
            os.environ["SLURM_CONF"] = conf


DEFAULT_INVENTORY = "/etc/slurm/slurmkit.yaml"


def default_inventory(environ: dict[str, str] | None = None) -> str | None:
    """The site inventory when no --inventory is given, in the order the rest of slurmkit looks: $SLURMKIT_INVENTORY
    (must exist), then slurmkit.yaml beside $SLURM_CONF (where `conf generate` writes it next to the hook wrappers),
    then /etc/slurm/slurmkit.yaml. None when there is none."""
    env = os.environ if environ is None else environ
    explicit = env.get("SLURMKIT_INVENTORY")
    if explicit:
        if not os.path.isfile(explicit):
            from slurmkit.errors import UsageError

            raise UsageError(f"$SLURMKIT_INVENTORY={explicit}: no such file")
        return explicit
    conf = env.get("SLURM_CONF")
    if conf:
        beside = os.path.join(os.path.dirname(os.path.abspath(conf)), "slurmkit.yaml")
        if os.path.isfile(beside):
            return beside
    return DEFAULT_INVENTORY if os.path.isfile(DEFAULT_INVENTORY) else None


def parse_fast(argv: list[str]) -> dict[str, str | None] | None:
    """``[--flag value | --flag=value]...`` for the four hook flags; None for anything else (click handles it)."""
    opts: dict[str, str | None] = dict.fromkeys(_FLAGS.values())
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        if name not in _FLAGS:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        if not value:
            return None
        opts[_FLAGS[name]] = value
        i += 1
    return opts


def fast_main(argv: list[str]) -> None:
    """``argv``: what follows ``slurmkit``. Returns (nothing done) unless it is a hook run it can parse."""
    if len(argv) < 2 or argv[0] != "hook" or argv[1] not in HOOKS:
        return
    opts = parse_fast(argv[2:])
    if opts is None:
        return
    run(argv[1], opts["inventory"], opts["state_dir"] or state_dir_default(), opts["policy_file"],
        opts["textfile_dir"])


def host_textfile_dir(fake_nvml: str | None) -> str | None:
    """node_exporter's textfile directory when this is a real GPU node that has one (Debian's prometheus-node-exporter
    default), else None (the metrics go to the node's state dir). Never for a fake-NVML node (the lab, tests, benches):
    a fake node's metrics, a fake drain among them, must not overwrite the host's own."""
    if fake_nvml:
        return None
    from slurmkit.health.policy import DEFAULT_TEXTFILE_DIR

    return DEFAULT_TEXTFILE_DIR if os.path.isdir(DEFAULT_TEXTFILE_DIR) else None


def run(hook: str, inventory: str | None, state_dir: str, policy_file: str | None, textfile_dir: str | None) -> None:
    node = node_name()
    # $SLURMKIT_TEXTFILE_DIR (``%n``: the node's name): where the lab puts each virtual node's metrics
    textfile_dir = textfile_dir or os.environ.get("SLURMKIT_TEXTFILE_DIR") or None
    fake = os.environ.get("SLURMKIT_FAKE_NVML") or None
    if inventory is None:
        try:
            inventory = default_inventory()
        except Exception:  # noqa: BLE001 - a bad $SLURMKIT_INVENTORY must not fail a job: run with defaults
            inventory = None
    from slurmkit.health.nvmlworker import Worker

    worker = Worker.prefork(fake, node)  # before any thread and before the heavy imports below
    from slurmkit.health.hooks import HookEnv, record_internal_error, run_hook
    from slurmkit.health.output import log_line, to_syslog

    prepare_env(inventory)
    uid = os.environ.get("SLURM_JOB_UID")
    raw_gpus = os.environ.get("SLURM_JOB_GPUS")
    # unset: the job has no GPUs (Slurm sets it only for a job with gpu/shard/mps gres), so its scope is empty
    gpus = [] if raw_gpus is None or not raw_gpus.strip() else job_gpus(raw_gpus)
    env = HookEnv(
        hook=hook, node=node, state_dir=state_dir, inventory=inventory, policy_file=policy_file,
        fake_nvml=fake, job_id=os.environ.get("SLURM_JOB_ID"),
        job_uid=int(uid) if uid and uid.isdigit() else None, job_user=os.environ.get("SLURM_JOB_USER"),
        job_gpus=gpus, textfile_dir=textfile_dir, host_textfile_dir=host_textfile_dir(fake), ppid=os.getppid(),
        started_mono=budget_start(), worker=worker, job_exit=os.environ.get("SLURM_JOB_EXIT_CODE2"),
    )
    try:
        report = run_hook(env)
    except Exception as exc:  # a bug or a broken inventory: say so in one line, fail closed in prolog/epilog
        worker.abandon()
        line = f"slurmkit {hook} {env.node}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"
        _say(line)
        to_syslog(line, failed=True)
        code = 1 if hook in ("prolog", "epilog") else 2
        record_internal_error(state_dir, env.node, hook, env.job_id, line, code)
        exit_now(code)
    line = log_line(report)
    _say(line)  # slurmd logs a failing hook's stderr; the JSON record has the rest
    to_syslog(line, failed=report.exit_code != 0)
    exit_now(report.exit_code)


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # slurmd closed our stderr: the record and syslog still have the line


def exit_now(code: int) -> None:
    import threading

    if threading.active_count() > 1:
        # A gather thread is stuck (a dead mount): do not let interpreter shutdown wait on it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
