"""Nodes joining and leaving a running cluster: the files, the inventory copy and the daemons change together.

The I/O next to ``edit`` and ``path``. The cluster is the one ``$SLURM_CONF`` points at (the edge says which); the
inventory is the copy ``slurmkit.yaml`` beside it, and it is written in the same all-or-nothing set as the Slurm
files (``rollout.write_files``). When the cluster does not take the change (slurmctld does not come back, the
reconfigure fails), or nodes that join do not come into service (their slurmd does not start or register in
time), the previous set is written back and the cluster brought back onto it: both as they were.

One change at a time: ``locked`` holds an exclusive flock on ``.slurmkit-nodes.lock`` beside the inventory from
reading the inventory to the end, so two commands never edit the same inventory copy and lose one's change;
`conf apply`, which writes the same set, takes it too (cli/conf.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from slurmkit import hostlist
from slurmkit.backend.cli import CLIBackend
from slurmkit.elastic.edit import Edit
from slurmkit.elastic.path import RESTART_CTLD, ChangePath
from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.generate.slurmconf import Overrides

Progress = Callable[[str], None]
INVENTORY_NAME = "slurmkit.yaml"
LOCK_NAME = ".slurmkit-nodes.lock"
DRAIN_REASON = "slurmkit: leaving the cluster (nodes remove)"
JOIN_REASON = "slurmkit: joining the cluster (nodes add)"


class ElasticError(SlurmkitError):
    """The cluster did not take a node change; the message says in what state files and cluster are."""


class Site:
    """How this cluster's daemons are driven. A real site: slurmctld through ``ctld_restart`` (an argv, default
    ``systemctl restart slurmctld``); slurmd on the nodes is the site's to start (its own image, its own unit)."""

    def __init__(self, conf_dir: Path, overrides: Overrides | None = None,
                 ctld_restart: tuple[str, ...] = ("systemctl", "restart", "slurmctld"),
                 rollout: Any = None) -> None:
        self.conf_dir = conf_dir
        self._overrides = overrides
        self.ctld_restart = ctld_restart
        from slurmkit.model.cluster import Rollout

        self.rollout: Rollout = rollout or Rollout()  # the inventory's `rollout:` commands (conf apply --execute)

    # --- what `conf apply --execute` drives (slurmkit/elastic/execute.py) ----------------------------------
    def stop_slurmctld(self) -> None:
        from slurmkit.backend.run import run

        run(list(self.rollout.stop_slurmctld), timeout=120)

    def start_slurmctld(self) -> None:
        from slurmkit.backend.run import run

        run(list(self.rollout.start_slurmctld), timeout=120)

    def can_restart_slurmds(self) -> bool:
        return bool(self.rollout.restart_slurmd)

    def restart_slurmdbd(self) -> None:
        from slurmkit.backend.run import run

        run(list(self.rollout.restart_slurmdbd), timeout=120)

    def restart_slurmds(self, names: list[str]) -> None:
        from slurmkit.backend.run import run

        nodes = hostlist.fold(names)
        run([w.replace("{nodes}", nodes) for w in self.rollout.restart_slurmd], timeout=600)

    def ctld_log_tail(self, n: int = 5) -> tuple[str, list[str]]:
        """(slurmctld's log file, its last ``n`` lines) from SlurmctldLogFile of the slurm.conf in the config dir
        (apply runs on the controller); ("", []) where the file is not readable here."""
        from slurmkit.backend.run import log_tail
        from slurmkit.generate import confparse as cp

        try:
            conf = cp.parse_slurm_conf((self.conf_dir / "slurm.conf").read_text())
        except OSError:
            return "", []
        path = conf.value("slurmctldlogfile")
        return (path, log_tail(Path(path), n)) if path else ("", [])

    def overrides(self, cluster: Any) -> Overrides | None:
        return self._overrides

    def extra_files(self, cluster: Any) -> dict[str, str]:
        return {}

    def restart_slurmctld(self, backend: CLIBackend) -> None:
        from slurmkit.backend.run import run

        run(list(self.ctld_restart), timeout=120)

    def start_nodes(self, names: list[str], progress: Progress) -> None:
        """slurmkit cannot start slurmd on a site's hosts: say so, and what the command waits for."""
        conf = self.conf_dir / "slurm.conf"
        configless = conf.is_file() and "enable_configless" in conf.read_text(errors="replace")
        how = ("they fetch the new files from slurmctld when slurmd --conf-server starts" if configless
               else f"each needs the new files from {self.conf_dir} first")
        progress(f"start slurmd on {hostlist.fold(names)} now, e.g. `systemctl start slurmd` there ({how}); they "
                 f"stay drained ({JOIN_REASON!r}) until every one has registered")

    def stop_nodes(self, names: list[str], progress: Progress) -> None:
        progress(f"stop slurmd on {hostlist.fold(names)}: the cluster no longer has them")


@dataclass(frozen=True)
class Result:
    path: ChangePath
    summary: str
    backup: Path | None
    seconds: float
    previous: Mapping[str, str] = field(default_factory=dict, repr=False)  # the set it replaced, to put back
    written: tuple[str, ...] = ()  # the names it wrote


def _holder(lock: Path) -> str:
    try:
        text = lock.read_text(errors="replace").strip()
    except OSError:
        text = ""
    return text or "another slurmkit nodes command (it has not written its pid yet)"


@contextmanager
def locked(conf_dir: Path, command: str, wait: float, progress: Progress = lambda m: None) -> Iterator[None]:
    """One `nodes add|remove` at a time on this config dir: an exclusive flock(2) on ``LOCK_NAME`` beside the
    inventory, held until the block ends. A second command waits up to ``wait`` seconds, then refuses naming the
    holder (its pid and command line, which the holder writes into the file). The holder removes the file
    before it lets go, so none is left behind; a waiter that got the lock on a file removed meanwhile opens the
    new one again. A holder that dies leaves at most a stale file: the kernel has dropped its lock."""
    import fcntl

    lock = conf_dir / LOCK_NAME
    deadline = time.monotonic() + wait
    said = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = _holder(lock)
            if time.monotonic() >= deadline:
                raise ElasticError(f"{lock}: held by {who}; gave up after {wait:g}s (--lock-wait); "
                                   "nothing changed") from None
            if not said:
                progress(f"waiting up to {wait:g}s for {who} to finish ({lock})")
                said = True
            time.sleep(0.2)
            continue
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed that file as it let go: lock the one there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({command})\n".encode(), 0)
        yield
    finally:
        lock.unlink(missing_ok=True)  # still held: nobody can have locked the file at this path
        os.close(fd)  # closing drops the lock


def _render(site: Site, data: dict[str, Any], version: str | None) -> tuple[dict[str, str], str, set[str]]:
    from slurmkit.generate import generate
    from slurmkit.generate.versions import features_for
    from slurmkit.model.load import load_cluster_text

    text = yaml.safe_dump(data, sort_keys=False)
    cluster = load_cluster_text(text, source=str(site.conf_dir / INVENTORY_NAME))  # the one loader judges the edit
    ver = features_for(version or cluster.slurm_version).version
    files = generate(cluster, version=ver, conf_dir=str(site.conf_dir), overrides=site.overrides(cluster))
    if cluster.adopted:
        # an adopted site's own files take the change as line edits, as `conf apply` does (adopt/inplace.py)
        from slurmkit.adopt.inplace import edit_site
        from slurmkit.adopt.read import read_site
        from slurmkit.generate.rollout import read_dir

        current = read_dir(site.conf_dir)
        current.update(read_site(site.conf_dir)[0])
        if "slurm.conf" in current:
            files = edit_site(current, files, ver)
    files[INVENTORY_NAME] = text
    extra = site.extra_files(cluster)
    files.update(extra)
    return files, ver, {INVENTORY_NAME, *extra}


def load_inventory(conf_dir: Path) -> dict[str, Any]:
    from slurmkit.errors import UsageError
    from slurmkit.model import yamlio

    p = conf_dir / INVENTORY_NAME
    if not p.is_file():
        raise UsageError(f"{p}: no inventory beside slurm.conf (`slurmkit conf apply` writes it)")
    data = yamlio.load(p.read_text())
    if not isinstance(data, dict):
        raise UsageError(f"{p}: not a mapping")
    return data


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except SlurmCommandError:
            pass
        if time.monotonic() > deadline:
            raise ElasticError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def _bring(site: Site, backend: CLIBackend, path: ChangePath, timeout: float) -> None:
    """The cluster takes the files now in the config dir, by ``path``."""
    if path.kind == RESTART_CTLD:
        site.restart_slurmctld(backend)
        _wait(backend.ping, timeout, "slurmctld to answer after its restart")
    backend.reconfigure()


def apply_edit(site: Site, backend: CLIBackend, edit: Edit, path: ChangePath, *, version: str | None = None,
               real_parse: bool = True, timeout: float = 120.0, progress: Progress = lambda m: None) -> Result:
    """Write the edited inventory's files and bring the cluster onto them by ``path``; on failure write the
    previous files back and bring the cluster back onto those."""
    from slurmkit.backend.realparse import validate
    from slurmkit.errors import ConfigValidationError
    from slurmkit.generate import EXECUTABLE_FILES
    from slurmkit.generate.rollout import read_dir, recover, write_files

    t0 = time.monotonic()
    recover(site.conf_dir)
    files, ver, not_slurm = _render(site, edit.data, version)
    rep = validate({k: v for k, v in files.items() if k not in not_slurm}, ver, real=real_parse)
    if not rep.ok:
        raise ConfigValidationError([f"the new config is invalid ({'; '.join(rep.errors) or rep.real}); nothing written"])
    old = read_dir(site.conf_dir, list(files))
    backup = write_files(files, site.conf_dir, executable=EXECUTABLE_FILES)
    progress(f"wrote {len(files)} files to {site.conf_dir}" + (f" (previous ones in {backup})" if backup else ""))
    res = Result(path, edit.summary, backup, 0.0, old, tuple(files))
    try:
        _bring(site, backend, path, timeout)
    except (SlurmkitError, OSError, KeyboardInterrupt) as exc:
        first = _line(exc)
        progress(f"the cluster did not take the change ({first}); putting the previous files back")
        roll_back(site, backend, res, timeout, first)
    return Result(path, edit.summary, backup, time.monotonic() - t0, old, tuple(files))


def _line(exc: BaseException) -> str:
    if isinstance(exc, SlurmkitError):
        return exc.one_line()
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return " ".join(str(exc).split()) or type(exc).__name__


def roll_back(site: Site, backend: CLIBackend, res: Result, timeout: float, what: str) -> NoReturn:
    """Write back the set ``res`` replaced and bring the cluster onto it by the same path; always raises an
    ElasticError that starts with ``what`` (the failure) and says where files and cluster are now."""
    from slurmkit.generate import EXECUTABLE_FILES
    from slurmkit.generate.rollout import write_files

    write_files(res.previous, site.conf_dir, executable=EXECUTABLE_FILES,
                remove=[n for n in res.written if n not in res.previous])
    try:
        _bring(site, backend, res.path, timeout)
    except (SlurmkitError, OSError) as exc2:
        raise ElasticError(f"{what}; the previous files are back in {site.conf_dir} but the cluster did not "
                           f"take them either ({_line(exc2)}): check slurmctld") from None
    raise ElasticError(f"{what}; rolled back: the files, the inventory and the cluster are as they were")


def add_nodes(site: Site, backend: CLIBackend, edit: Edit, path: ChangePath, names: list[str], *,
              version: str | None = None, real_parse: bool = True, timeout: float = 120.0,
              progress: Progress = lambda m: None) -> Result:
    """``names`` join the cluster, all or nothing. The files and the cluster change (``apply_edit``); the new
    nodes are drained at once (``JOIN_REASON``: no job starts on them before all are in service, so a roll back
    can never take a node from under a job); their slurmd is started (the lab) or the site is told to start it;
    once every one has registered (responding, idle) they are resumed. If a slurmd does not start, a node has not
    registered within ``timeout``, or the command is interrupted, the slurmd it started are stopped and the
    previous files brought back like a refused change: the inventory, the files and the cluster as they were."""
    res = apply_edit(site, backend, edit, path, version=version, real_parse=real_parse, timeout=timeout,
                     progress=progress)
    t0 = time.monotonic() - res.seconds
    started = False
    try:
        backend.drain(hostlist.fold(names), JOIN_REASON)
        started = True
        site.start_nodes(names, progress)
        progress(f"waiting up to {timeout:g}s (--timeout) for {hostlist.fold(names)} to register; if they do not, "
                 "everything is rolled back")
        wait_registered(backend, names, timeout)
        backend.resume(hostlist.fold(names))
        # a resume can mark the node not responding until slurmctld's next ping answers (seen on 22.05 after the
        # controller restart): in service means responding, not drained, idle (or already running a job)
        wait_registered(backend, names, timeout, in_service=True)
    except (SlurmkitError, OSError, KeyboardInterrupt) as exc:
        first = _line(exc)
        try:
            busy = jobs_on(backend, names)
        except SlurmkitError:
            busy = {}  # drained since the change landed: nothing can have started there
        if busy:  # cannot happen while they are drained; never take a node from under a job
            raise ElasticError(f"{first}; not rolled back: job(s) {', '.join(sorted(busy))} run on "
                               f"{hostlist.fold(names)} (the files and the cluster have them)") from exc
        progress(f"{hostlist.fold(names)} did not come into service ({first}); rolling back")
        if started:
            site.stop_nodes(names, progress)
        roll_back(site, backend, res, timeout, first)
    return Result(res.path, res.summary, res.backup, time.monotonic() - t0, res.previous, res.written)


def remove_nodes(site: Site, backend: CLIBackend, edit: Edit, path: ChangePath, names: list[str],
                 drained: list[str], *, version: str | None = None, real_parse: bool = True, timeout: float = 120.0,
                 progress: Progress = lambda m: None) -> Result:
    """``names`` (drained, their jobs gone: ``drain_and_wait``) leave: the files and the cluster change
    (``apply_edit``), then their slurmd is stopped (the lab) or the site is told to. If stopping fails, the change
    is rolled back like a refused one (the nodes' slurmd still runs, so the cluster keeps them): files, inventory
    and cluster as they were. On any failure the nodes this command drained (``drained``) are resumed."""
    try:
        res = apply_edit(site, backend, edit, path, version=version, real_parse=real_parse, timeout=timeout,
                         progress=progress)
        try:
            site.stop_nodes(names, progress)
        except (SlurmkitError, OSError, KeyboardInterrupt) as exc:
            first = f"stopping slurmd on {hostlist.fold(names)} failed ({_line(exc)})"
            progress(f"{first}; putting the previous files back")
            roll_back(site, backend, res, timeout, first)
    except BaseException:
        if drained:  # the cluster did not change (or was brought back): give the nodes back
            try:
                backend.resume(hostlist.fold(drained))
            except SlurmkitError as exc:
                progress(f"could not resume {hostlist.fold(drained)} ({_line(exc)}): `scontrol update "
                         f"nodename={hostlist.fold(drained)} state=resume` once slurmctld answers")
        raise
    return res


def jobs_on(backend: CLIBackend, hosts: list[str]) -> dict[str, tuple[str, ...]]:
    """Unfinished jobs with a node among ``hosts``: job id -> its nodes."""
    want = set(hosts)
    return {j.job_id: tuple(j.nodes) for j in backend.jobs()
            if not j.finished and j.state != "PENDING" and want & set(j.nodes)}


def drain_and_wait(backend: CLIBackend, hosts: list[str], *, requeue: bool, timeout: float,
                   progress: Progress = lambda m: None, reason: str = DRAIN_REASON) -> list[str]:
    """Drain ``hosts`` (a foreign drain reason is kept, not overwritten), requeue their jobs when asked, and wait
    until none runs there. Returns the hosts this call drained (to resume them if the removal does not go on)."""
    ours = []
    for n in backend.nodes(hosts):
        if n.drained and n.reason and not n.reason.startswith("slurmkit:"):
            continue  # conservative drains: never overwrite a foreign reason
        ours.append(n.name)
    if ours:
        backend.drain(hostlist.fold(ours), reason)
        progress(f"drained {hostlist.fold(ours)} ({reason!r})")
    busy = jobs_on(backend, hosts)
    if busy and requeue:
        # scontrol(1) requeue: "Requeue a running, suspended or finished Slurm batch job into pending state"; the
        # drained nodes are not chosen again
        backend._run(["scontrol", "requeue", ",".join(sorted(busy))])
        progress(f"requeued job(s) {', '.join(sorted(busy))}")
    elif busy:
        progress(f"waiting for job(s) {', '.join(sorted(busy))} to end (--requeue requeues them instead)")
    try:
        _wait(lambda: not jobs_on(backend, hosts), timeout, f"the jobs on {hostlist.fold(hosts)} to end")
    except ElasticError as exc:
        if ours:
            backend.resume(hostlist.fold(ours))
        raise ElasticError(f"{exc}; nothing changed ({hostlist.fold(ours) or 'no node'} resumed)") from None
    return ours


def wait_registered(backend: CLIBackend, hosts: list[str], timeout: float, in_service: bool = False) -> Mapping[str, str]:
    """Wait until every host's slurmd has registered: responding and idle (drained or not: ``add_nodes`` keeps
    them drained until all are there; with ``in_service``, not drained); returns the last states. Times out
    naming the hosts still missing."""
    states: dict[str, str] = {}
    missing: list[str] = list(hosts)

    def ready() -> bool:
        nodes = backend.nodes(hosts)
        states.clear()
        states.update({n.name: "+".join([n.state, *sorted(n.flags)]) for n in nodes})
        ok = {n.name for n in nodes if n.responding and n.state in ("idle", "mixed", "allocated")
              and not (in_service and n.drained)}
        missing[:] = [h for h in hosts if h not in ok]
        return not missing

    try:
        _wait(ready, timeout, f"{hostlist.fold(hosts)} to " + ("be in service" if in_service else "register"))
    except ElasticError as exc:
        last = ", ".join(f"{h} {states.get(h, 'not reported')}" for h in missing)
        raise ElasticError(f"{exc}: no slurmd registered for {hostlist.fold(missing)} ({last})") from None
    return states


def stranded_jobs(jobs: Iterable[Any], hosts: list[str], dropped_partitions: Iterable[str],
                  requeue: bool) -> dict[str, str]:
    """Jobs that Slurm would fail when ``hosts`` leave: job id -> why (pure). Those still queued when the change
    lands (pending ones, and running ones on ``hosts`` when they are requeued; a running job that is waited for
    is over by then) fail if their required node list (sbatch -w, ReqNodeList) names a host that goes, or their
    partition goes with its last node group: slurmctld re-checks every job against the new config and sets
    such a job NODE_FAIL (src/slurmctld/read_config.c of slurm-22-05-8-1 and slurm-24-11-5-1,
    _sync_detail_bitmaps: "Invalid req_nodes (%s) for %pJ", and _sync_jobs_to_conf: a job whose partition is
    gone fails; a pending failed job becomes JOB_NODE_FAIL). An ExcNodeList naming a host that goes is harmless
    (22.05 reads it best-effort, 24.11: "Ignore any errors if the exc_nodes list contains invalid entries")."""
    gone = set(hosts)
    parts = set(dropped_partitions)
    out: dict[str, str] = {}
    for j in jobs:
        if j.finished:
            continue
        if j.state != "PENDING" and not (requeue and gone & set(j.nodes)):
            continue
        req = j.raw.get("ReqNodeList", "")
        pinned = sorted(gone & set(hostlist.expand(req))) if req and req != "(null)" else []
        queued = "pending" if j.state == "PENDING" else "requeued by --requeue"
        if pinned:
            out[j.job_id] = f"{queued}, requires {hostlist.fold(pinned)} (-w, ReqNodeList={req})"
        elif j.partition in parts:
            out[j.job_id] = f"{queued}, in partition {j.partition}, which goes with its last node group"
    return out


def cancel_jobs(backend: CLIBackend, job_ids: Iterable[str]) -> None:
    for jid in sorted(job_ids):
        backend.cancel(jid)
