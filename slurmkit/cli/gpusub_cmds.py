"""gpusub's click commands (slurmkit/cli/gpusub.py is the entry point): one command from train.py to a placed, preemption-safe multi-node PyTorch / Megatron-LM job.

    gpusub [OPTIONS] SCRIPT [-- SCRIPT_ARGS...]      build, check and submit (or --dry-run)
    gpusub status JOB...   |  gpusub logs [-f] JOB  |  gpusub cancel JOB

The edge: parses options, reads the environment, prints, picks exit codes. Everything else is in
slurmkit.jobs and imported lazily, so ``gpusub --help`` loads click and nothing else.
"""

from __future__ import annotations

import os
import sys

import click

SUBCOMMANDS = ("status", "logs", "cancel", "wait")

CONTRACT = """\b
Preemption / time-limit contract for the training script:
  * SIGUSR2 reaches every training process --signal-grace seconds before the
    time limit, on `scancel --signal=USR2 --batch JOB` and at a QOS
    preemption, once per process, and the file $GPUSUB_PREEMPT_FILE appears
    2 s later. Save a checkpoint (e.g. in $GPUSUB_CHECKPOINT_DIR) and exit.
  * Handle SIGTERM the same way (scontrol requeue, preemption without user
    signal, scancel, time limit): SIGKILL follows after Slurm's KillWait.
  * The batch shell then runs `scontrol requeue`, at most --max-restarts times
    (none when Slurm requeued or is ending the job); a run stopped unfinished
    exits 75, so `afterok` dependents do not start; --follow exits with the
    job's own exit code.
  * On restart $GPUSUB_RESTART_COUNT (= SLURM_RESTART_COUNT) > 0: resume.
  * After a save, write its step into $GPUSUB_CHECKPOINT_STEP_FILE: the log
    ends "checkpointed at step N, requeued", ranks failing on their way out
    after it get no torchrun ChildFailedError report, and `gpusub status`
    says "requeued after checkpoint at step N" (megatron: read from
    <--save>/latest_checkpointed_iteration.txt).
  * --launcher megatron: each rank gets SIGTERM (or its --exit-signal) once
    instead, and Megatron's --exit-signal-handler (added) saves to --save.
Environment: a value you exported for a variable gpusub sets is kept
(--env wins over it); --explain says whose value won and why.
Logs: <run dir>/logs/<job>.r<restart>.log, each line of the step behind its
rank ("3: ...", --no-label: none); torchrun also keeps each rank's output in
<run dir>/logs/<job>.r<restart>.ranks/<node>/. Defaults come from the site inventory
($SLURMKIT_INVENTORY, else slurmkit.yaml beside $SLURM_CONF, else
/etc/slurm/slurmkit.yaml), else from sinfo/scontrol.

\b
Other commands:
  gpusub status JOB...       state of jobs (array tasks as JOB_TASK)
  gpusub logs [-f] JOB       every attempt's log, in order; -f follows
  gpusub cancel [--signal USR2] JOB
  gpusub wait JOB            until it ends; exits with the job's code
Each of them, and the submit, takes --remote [USER@]HOST[:PORT]: over ssh
(ControlMaster), on the cluster's own gpusub; the submit ships the tree.
status, wait and cancel also take --remote https://HOST:PORT (slurmrestd, JWT).
"""


def _backend():  # type: ignore[no-untyped-def]
    """The CLI backend; pyslurm only with SLURMKIT_BACKEND=pyslurm and a pyslurm matching the running Slurm."""
    from slurmkit.backend.pyslurm import select_backend

    return select_backend()


def _fail(exc: Exception) -> None:
    from slurmkit.errors import SlurmkitError

    if isinstance(exc, SlurmkitError):
        for line in getattr(exc, "errors", None) or (exc.one_line(),):  # a preflight: every error, a line each
            click.echo(f"gpusub: error: {line}", err=True)
        sys.exit(exc.exit_code)
    raise exc


REMOTE_VALUE_OPTS = ("--remote", "--ssh-config", "--ssh-option", "--remote-gpusub", "--remote-dir", "--remote-token")


def _ssh_options(f, rest: bool = False):  # type: ignore[no-untyped-def]
    """--remote and how to reach it: the same on the submit and on status/logs/cancel/wait."""
    if rest:
        f = click.option("--jwt-file", default=None, metavar="FILE",
                         help="--remote https://...: the token file (mode 0600) [$SLURM_JWT].")(f)
    f = click.option("--remote-gpusub", default=None, metavar="CMD",
                     help="The cluster's gpusub command [$GPUSUB_REMOTE_GPUSUB, else gpusub on the remote PATH].")(f)
    f = click.option("--ssh-option", "ssh_options", multiple=True, metavar="OPT=VALUE",
                     help="--remote: an ssh -o option (repeatable; it wins over the reuse defaults).")(f)
    f = click.option("--ssh-config", default=None, metavar="FILE",
                     help="--remote: ssh -F FILE instead of ~/.ssh/config.")(f)
    return click.option("--remote", default=None, metavar="[USER@]HOST[:PORT]" + ("|URL" if rest else ""),
                        help="Run on this cluster's login node over ssh (no Slurm needed here; see docs)"
                        + ("; https://[USER@]HOST:PORT: slurmrestd with a JWT." if rest else "."))(f)


def _rest_options(f):  # type: ignore[no-untyped-def]
    return _ssh_options(f, rest=True)


def _remote(remote: str, ssh_config: str | None, ssh_options: tuple[str, ...], remote_gpusub: str | None,  # type: ignore[no-untyped-def]
            jwt_file: str | None = None, what: str = ""):
    from slurmkit.errors import UsageError
    from slurmkit.jobs.remote import Remote, Target
    from slurmkit.jobs.rest import RestRemote, is_url, read_token

    if is_url(remote):
        if what:
            raise UsageError(f"--remote {remote} (slurmrestd): {what}; use the ssh transport (--remote [USER@]HOST)")
        return RestRemote.parse(remote, read_token(jwt_file, os.environ), os.environ, err=sys.stderr)
    if jwt_file:
        raise UsageError("--jwt-file: only with --remote https://...")

    return Remote(Target.parse(remote), ssh_config=os.path.abspath(ssh_config) if ssh_config else None,
                  ssh_options=tuple(ssh_options),
                  gpusub=remote_gpusub or os.environ.get("GPUSUB_REMOTE_GPUSUB") or "gpusub")


def _echo_remote(data: bytes, err: bool = False) -> None:
    from slurmkit.jobs.remote import clean

    text = clean(data.decode(errors="replace"))
    if text:
        click.echo(text, nl=False, err=err)


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog=CONTRACT,
)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-N", "--nodes", type=int, default=1, show_default=True, help="Nodes.")
@click.option("--gpus-per-node", type=int, default=None, help="GPUs (= processes) per node [partition's GPUs/node].")
@click.option("-p", "--partition", default=None, help="Partition [site default, else Slurm's default].")
@click.option("-t", "--time", "time_", default=None, help="Time limit (Slurm syntax), checked against MaxTime.")
@click.option("--account", default=None)
@click.option("--qos", default=None)
@click.option("--name", default=None, help="Job name [script name].")
@click.option("--launcher", type=click.Choice(["torchrun", "srun", "megatron"]), default="torchrun",
              show_default=True, help="torchrun (1 task/node), srun (1 task/GPU), megatron (torchrun + Megatron).")
@click.option("--tp", type=int, default=1, show_default=True, help="Megatron tensor-parallel size.")
@click.option("--pp", type=int, default=1, show_default=True, help="Megatron pipeline-parallel size.")
@click.option("--cp", type=int, default=1, show_default=True, help="Megatron context-parallel size.")
@click.option("--ep", type=int, default=1, show_default=True, help="Megatron expert-parallel size.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Extra environment (repeatable).")
@click.option("--container-image", default=None, help="pyxis container image for the step.")
@click.option("--container-mounts", default=None,
              help="Extra pyxis mounts (the run dir and the script's directory are always mounted).")
@click.option("--python", "python", default=None,
              help="Interpreter for the job [the one gpusub runs under; the image's python3 with --container-image].")
@click.option("--cpus-per-gpu", type=int, default=None,
              help="CPUs per GPU [the node's usable CPUs / GPUs, from the inventory or the node records].")
@click.option("--mem-per-gpu", default=None, metavar="SIZE",
              help="Memory per GPU, Slurm syntax (16G, 16000M) [the node's usable memory / GPUs].")
@click.option("--dependency", default=None, help="sbatch --dependency.")
@click.option("--array", default=None, help="sbatch --array.")
@click.option("--exclusive", is_flag=True, help="Whole nodes.")
@click.option("-x", "--exclude", default=None, metavar="HOSTLIST", help="sbatch --exclude: never these nodes.")
@click.option("-w", "--nodelist", default=None, metavar="HOSTLIST",
              help="sbatch --nodelist: exactly these nodes (placement then pins nothing of its own).")
@click.option("-C", "--constraint", default=None, help="sbatch --constraint (node features, e.g. h100&nvlink).")
@click.option("--reservation", default=None, help="sbatch --reservation [SBATCH_RESERVATION].")
@click.option("--begin", default=None, help="sbatch --begin (e.g. now+1hour, 2026-12-24T08:00).")
@click.option("--hold", is_flag=True, help="sbatch --hold: submit held (release with scontrol release).")
@click.option("--mail-type", default=None, help="sbatch --mail-type (e.g. END,FAIL).")
@click.option("--mail-user", default=None, help="sbatch --mail-user.")
@click.option("--comment", default=None, help="sbatch --comment (free text).")
@click.option("--cpu-bind/--no-cpu-bind", default=True, show_default=True,
              help="Run each rank on the cores of its GPU's NUMA node (see --explain).")
@click.option("--label/--no-label", default=True, show_default=True,
              help="Start every line of the step's output with its rank (\"3: ...\"; torchrun: also a log per "
              "rank in <run dir>/logs/<job>.r<N>.ranks); --no-label leaves lines as printed.")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, metavar="--OPT[=VALUE]",
              help="Any other sbatch option, passed through (repeatable; options gpusub sets itself are refused).")
@click.option("--signal-grace", type=int, default=120, show_default=True,
              help="Seconds between SIGUSR2 and the time limit (0: no signal).")
@click.option("--max-restarts", type=int, default=3, show_default=True, help="Requeues after a preemption signal.")
@click.option("--topology", type=click.Choice(["auto", "off", "strict"]), default="auto", show_default=True)
@click.option("--explain", is_flag=True, help="Print every environment variable with the reason it is set and whose value won.")
@click.option("--dry-run", is_flag=True, help="Print the script and the sbatch argv; submit nothing.")
@click.option("--follow", "-f", "follow_", is_flag=True, help="Tail the log until the job ends.")
@click.option("--run-dir", default=None, help="Run dir for this job [<run root>/<name>-<time>-<hex>].")
@click.option("--force", is_flag=True, help="Submit despite preflight errors (layout, memory, --test-only).")
@_ssh_options
@click.option("--remote-dir", default=None, metavar="DIR",
              help="--remote: where per-run dirs go on the cluster [gpusub-remote, under the remote home].")
@click.option("--remote-token", default=None, metavar="TOKEN",
              help="--remote: the run's name on the cluster; the same token again never submits twice [fresh].")
@click.option("--query/--no-query", default=None,
              help="--dry-run: plan on Slurm's live node states, queue and reservations, as the submission does "
                   "[--query when Slurm answers]; --no-query plans offline on an idle cluster.")
def submit_cmd(script: str, script_args: tuple[str, ...], nodes: int, gpus_per_node: int | None,
               partition: str | None, time_: str | None, account: str | None, qos: str | None, name: str | None,
               launcher: str, tp: int, pp: int, cp: int, ep: int, env_pairs: tuple[str, ...],
               container_image: str | None, container_mounts: str | None, python: str | None,
               cpus_per_gpu: int | None, mem_per_gpu: str | None, dependency: str | None,
               array: str | None, exclusive: bool, exclude: str | None, nodelist: str | None,
               constraint: str | None, reservation: str | None, begin: str | None, hold: bool,
               mail_type: str | None, mail_user: str | None, comment: str | None, cpu_bind: bool, label: bool, sbatch_args: tuple[str, ...],
               signal_grace: int, max_restarts: int, topology: str,
               explain: bool, dry_run: bool, follow_: bool, run_dir: str | None, force: bool,
               remote: str | None, ssh_config: str | None, ssh_options: tuple[str, ...], remote_gpusub: str | None,
               remote_dir: str | None, remote_token: str | None, query: bool | None) -> None:
    """Build, check and submit SCRIPT as a multi-node PyTorch DDP / Megatron-LM job.

    Arguments after `--` go to SCRIPT unchanged, byte for byte.
    """
    try:
        from dataclasses import replace

        from slurmkit.errors import UsageError
        from slurmkit.jobs.render import explain as explain_lines
        from slurmkit.jobs.spec import JobSpec, parse_env_pair, parse_mem_mb
        from slurmkit.jobs.submit import prepare, submit_prepared

        if dry_run and follow_:
            raise UsageError("--follow: nothing to follow with --dry-run (no job is submitted)")
        if remote is not None:
            ctx = click.get_current_context()
            _remote_submit(list((ctx.obj or {}).get("argv") or sys.argv[1:]), script, name,
                           _remote(remote, ssh_config, ssh_options, remote_gpusub, what="the submission ships the "
                                   "tree, which slurmrestd cannot carry"), remote_dir, remote_token,
                           run_dir=run_dir, dry_run=dry_run, follow_=follow_)
            return
        for opt, val in (("--remote-dir", remote_dir), ("--remote-token", remote_token), ("--ssh-config", ssh_config),
                         ("--remote-gpusub", remote_gpusub)):
            if val is not None:
                raise UsageError(f"{opt}: only with --remote")

        spec = JobSpec(
            script=os.path.abspath(script), args=tuple(script_args), nodes=nodes, gpus_per_node=gpus_per_node,
            partition=partition, time=time_, account=account, qos=qos, name=name, launcher=launcher,
            tp=tp, pp=pp, cp=cp, ep=ep, env=tuple(parse_env_pair(p) for p in env_pairs),
            container_image=container_image, container_mounts=container_mounts, dependency=dependency,
            array=array, exclusive=exclusive, signal_grace=signal_grace, max_restarts=max_restarts,
            topology=topology, run_dir=os.path.abspath(run_dir) if run_dir else None,
            python=os.path.abspath(python) if python and "/" in python else python,
            cpus_per_gpu=cpus_per_gpu,
            mem_per_gpu_mb=parse_mem_mb("--mem-per-gpu", mem_per_gpu) if mem_per_gpu is not None else None,
            exclude=exclude, nodelist=nodelist, constraint=constraint, reservation=reservation, begin=begin,
            hold=hold, mail_type=mail_type, mail_user=mail_user, comment=comment, sbatch_args=sbatch_args,
            cpu_bind=cpu_bind, label=label,
        )
        if dry_run:
            from slurmkit.errors import SlurmCommandError

            # the dry run is the submission: it plans on the same live states (node states, queue, reservations)
            # unless --no-query; when Slurm does not answer it plans offline and says so. The same checks and
            # exit codes as a submit; only sbatch --test-only is left out.
            backend = _backend() if query is not False else None
            try:
                prepared = prepare(spec, backend, force=force, test_only=False)
            except SlurmCommandError as exc:
                if query:
                    raise
                prepared = prepare(spec, None, force=force, test_only=False)
                prepared = replace(prepared, warnings=(
                    *prepared.warnings, f"Slurm did not answer ({exc.one_line()}): planned without live node states; "
                    "the submission plans on live states and may pin nodes"))
        else:
            backend = _backend()
            prepared = prepare(spec, backend, force=force)
        job = prepared.job
        if dry_run:
            click.echo(job.request.script, nl=False)
            click.echo("# sbatch argv: " + " ".join(job.request.command()) + "  (script on stdin)")
            click.echo("# " + job.plan_line())
            for w in prepared.warnings:
                click.echo(f"# warning: {w}")
            if job.memory:
                for line in job.memory.lines():
                    click.echo(f"# {line}")
            if explain:
                for line in (*prepared.tenant, *explain_lines(job)):
                    click.echo(f"# {line}")
            return
        for w in prepared.warnings:
            click.echo(f"gpusub: warning: {w}", err=True)
        if job.memory:
            for line in job.memory.lines():
                click.echo(line)
        if explain:
            click.echo("\n".join((*prepared.tenant, *explain_lines(job))))
        assert backend is not None  # a real submit always built one above
        result = submit_prepared(prepared, backend, ["gpusub", *sys.argv[1:]])
        click.echo(f"submitted job {result.job_id}")
        click.echo(job.plan_line())
        if result.unpinned:
            click.echo(f"gpusub: {result.unpinned}", err=True)
        if prepared.start_estimate and prepared.quota_waits:
            # job_start_data (src/slurmctld/job_scheduler.c, 22.05 and 24.11) tests the nodes only
            # (select_g_job_test, SELECT_MODE_WILL_RUN), never acct_policy: its time ignores the quota it waits for
            click.echo("estimated start: left out: sbatch --test-only ignores association and QOS limits "
                       "(see the warning above)")
        elif prepared.start_estimate:
            how = "" if "reservation" in prepared.start_estimate else " (sbatch --test-only)"
            click.echo(f"estimated start: {prepared.start_estimate}{how}")
        click.echo(f"run dir: {result.run_dir}")
        click.echo(f"log: {result.log_path}")
        if follow_:
            _follow_and_exit(result.job_id, backend, result.run_dir)
    except Exception as exc:  # noqa: BLE001 - the edge turns SlurmkitError into one line; others re-raise
        _fail(exc)


def remote_args(args: list[str], script_rel: str) -> list[str]:
    """The gpusub argv for the cluster: the --remote options left out, SCRIPT (the first argument that is no
    option or an option's value) replaced by its path in the shipped tree. Arguments after ``--`` stay as given."""
    takes_value = set(REMOTE_VALUE_OPTS)
    for p in submit_cmd.params:
        if isinstance(p, click.Option) and not p.is_flag:
            takes_value.update(p.opts)
    out: list[str] = []
    i, replaced = 0, False
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        name = a.split("=", 1)[0]
        if name in REMOTE_VALUE_OPTS:  # before or after SCRIPT: click takes options anywhere before --
            i += 1 if "=" in a else 2
            continue
        if a.startswith("-") and a != "-":
            out.append(a)
            if a in takes_value:  # the value is the next argument
                out += args[i + 1:i + 2]
                i += 1
        elif not replaced:
            out.append(script_rel)
            replaced = True
        else:
            out.append(a)  # a script argument before --
        i += 1
    return out


def _remote_submit(args: list[str], script: str, name: str | None, remote, remote_dir: str | None,  # type: ignore[no-untyped-def]
                   remote_token: str | None, *, run_dir: str | None, dry_run: bool, follow_: bool) -> None:
    from slurmkit.errors import UsageError
    from slurmkit.jobs import remote as rmt

    if run_dir is not None:
        raise UsageError("--run-dir: not with --remote (the run dir is <remote dir>/<token>/run on the cluster)")
    tree = rmt.find_tree(script, os.getcwd())
    token = rmt.check_token(remote_token) if remote_token else rmt.new_token(name or os.path.splitext(os.path.basename(script))[0])
    where = rmt.check_remote_dir(remote_dir or os.environ.get("GPUSUB_REMOTE_DIR") or "gpusub-remote")
    gargs = remote_args(args, tree.script_rel)
    how = f"git {tree.sha[:12]}" if tree.kind == "git" else "rsync"
    if dry_run:
        abs_dir, _ = rmt.ship(remote, tree, f"{where.rstrip('/')}/{token}")
        proc = rmt.run_in_tree(remote, abs_dir or f"{where.rstrip('/')}/{token}", tree.cwd_rel, gargs)
        _echo_remote(proc.stdout)
        _echo_remote(proc.stderr, err=True)
        sys.exit(proc.returncode)
    res = rmt.submit(remote, tree, gargs, token, where)
    _echo_remote(res.stdout.encode())
    _echo_remote(res.stderr.encode(), err=True)
    click.echo(f"remote: {remote.target}:{res.run_root} (token {token}; tree {how} from {tree.root}"
               + ("; submitted before, not again" if res.already else "") + ")")
    if res.rc != 0 or res.job_id is None:
        sys.exit(res.rc or 1)
    if follow_:
        import gc

        gc.enable()
        rc = rmt.follow_logs(remote, res.job_id, sys.stdout)
        sys.exit(rc)


def _follow_and_exit(job_id: str, backend, run_dir: str | None) -> None:  # type: ignore[no-untyped-def]
    import gc

    from slurmkit.jobs.monitor import exit_status, follow

    gc.enable()  # gpusub.main turned it off for the short startup; following can last hours
    st = follow(job_id, backend, sys.stdout, run_dir=run_dir)
    click.echo(f"gpusub: job {job_id} {st.state}" + (f" exit={st.exit_code}" if st.exit_code else "")
               + (f": {st.note}" if st.note else ""), err=True)
    sys.exit(exit_status(st))


@click.command("status", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="One JSON list of the jobs' fields (what --remote reads).")
@_rest_options
@click.argument("job_ids", nargs=-1, required=True)
def status_cmd(job_ids: tuple[str, ...], as_json: bool, remote: str | None, ssh_config: str | None,
               ssh_options: tuple[str, ...], remote_gpusub: str | None, jwt_file: str | None) -> None:
    """State of one or more jobs (one scontrol call; sacct or the run dir for finished ones)."""
    try:
        if remote is not None:
            r = _remote(remote, ssh_config, ssh_options, remote_gpusub, jwt_file)
            if not hasattr(r, "call"):  # slurmrestd
                from slurmkit.jobs.remote import job_status

                rows = r.status(list(job_ids))
                if as_json:
                    import json

                    click.echo(json.dumps(rows, sort_keys=True))
                else:
                    for row in rows:
                        click.echo(job_status(row).line())
                sys.exit(0 if all(row["state"] != "UNKNOWN" for row in rows) else 1)
            proc = r.call(r.gpusub_cmd(["status", *(["--json"] if as_json else []), *job_ids]), what="status")
            _echo_remote(proc.stdout)
            _echo_remote(proc.stderr, err=True)
            sys.exit(proc.returncode)
        from slurmkit.jobs.monitor import statuses

        rows = statuses(list(job_ids), _backend())
        if as_json:
            import json
            from dataclasses import asdict

            click.echo(json.dumps([{**asdict(r), "finished": r.finished} for r in rows], sort_keys=True))
        else:
            for r in rows:
                click.echo(r.line())
        sys.exit(0 if all(r.state != "UNKNOWN" for r in rows) else 1)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


@click.command("logs", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep tailing until the job ends.")
@_ssh_options
@click.argument("job_id")
def logs_cmd(job_id: str, follow_: bool, remote: str | None, ssh_config: str | None, ssh_options: tuple[str, ...],
             remote_gpusub: str | None) -> None:
    """Print the job's logs (every attempt, in order)."""
    try:
        if remote is not None:
            from slurmkit.jobs.remote import follow_logs

            r = _remote(remote, ssh_config, ssh_options, remote_gpusub, what="the logs are files of the run dir, which slurmrestd cannot read")
            if follow_:  # reconnects after a lost connection and goes on where it was
                sys.exit(follow_logs(r, job_id, sys.stdout))
            proc = r.call(r.gpusub_cmd(["logs", job_id]), what="logs")
            _echo_remote(proc.stdout)  # the job's own log, as `gpusub logs` prints it there, control characters out
            _echo_remote(proc.stderr, err=True)
            sys.exit(proc.returncode)
        from slurmkit.jobs.monitor import find_run_dir, print_logs

        backend = _backend()
        if follow_:
            _follow_and_exit(job_id, backend, None)
        run_dir = find_run_dir(job_id, backend)
        if not print_logs(job_id, run_dir, sys.stdout):
            click.echo(f"gpusub: no log yet for job {job_id} in {run_dir}/logs", err=True)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


@click.command("cancel", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--signal", "signal_", default=None, help="Send this signal to the batch shell instead (e.g. USR2).")
@_rest_options
@click.argument("job_id")
def cancel_cmd(job_id: str, signal_: str | None, remote: str | None, ssh_config: str | None,
               ssh_options: tuple[str, ...], remote_gpusub: str | None, jwt_file: str | None) -> None:
    """Cancel a job, or signal its batch shell (USR2: checkpoint and requeue)."""
    try:
        if remote is not None:
            r = _remote(remote, ssh_config, ssh_options, remote_gpusub, jwt_file,
                        what="--signal: slurmrestd signals every step (KILL_FULL_JOB), not the batch shell alone"
                        if signal_ else "")
            if not hasattr(r, "call"):  # slurmrestd
                r.cancel(job_id)
                click.echo(f"cancelled job {job_id}")
                return
            proc = r.call(r.gpusub_cmd(["cancel", *(["--signal", signal_] if signal_ else []), job_id]),
                          what="cancel")
            _echo_remote(proc.stdout)
            _echo_remote(proc.stderr, err=True)
            sys.exit(proc.returncode)
        from slurmkit.jobs.monitor import cancel

        cancel(job_id, _backend(), signal_)
        click.echo(f"{'signalled' if signal_ else 'cancelled'} job {job_id}")
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


@click.command("wait", context_settings={"help_option_names": ["-h", "--help"]})
@_rest_options
@click.argument("job_id")
def wait_cmd(job_id: str, remote: str | None, ssh_config: str | None, ssh_options: tuple[str, ...],
             remote_gpusub: str | None, jwt_file: str | None) -> None:
    """Wait until the job ends; print its state as it changes, exit with the job's own code (as --follow)."""
    try:
        import time

        from slurmkit.jobs.monitor import Backoff, exit_status, statuses

        if remote is not None:
            from slurmkit.jobs.remote import clean, job_status

            r = _remote(remote, ssh_config, ssh_options, remote_gpusub, jwt_file)
            row = r.wait(job_id, on_change=lambda row: click.echo(clean(job_status(row).line())))
            st = job_status(row)
        else:
            backend, nap, last = _backend(), Backoff(first=0.5, cap=10.0), None
            while True:
                st = statuses([job_id], backend)[0]
                if (st.state, st.restarts) != last:
                    click.echo(st.line())
                    last = (st.state, st.restarts)
                if st.finished or st.state == "UNKNOWN":
                    break
                time.sleep(nap())
        sys.exit(exit_status(st) if st.state != "UNKNOWN" else 1)
    except Exception as exc:  # noqa: BLE001
        _fail(exc)


_COMMANDS = {"status": status_cmd, "logs": logs_cmd, "cancel": cancel_cmd, "wait": wait_cmd}


def main(args: list[str]) -> None:
    """``gpusub status|logs|cancel ...`` dispatch to those commands; anything else is a submit.

    (A script literally named ``status`` is submitted as ``./status``.)
    """
    if args and args[0] in _COMMANDS:
        _COMMANDS[args[0]].main(args=args[1:], prog_name=f"gpusub {args[0]}")
    else:
        submit_cmd.main(args=args, prog_name="gpusub", obj={"argv": list(args)})


def help_text() -> str:
    """What ``gpusub --help`` prints (click's own rendering, at this terminal's width), for the help cache."""
    ctx = submit_cmd.make_context("gpusub", [], resilient_parsing=True)
    return ctx.get_help() + "\n"  # click.echo's newline
