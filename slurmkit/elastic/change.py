"""Nodes joining and leaving a running cluster: the files, the inventory copy and the daemons change together.

The I/O next to ``edit`` and ``path``. The cluster is the one ``$SLURM_CONF`` points at (the edge says which); the
inventory is the copy ``slurmkit.yaml`` beside it, and it is written in the same all-or-nothing set as the Slurm
files (``rollout.write_files``). When the cluster does not take the change (slurmctld does not come back, the
reconfigure fails), the previous set is written back and the cluster brought back onto it: both as they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurmkit import hostlist
from slurmkit.backend.cli import CLIBackend
from slurmkit.elastic.edit import Edit
from slurmkit.elastic.path import RESTART_CTLD, ChangePath
from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.generate.slurmconf import Overrides

Progress = Callable[[str], None]
INVENTORY_NAME = "slurmkit.yaml"
DRAIN_REASON = "slurmkit: leaving the cluster (nodes remove)"


class ElasticError(SlurmkitError):
    """The cluster did not take a node change; the message says in what state files and cluster are."""


class Site:
    """How this cluster's daemons are driven. A real site: slurmctld through ``ctld_restart`` (an argv, default
    ``systemctl restart slurmctld``); slurmd on the nodes is the site's to start (its own image, its own unit)."""

    def __init__(self, conf_dir: Path, overrides: Overrides | None = None,
                 ctld_restart: tuple[str, ...] = ("systemctl", "restart", "slurmctld")) -> None:
        self.conf_dir = conf_dir
        self._overrides = overrides
        self.ctld_restart = ctld_restart

    def overrides(self, cluster: Any) -> Overrides | None:
        return self._overrides

    def extra_files(self, cluster: Any) -> dict[str, str]:
        return {}

    def restart_slurmctld(self, backend: CLIBackend) -> None:
        from slurmkit.backend.run import run

        run(list(self.ctld_restart), timeout=120)

    def start_nodes(self, names: list[str], progress: Progress) -> None:
        progress(f"start slurmd on {hostlist.fold(names)} (they register with the new config)")

    def stop_nodes(self, names: list[str], progress: Progress) -> None:
        progress(f"stop slurmd on {hostlist.fold(names)}: the cluster no longer has them")


@dataclass(frozen=True)
class Result:
    path: ChangePath
    summary: str
    backup: Path | None
    seconds: float


def _render(site: Site, data: dict[str, Any], version: str | None) -> tuple[dict[str, str], str, set[str]]:
    from slurmkit.generate import generate
    from slurmkit.generate.versions import features_for
    from slurmkit.model.load import load_cluster_text

    text = yaml.safe_dump(data, sort_keys=False)
    cluster = load_cluster_text(text, source=str(site.conf_dir / INVENTORY_NAME))  # the one loader judges the edit
    ver = features_for(version or cluster.slurm_version).version
    files = generate(cluster, version=ver, conf_dir=str(site.conf_dir), overrides=site.overrides(cluster))
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
    try:
        _bring(site, backend, path, timeout)
    except (SlurmkitError, OSError) as exc:
        first = exc.one_line() if isinstance(exc, SlurmkitError) else str(exc)
        progress(f"the cluster did not take the change ({first}); putting the previous files back")
        write_files(old, site.conf_dir, executable=EXECUTABLE_FILES, remove=[n for n in files if n not in old])
        try:
            _bring(site, backend, path, timeout)
        except (SlurmkitError, OSError) as exc2:
            again = exc2.one_line() if isinstance(exc2, SlurmkitError) else str(exc2)
            raise ElasticError(f"{first}; the previous files are back in {site.conf_dir} but the cluster did not "
                               f"take them either ({again}): check slurmctld") from exc
        raise ElasticError(f"{first}; rolled back: the files, the inventory and the cluster are as they were") from exc
    return Result(path, edit.summary, backup, time.monotonic() - t0)


def jobs_on(backend: CLIBackend, hosts: list[str]) -> dict[str, tuple[str, ...]]:
    """Unfinished jobs with a node among ``hosts``: job id -> its nodes."""
    want = set(hosts)
    return {j.job_id: tuple(j.nodes) for j in backend.jobs()
            if not j.finished and j.state != "PENDING" and want & set(j.nodes)}


def drain_and_wait(backend: CLIBackend, hosts: list[str], *, requeue: bool, timeout: float,
                   progress: Progress = lambda m: None) -> list[str]:
    """Drain ``hosts`` (a foreign drain reason is kept, not overwritten), requeue their jobs when asked, and wait
    until none runs there. Returns the hosts this call drained (to resume them if the removal does not go on)."""
    ours = []
    for n in backend.nodes(hosts):
        if n.drained and n.reason and not n.reason.startswith("slurmkit:"):
            continue  # conservative drains: never overwrite a foreign reason
        ours.append(n.name)
    if ours:
        backend.drain(hostlist.fold(ours), DRAIN_REASON)
        progress(f"drained {hostlist.fold(ours)} ({DRAIN_REASON!r})")
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


def wait_idle(backend: CLIBackend, hosts: list[str], timeout: float) -> Mapping[str, str]:
    """Wait until every host is idle (or mixed/allocated: a job may take it at once); returns the last states."""
    states: dict[str, str] = {}

    def ready() -> bool:
        states.clear()
        nodes = backend.nodes(hosts)
        states.update({n.name: "+".join([n.state, *sorted(n.flags)]) for n in nodes})
        ok = {n.name for n in nodes if n.responding and not n.drained and n.state in ("idle", "mixed", "allocated")}
        return all(h in ok for h in hosts)

    try:
        _wait(ready, timeout, f"{hostlist.fold(hosts)} to be idle")
    except ElasticError as exc:
        raise ElasticError(f"{exc} (last states: {states or 'none reported'})") from None
    return states
