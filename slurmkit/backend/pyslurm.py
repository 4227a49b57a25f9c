"""Optional pyslurm backend for the job verbs (submit, job state, signal/cancel, requeue).

Written against pyslurm 25.11's object API (pyslurm/core/job/job.pyx, submission.pyx): ``pyslurm.Jobs.load()``
(a multi-cluster map; ``.values()`` yields ``Job``), ``pyslurm.Job.load(id)``, ``Job.state``,
``Job.state_reason``, ``Job.allocated_nodes``, ``Job.requeue_count``, ``Job.exit_code``/``exit_code_signal``,
``Job.standard_output``, ``Job.send_signal(sig, steps="batch")``, ``Job.cancel()``, ``Job.requeue()``,
``pyslurm.JobSubmitDescription(script=..., working_directory=...)`` with ``load_sbatch_options()`` and
``submit() -> int``, errors as ``pyslurm.RPCError``.

Used only when asked for (``SLURMKIT_BACKEND=pyslurm``: importing pyslurm is not free, and a submit must not
pay for it by default) AND ``import pyslurm`` works AND its major.minor equals the running Slurm's (pyslurm
builds against one Slurm release; PyPI's 25.11 refuses to build on this 22.05). Everything else (nodes,
partitions, topology, ``--test-only``, drain/resume) stays on the CLI backend, which this class wraps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.cli import CLIBackend, JobNotFound
from slurmkit.backend.parse import JobInfo, NodeInfo, SwitchRecord
from slurmkit.errors import SlurmCommandError, SlurmkitError


class PyslurmUnavailable(SlurmkitError):
    pass


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1])


def load_pyslurm(slurm_version: str) -> Any:
    """The pyslurm module if it imports and matches ``slurm_version`` (major.minor); else PyslurmUnavailable."""
    try:
        import pyslurm  # type: ignore[import-not-found]
    except ImportError as exc:
        raise PyslurmUnavailable(f"pyslurm is not importable: {exc}") from exc
    have = str(getattr(pyslurm, "__version__", "") or "")
    try:
        ok = _major_minor(have) == _major_minor(slurm_version)
    except (ValueError, IndexError):
        ok = False
    if not ok:
        raise PyslurmUnavailable(f"pyslurm {have or '?'} does not match Slurm {slurm_version}")
    return pyslurm


class PyslurmBackend:
    """Job verbs through libslurm (pyslurm); the rest through ``cli``."""

    def __init__(self, module: Any, cli: CLIBackend):
        self.pyslurm = module
        self.cli = cli
        self.env = cli.env

    # --- delegated to the CLI backend ----------------------------------------------------------------------
    def version(self) -> str:
        return self.cli.version()

    def nodes(self, names: Sequence[str] | None = None) -> list[NodeInfo]:
        return self.cli.nodes(names)

    def node(self, name: str) -> NodeInfo:
        return self.cli.node(name)

    def topology(self) -> list[SwitchRecord]:
        return self.cli.topology()

    def partitions(self) -> list[dict[str, str]]:
        return self.cli.partitions()

    def test_only(self, request: SubmitRequest) -> str | None:
        return self.cli.test_only(request)

    def pending(self):  # type: ignore[no-untyped-def]
        return self.cli.pending()

    def reservations(self):  # type: ignore[no-untyped-def]
        return self.cli.reservations()

    def update_job(self, job_id: str, **fields: str) -> None:
        self.cli.update_job(job_id, **fields)

    def drain(self, nodes: str, reason: str) -> None:
        self.cli.drain(nodes, reason)

    def resume(self, nodes: str) -> None:
        self.cli.resume(nodes)

    def reconfigure(self) -> None:
        self.cli.reconfigure()

    # --- job verbs through pyslurm ------------------------------------------------------------------------
    def _rpc(self, what: str, fn, *args: Any, **kw: Any) -> Any:  # type: ignore[no-untyped-def]
        try:
            return fn(*args, **kw)
        except self.pyslurm.RPCError as exc:
            raise SlurmCommandError([f"pyslurm {what}"], 1, str(exc)) from exc

    def submit(self, request: SubmitRequest) -> str:
        desc = self.pyslurm.JobSubmitDescription(
            script=request.script,
            working_directory=request.workdir or os.getcwd(),
        )
        # the #SBATCH lines are the job's options, exactly as sbatch would read them
        self._rpc("load_sbatch_options", desc.load_sbatch_options)
        if request.argv:
            raise SlurmkitError("pyslurm backend: extra sbatch argv is not supported; put options in #SBATCH lines")
        return str(self._rpc("submit", desc.submit))

    def jobs(self, job_ids: Sequence[str] | None = None) -> list[JobInfo]:
        loaded = self._rpc("Jobs.load", self.pyslurm.Jobs.load)
        want = {str(j) for j in job_ids} if job_ids is not None else None
        out = [job_info(j) for j in loaded.values()]
        return [j for j in out if want is None or j.job_id in want]

    def job(self, job_id: str) -> JobInfo:
        try:
            return job_info(self.pyslurm.Job.load(int(job_id)))
        except self.pyslurm.RPCError as exc:
            raise JobNotFound(f"job {job_id} not found: {exc}") from exc

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        job = self.pyslurm.Job(int(job_id))
        if signal:
            sig = signal if signal.upper().startswith("SIG") else f"SIG{signal.upper()}"
            self._rpc("send_signal", job.send_signal, sig, steps="batch" if batch else "children")
        else:
            self._rpc("cancel", job.cancel)

    def requeue(self, job_id: str) -> None:
        self._rpc("requeue", self.pyslurm.Job(int(job_id)).requeue)


def job_info(job: Any) -> JobInfo:
    """A pyslurm ``Job`` -> slurmkit's JobInfo (the same fields the scontrol parser fills)."""
    from slurmkit import hostlist

    nodes = job.allocated_nodes or ""
    ec = job.exit_code
    sig = job.exit_code_signal
    return JobInfo(
        job_id=str(job.id),
        state=str(job.state or "UNKNOWN").upper(),
        reason=job.state_reason or "",
        nodes=tuple(hostlist.expand(nodes)) if nodes else (),
        name=job.name or "",
        exit_code=f"{ec if ec is not None else 0}:{sig if sig is not None else 0}",
        restarts=int(job.requeue_count or 0),
        stdout=job.standard_output or "",
        stderr=job.standard_error or "",
        batch_host=job.batch_host or "",
        partition=job.partition or "",
    )


def select_backend(environ: Mapping[str, str] | None = None, cli: CLIBackend | None = None) -> CLIBackend | PyslurmBackend:
    """CLI by default; pyslurm when ``SLURMKIT_BACKEND=pyslurm`` and it imports and matches the running Slurm.

    Asking for pyslurm where it cannot be used is an error (not a silent fallback), so the choice is visible.
    """
    env = os.environ if environ is None else environ
    base = cli or CLIBackend()
    choice = env.get("SLURMKIT_BACKEND", "cli").lower()
    if choice == "cli":
        return base
    if choice != "pyslurm":
        raise SlurmkitError(f"SLURMKIT_BACKEND={choice!r}: expected 'cli' or 'pyslurm'")
    return PyslurmBackend(load_pyslurm(base.version()), base)
