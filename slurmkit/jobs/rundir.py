"""The run dir of a job: rendered script, resolved environment, argv, git state; and the job-id -> run-dir index.

Layout (``<run_root>/<name>-<YYYYmmdd-HHMMSS>-<hex>/``)::

    script.sh        the exact script given to sbatch
    submit.json      sbatch argv, gpusub argv, spec, plan, facts source, git SHA + dirty flag, job id
    env.txt          every variable the job sets, with its reason (what --explain prints)
    logs/<job>.r<N>.log       one log per attempt (N = SLURM_RESTART_COUNT), written by the batch shell
    logs/<job>.r<N>.ranks/<node>/   torchrun's per-rank stdout/stderr files of that attempt (--tee, --log-dir)
    logs/slurm-<job>.out      Slurm's own messages for the batch step
    attempts/<job>.r<N>.nodes / .exit   node list and step exit code of each attempt
    attempts/<job>.r<N>.reason          after a preemption signal or Slurm's requeue: requeued, or why not
    attempts/<job>.r<N>.checkpoint      the step the program saved in that attempt ($GPUSUB_CHECKPOINT_STEP_FILE)
    attempts/<job>.r<N>.unpinned        the batch shell cleared gpusub's node pin after this attempt's requeue
    pin              gpusub's pin once the check after the submission moved it (empty: cleared)
    preempt/<job>.r<N>        appears when the preemption signal arrived (the checkpoint contract)
    checkpoints/              $GPUSUB_CHECKPOINT_DIR
    nccl_trace/               flight-recorder dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE)
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from slurmkit.errors import UsageError

if TYPE_CHECKING:
    from slurmkit.jobs.render import RenderedJob


# The batch shell's exit code when a run stopped unfinished after a clean checkpoint (--max-restarts reached, or
# scontrol requeue failed): EX_TEMPFAIL (sysexits.h, "temporary failure ... the user is invited to retry"), so the job
# ends FAILED and `afterok` dependents do not start on an unfinished model. A failing step keeps its own code.
STOPPED_EXIT = 75


def default_run_root(site_root: str | None, environ: Mapping[str, str], cwd: str) -> str:
    """The site's run root (per user), else ``./gpusub-runs`` in the submit directory (shared, like the code)."""
    if environ.get("GPUSUB_RUN_ROOT"):
        return os.path.abspath(environ["GPUSUB_RUN_ROOT"])
    if site_root:
        user = environ.get("USER") or environ.get("LOGNAME") or str(os.getuid())
        return os.path.join(site_root, user)
    return os.path.join(cwd, "gpusub-runs")


def new_run_dir(root: str, name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    return os.path.join(os.path.abspath(root), f"{safe}-{stamp}-{os.urandom(2).hex()}")


def git_state(path: str) -> dict[str, object]:
    """SHA and dirty flag of the repository holding ``path``; ``{}`` when it is not in a git work tree.

    One ``git status --porcelain=v2 --branch`` (the commit and the changes in one call), and none at all when no
    ``.git`` is found above the script (git's own discovery, unless GIT_DIR/GIT_WORK_TREE point elsewhere)."""
    where = os.path.realpath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
    top = _repo_top(where)
    if top is None and not (os.environ.get("GIT_DIR") or os.environ.get("GIT_WORK_TREE")):
        return {}
    # imported here: subprocess only when a run dir is really written (not for --dry-run)
    from slurmkit.backend.run import run

    res = run(["git", "-C", where, "status", "--porcelain=v2", "--branch", "--untracked-files=no"], timeout=10,
              check=False)
    if res.rc != 0:
        return {}
    lines = res.stdout.splitlines()
    sha = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), "")
    if not sha or sha == "(initial)":  # no commit yet: nothing to record
        return {}
    return {"repo": top or where, "sha": sha, "dirty": any(not line.startswith("#") for line in lines)}


def _repo_top(where: str) -> str | None:
    """The nearest directory at or above ``where`` holding ``.git`` (a directory, or a file in a worktree or
    submodule), as git finds its work tree."""
    d = where
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def write_run_dir(job: RenderedJob, gpusub_argv: list[str], git: dict[str, object] | None = None) -> None:
    """Everything but the job id: written before sbatch so the job finds its directories."""
    root = Path(job.run_dir)
    try:
        for sub in ("logs", "attempts", "preempt", "checkpoints", "nccl_trace"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--run-dir {job.run_dir}: cannot create it: {exc.strerror}") from exc
    _atomic(root / "script.sh", job.request.script)
    env_lines = [f"{v.name}={v.value}\t# [{v.kind}/{v.origin}] {v.reason}" for v in job.env.vars]
    env_lines += [f"# {name} not set: {why}" for name, why in job.env.not_set]
    _atomic(root / "env.txt", "\n".join(env_lines) + "\n")
    record = {
        "sbatch_argv": job.request.command(),
        "workdir": job.request.workdir,
        "gpusub_argv": gpusub_argv,
        "spec": asdict(job.spec),
        "plan": job.plan_line(),
        "facts_source": job.facts.source,
        "git": git if git is not None else git_state(job.spec.script),
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _atomic(root / "submit.json", json.dumps(record, indent=2, sort_keys=True) + "\n")


def record_job_id(run_dir: str, job_id: str, environ: Mapping[str, str], cluster: str | None = None) -> None:
    """The job id into ``submit.json``, and ``<index>/<cluster>/<job id>`` -> run dir (``cluster``: see
    ``cluster_key``; computed from ``environ`` when not given; no index entry when it cannot be known)."""
    path = Path(run_dir) / "submit.json"
    data = json.loads(path.read_text())
    data["job_id"] = job_id
    key = cluster if cluster is not None else cluster_key(environ)
    if key:
        data["cluster"] = key
    _atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    if not key:
        return  # ids repeat across clusters: an entry under no cluster could answer for another cluster's job
    idx = index_dir(environ) / key
    try:
        idx.mkdir(parents=True, exist_ok=True)
        _atomic(idx / job_id, run_dir + "\n")
    except OSError:
        pass  # the index is a convenience: `gpusub logs` falls back to the job's StdOut path


def index_dir(environ: Mapping[str, str]) -> Path:
    """``<state>/jobs``: one directory per cluster (``cluster_key``), one file per job id in it. Files directly in
    it are from gpusub before the per-cluster keys (issue 25): their cluster is unknown, so they are never read."""
    if environ.get("SLURMKIT_STATE_DIR"):
        return Path(environ["SLURMKIT_STATE_DIR"]) / "jobs"
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME", "/tmp"), ".local", "state")
    return Path(base) / "slurmkit" / "jobs"


# slurm.conf(5) SlurmctldPort default, and read_config.c's SLURMCTLD_PORT (22.05 and 24.11)
_DEFAULT_CTLD_PORT = "6817"


def cluster_key(environ: Mapping[str, str]) -> str | None:
    """Which cluster a job id belongs to: ``<ClusterName>@<primary SlurmctldHost>:<SlurmctldPort>``.

    Job ids are only unique within one slurmctld: clusters sharing a home directory repeat them, and so do two
    labs on one host, which are all called ``lab`` (hence the controller in the key, not the name alone).
    Read from ``$SLURM_CONF`` (else /etc/slurm/slurm.conf), as the Slurm commands read it; where that file is not
    here (configless), from ``scontrol show config``. None when neither answers."""
    path = Path(environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None:
        from slurmkit.generate.confparse import parse_slurm_conf

        conf = parse_slurm_conf(text, str(path))
        host = conf.controllers[0] if conf.controllers else conf.value("ControlMachine")
        return _key(conf.value("ClusterName"), host, conf.value("SlurmctldPort"))
    from slurmkit.backend.run import run

    try:
        res = run(["scontrol", "show", "config"], timeout=10, check=False, env=environ)
    except Exception:  # noqa: BLE001 - no Slurm here at all: no cluster to key by
        return None
    if res.rc != 0:
        return None
    return _key(*show_config_identity(res.stdout))


def show_config_identity(text: str) -> tuple[str, str, str]:
    """(ClusterName, SlurmctldHost[0], SlurmctldPort) from ``scontrol show config`` (``Key = value`` lines,
    src/api/config_info.c in 22.05 and 24.11)."""
    vals: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            vals.setdefault(k.strip(), v.strip())
    return vals.get("ClusterName", ""), vals.get("SlurmctldHost[0]", ""), vals.get("SlurmctldPort", "")


def _key(name: str, host: str, port: str) -> str | None:
    # read_config.c lower-cases ClusterName (22.05 and 24.11); "host(addr)": the name is the host's identity
    name = name.strip().lower()
    if not name:
        return None
    host = host.split("(", 1)[0].strip()
    key = f"{name}@{host}:{port.strip() or _DEFAULT_CTLD_PORT}" if host else name
    return re.sub(r"[^A-Za-z0-9_.:@+-]", "_", key)


def lookup_run_dir(job_id: str, environ: Mapping[str, str], cluster: str | None = None) -> str | None:
    """The run dir gpusub recorded for ``job_id`` on this cluster (``cluster``, else ``cluster_key(environ)``);
    None for a job of another cluster, one submitted elsewhere, or when the cluster cannot be known."""
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        return None  # not a job id (and never a path into the index)
    key = cluster if cluster is not None else cluster_key(environ)
    if not key:
        return None
    base = job_id.split("_", 1)[0] if "_" in job_id else job_id
    for k in (job_id, base):
        p = index_dir(environ) / key / k
        if p.is_file():
            return p.read_text().strip() or None
    return None


def attempt_logs(run_dir: str, job_id: str) -> list[Path]:
    """``logs/<job>.r<N>.log`` in attempt order."""
    logs = Path(run_dir) / "logs"
    found = []
    for p in logs.glob(f"{job_id}.r*.log"):
        m = re.fullmatch(rf"{re.escape(job_id)}\.r(\d+)\.log", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def array_task_logs(run_dir: str, job_id: str) -> list[Path]:
    """An array job's id (``7``) names no log itself: ``logs/<job>_<task>.r<N>.log`` in (task, attempt) order."""
    found = []
    for p in (Path(run_dir) / "logs").glob(f"{job_id}_*.r*.log"):
        m = re.fullmatch(rf"{re.escape(job_id)}_(\d+)\.r(\d+)\.log", p.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), p))
    return [p for _, _, p in sorted(found)]


def last_exit(run_dir: str, job_id: str) -> tuple[int, int] | None:
    """(attempt, exit code) of the latest finished attempt recorded by the batch shell."""
    best = None
    for p in (Path(run_dir) / "attempts").glob(f"{job_id}.r*.exit"):
        m = re.fullmatch(rf"{re.escape(job_id)}\.r(\d+)\.exit", p.name)
        if not m:
            continue
        try:
            rc = int(p.read_text().strip() or "0")
        except ValueError:
            continue
        attempt = int(m.group(1))
        if best is None or attempt > best[0]:
            best = (attempt, rc)
    return best


def last_reason(run_dir: str, job_id: str) -> str | None:
    """Why the latest attempt that recorded one ended (``attempts/<job>.r<N>.reason``, written by the batch shell
    after a preemption signal: requeued, or not requeued because --max-restarts was reached)."""
    found = last_reason_of(run_dir, job_id)
    return found[1] if found else None


def checkpoint_step(run_dir: str, job_id: str, attempt: int) -> int | None:
    """The step attempt ``attempt`` recorded in ``attempts/<job>.r<N>.checkpoint`` ($GPUSUB_CHECKPOINT_STEP_FILE,
    written by the program after its save); None when it recorded none or no number."""
    try:
        with open(Path(run_dir) / "attempts" / f"{job_id}.r{attempt}.checkpoint", encoding="utf-8",
                  errors="replace") as f:
            text = f.readline(40).strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def last_reason_of(run_dir: str, job_id: str) -> tuple[int, str] | None:
    """(attempt, reason) of the latest attempt that recorded a reason."""
    best: tuple[int, Path] | None = None
    for p in (Path(run_dir) / "attempts").glob(f"{job_id}.r*.reason"):
        m = re.fullmatch(rf"{re.escape(job_id)}\.r(\d+)\.reason", p.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    if best is None:
        return None
    try:
        text = best[1].read_text().strip()
    except OSError:
        return None
    return (best[0], text) if text else None


def _atomic(path: Path, text: str) -> None:
    """Write and rename: a reader (the job, `gpusub status`, another submit) sees the old file or the new one, never
    a torn one. No fsync: it bought durability across a crash of the submit host only, for records Slurm does not
    need (sbatch gets the script on stdin; the job recreates its directories), and cost a disk flush per file, five
    per submit -- ~90 ms of a submit's wall time on this VM's ext4 while another process loaded the disk (19 ms
    each; little on an idle disk), and a COMMIT round trip each on an NFS home."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
