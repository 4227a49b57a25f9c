"""`slurmkit conf apply --execute`: carry out exactly the rollout plan that apply printed, one step at a time.

Each step (rollout.Step) is done, then checked, before the next: a drain waits until no job runs on the nodes, a
stopped slurmctld must stop answering, a started one must answer and keep answering, restarted slurmds must
register, a reconfigure must leave slurmctld alive. A step that fails stops the run there: the cluster is left as
the last good step made it, and one line says which steps remain. A controller that stops answering at any point is
named with the last lines of its log (on 22.05 a reconfigure that changes the node count is fatal to slurmctld:
``fatal: MaxNodeCount has changed (4->3) during reconfig, slurmctld must be restarted``,
src/slurmctld/read_config.c of slurm-22-05-8-1; the command that asked for it only sees "Zero Bytes were
transmitted or received").

The run is journalled in ``DIR/.slurmkit-rollout/journal.json`` (written atomically after every step): the steps,
how many are done, the nodes it drained, the files the cluster ran before (``base``) and a hash of the files it
brings. A run killed at any point (SIGKILL, power loss) is finished by the next `apply --execute`: with the same
inventory it carries on at the first step not done (every step can be done twice: a drain of drained nodes, a
stop of a stopped controller, a write of written files, a start of a running one change nothing); with another
inventory (the previous one, to roll back) it plans again from the files the cluster ran before the interrupted
run, from step 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from slurmkit import hostlist, safefs
from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.generate import rollout as ro

Progress = Callable[[str], None]
JOURNAL_DIR = ".slurmkit-rollout"
CONF_REASON = "slurmkit: config change (conf apply)"


class RolloutError(SlurmkitError):
    """A step of the rollout failed or the controller died; says what is done and what remains."""

    exit_code = 4


def files_hash(files: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(sorted(files.items()))).encode()).hexdigest()


def _jpath(conf_dir: Path) -> Path:
    return conf_dir / JOURNAL_DIR / "journal.json"


def load_journal(conf_dir: str | Path) -> dict[str, Any] | None:
    """The pending rollout of ``conf_dir`` (None when there is none)."""
    p = _jpath(Path(conf_dir))
    try:
        return dict(json.loads(p.read_text()))
    except (OSError, ValueError):
        return None


def save_journal(conf_dir: Path, journal: Mapping[str, Any]) -> None:
    # the journal's base holds every file the rollout started from, the old slurmdbd.conf (StoragePass) with them:
    # a 0700 dir and a file created 0600 by its open (issue 32 item 3; before, 0644 in a 0755 dir for the whole run)
    d = conf_dir / JOURNAL_DIR
    safefs.private_dir(d)
    tmp = d / "journal.json.tmp"
    tmp.unlink(missing_ok=True)  # a run killed between its write and the rename
    safefs.write_new(tmp, json.dumps(journal), 0o600)
    os.replace(tmp, d / "journal.json")
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_journal(conf_dir: Path) -> None:
    _jpath(conf_dir).unlink(missing_ok=True)
    (conf_dir / JOURNAL_DIR / "journal.json.tmp").unlink(missing_ok=True)
    try:
        (conf_dir / JOURNAL_DIR).rmdir()
    except OSError:
        pass


def steps_of(journal: Mapping[str, Any]) -> list[ro.Step]:
    return [ro.Step(s["kind"], s["text"], s.get("nodes", "")) for s in journal["steps"]]


def remaining(journal: Mapping[str, Any]) -> str:
    """'steps 4-6 remain (start slurmctld; verify; resume)' for a pending journal."""
    steps = steps_of(journal)
    done = int(journal["done"])
    if done >= len(steps):
        return "no step remains"
    rng = f"step {done + 1}" if done + 1 == len(steps) else f"steps {done + 1}-{len(steps)}"
    return f"{rng} of {len(steps)} remain ({'; '.join(ro.step_head(s.text) for s in steps[done:])})"


def new_journal(steps: list[ro.Step], files: Mapping[str, str], base: Mapping[str, str], version: str,
                done: int = 0, drained: Iterable[str] = ()) -> dict[str, Any]:
    return {"steps": [{"kind": s.kind, "text": s.text, "nodes": s.nodes} for s in steps], "done": done,
            "files": files_hash(files), "base": dict(base), "version": version, "drained": sorted(set(drained)),
            "responding": None}


class Executor:
    """Runs a journal's steps against a site (Site / LabSite: how daemons are stopped, started, restarted) and a
    backend (scontrol/sinfo/squeue). ``_step`` is called before each step: fault-injection tests replace it."""

    def __init__(self, site: Any, backend: Any, conf_dir: Path, files: Mapping[str, str], *,
                 executable: Iterable[str] = (), remove: Iterable[str] = (), timeout: float = 300.0,
                 keep_backups: int | None = None, progress: Progress = lambda m: None) -> None:
        self.site, self.backend, self.conf_dir = site, backend, conf_dir
        self.files, self.executable, self.remove = dict(files), tuple(executable), tuple(remove)
        self.timeout, self.keep_backups, self.progress = timeout, keep_backups, progress
        self.new_hosts = _hosts_of(files)

    def _step(self, i: int, step: ro.Step) -> None:
        """Called before step ``i`` (1-based); fault-injection tests replace it."""

    # --- checks --------------------------------------------------------------------------------------------
    def _ping(self) -> bool:
        try:
            return bool(self.backend.ping())
        except (SlurmkitError, OSError):
            return False

    def _dead(self, when: str) -> RolloutError:
        path, tail = self.site.ctld_log_tail()
        said = f"; its log ({path}) ends: {' | '.join(tail)}" if tail else (f"; nothing readable in {path}" if path else "")
        return RolloutError(f"slurmctld is not answering {when}{said}")

    def _wait_ping(self, want: bool, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._ping() == want:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def _alive_after(self, when: str, settle: float = 2.0) -> None:
        """slurmctld answers within the timeout and still answers ``settle`` seconds later (a fatal on reading
        the new config comes a moment after the RPC that asked for it was answered)."""
        if not self._wait_ping(True, self.timeout):
            raise self._dead(when)
        time.sleep(settle)
        if not self._wait_ping(True, 10.0):
            raise self._dead(when)

    def _expected_hosts(self, journal: dict[str, Any]) -> list[str]:
        """Nodes that must be registered after the change: those that responded before it (and the new config
        still has), and the ones it adds."""
        before = journal.get("responding")
        if before is None:
            return list(self.new_hosts)
        base_hosts = set(_hosts_of(journal["base"]))
        return [h for h in self.new_hosts if h in set(before) or h not in base_hosts]

    def _registered(self, hosts: list[str]) -> None:
        from slurmkit.elastic.change import ElasticError, wait_registered

        if not hosts:
            return
        try:
            wait_registered(self.backend, hosts, self.timeout)
        except ElasticError as exc:
            if not self._ping():
                raise self._dead("while the nodes register") from None
            raise RolloutError(exc.one_line()) from None

    # --- the steps -----------------------------------------------------------------------------------------
    def _targets(self, nodes: str) -> list[str]:
        return list(self.new_hosts) if nodes == "ALL" else hostlist.expand(nodes)

    def _do(self, step: ro.Step, journal: dict[str, Any], ctld_stopped: bool) -> None:
        from slurmkit.elastic.change import ElasticError, drain_and_wait

        k = step.kind
        if k == ro.DRAIN_STEP:
            hosts = [h for h in self._targets(step.nodes) if h in set(_hosts_of(journal["base"]))]
            try:
                ours = drain_and_wait(self.backend, hosts, requeue=False, timeout=self.timeout,
                                      progress=self.progress, reason=CONF_REASON)
            except ElasticError as exc:
                raise RolloutError(exc.one_line()) from None
            journal["drained"] = sorted(set(journal["drained"]) | set(ours))
        elif k == ro.STOP_CTLD:
            self.site.stop_slurmctld()
            if not self._wait_ping(False, self.timeout):
                raise RolloutError(f"slurmctld still answers {self.timeout:g}s after it was stopped")
        elif k == ro.WRITE:
            from slurmkit.generate.rollout import read_dir, write_files

            backup = write_files(self.files, self.conf_dir, executable=self.executable, remove=self.remove,
                                 keep=self.keep_backups)
            now = read_dir(self.conf_dir, list(self.files))
            bad = [n for n in self.files if now.get(n) != self.files[n]]
            if bad:
                raise RolloutError(f"{', '.join(bad)} in {self.conf_dir} differ from what was written")
            self.progress(f"wrote {len(self.files)} files to {self.conf_dir}" + (f" (previous ones in {backup})" if backup else ""))
        elif k == ro.RESTART_SLURMD:
            hosts = self._targets(step.nodes)
            self.site.restart_slurmds(hosts)
            if not ctld_stopped:
                self._registered([h for h in hosts if h in set(self._expected_hosts(journal))])
        elif k == ro.RESTART_DBD:
            try:
                self.site.restart_slurmdbd()
            except (SlurmkitError, OSError) as exc:
                raise RolloutError(f"restart slurmdbd: {_line(exc)}") from None
        elif k == ro.START_CTLD:
            self._start()
        elif k == ro.RESTART_CTLD:
            self.site.stop_slurmctld()
            if not self._wait_ping(False, self.timeout):
                raise RolloutError(f"slurmctld still answers {self.timeout:g}s after it was stopped")
            self._start()
        elif k == ro.RECONF:
            try:
                self.backend.reconfigure()
            except SlurmCommandError as exc:
                if not self._wait_ping(True, 5.0):
                    raise self._dead(f"after `scontrol reconfigure` ({exc.one_line()})") from None
                raise RolloutError(f"scontrol reconfigure: {exc.one_line()}") from None
            self._alive_after("after `scontrol reconfigure`")
        elif k == ro.VERIFY:
            self._alive_after("at the verify step", settle=0.0)
            self._registered(self._expected_hosts(journal))
        elif k == ro.RESUME:
            from slurmkit.backend.records import strip_reason_stamp

            # 22.05's text `scontrol show node` ends the reason with " [user@time]" (the JSON of 23.02+ does not):
            # compared as it was, a 22.05 drain was never resumed
            mine = [n.name for n in self.backend.nodes(journal["drained"] or [])
                    if n.drained and strip_reason_stamp(n.reason) == CONF_REASON and n.name in set(self.new_hosts)
                    ] if journal["drained"] else []
            if mine:
                self.backend.resume(hostlist.fold(mine))
                self.progress(f"resumed {hostlist.fold(mine)}")
        else:
            raise RolloutError(f"unknown step kind {k!r}")

    def _start(self) -> None:
        try:
            self.site.start_slurmctld()
        except (SlurmkitError, OSError) as exc:
            if not self._ping():
                raise self._dead(f"after it was started ({_line(exc)})") from None
            raise
        self._alive_after("after it was started")

    def run(self, journal: dict[str, Any]) -> None:
        """Carry out the journal's steps from the first not done; the journal is saved after each."""
        steps = steps_of(journal)
        if journal.get("responding") is None:
            try:
                journal["responding"] = [n.name for n in self.backend.nodes() if n.responding
                                         and n.state not in ("down", "unknown", "future")]
            except (SlurmkitError, OSError):
                journal["responding"] = None  # controller not answering (an interrupted run stopped it)
        save_journal(self.conf_dir, journal)
        # a run killed between stop-ctld and start-ctld left the controller stopped on purpose
        ctld_stopped = any(s.kind == ro.STOP_CTLD for s in steps[:journal["done"]]) and not any(
            s.kind == ro.START_CTLD for s in steps[:journal["done"]])
        for i in range(int(journal["done"]), len(steps)):
            step = steps[i]
            n = i + 1
            self._step(n, step)
            where = f"step {n} of {len(steps)} ({ro.step_head(step.text)})"
            if not ctld_stopped and step.kind not in (ro.START_CTLD, ro.RESTART_CTLD) and not self._ping():
                exc: SlurmkitError = self._dead(f"before {where}")
                raise RolloutError(f"{exc.one_line()}; stopped before {where}; {remaining(journal)}")
            self.progress(f"{n}/{len(steps)}: {step.text}")
            try:
                self._do(step, journal, ctld_stopped)
            except (SlurmkitError, OSError) as exc:
                save_journal(self.conf_dir, journal)
                raise RolloutError(f"{where} failed: {_line(exc)}; {remaining(journal)}; rerun with --execute to "
                                   "carry on from there (or apply the previous inventory to go back)") from None
            if step.kind == ro.STOP_CTLD:
                ctld_stopped = True
            elif step.kind in (ro.START_CTLD, ro.RESTART_CTLD):
                ctld_stopped = False
            journal["done"] = n
            save_journal(self.conf_dir, journal)
        clear_journal(self.conf_dir)


def _line(exc: BaseException) -> str:
    if isinstance(exc, SlurmkitError):
        return exc.one_line()
    return " ".join(str(exc).split()) or type(exc).__name__


def _hosts_of(files: Mapping[str, str]) -> list[str]:
    """The nodes of a config set (a journal's base), its Include files followed: a hand-split site keeps its NodeName
    lines in nodes.conf, and slurm.conf alone named none (the drain step drained nothing)."""
    from slurmkit.generate import confparse as cp

    out: list[str] = []
    for rec in cp.parse_slurm_conf(files.get("slurm.conf", ""), "slurm.conf", files).nodes:
        if rec.head.upper() != "DEFAULT":
            out.extend(hostlist.expand(rec.head))
    return out
