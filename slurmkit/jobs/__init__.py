"""gpusub's library: JobSpec -> ClusterFacts -> RenderedJob (pure) -> preflight -> submit / follow.

The Python API for researchers is ``from slurmkit import launch; launch.submit(...)`` / ``launch.map_array(...)``
(slurmkit/launch.py over slurmkit/jobs/api.py, docs/api.md): the same code path as the ``gpusub`` CLI.

Imports are lazy (PEP 562) so that ``import slurmkit.jobs`` pulls in neither jinja2 nor the backend.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "JobSpec": "slurmkit.jobs.spec",
    "ClusterFacts": "slurmkit.jobs.spec",
    "render": "slurmkit.jobs.render",
    "RenderedJob": "slurmkit.jobs.render",
    "prepare": "slurmkit.jobs.submit",
    "submit_job": "slurmkit.jobs.submit",
    "submit_prepared": "slurmkit.jobs.submit",
    "SubmitResult": "slurmkit.jobs.submit",
    "PreflightError": "slurmkit.jobs.submit",
    "follow": "slurmkit.jobs.monitor",
    "statuses": "slurmkit.jobs.monitor",
    "cancel": "slurmkit.jobs.monitor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'slurmkit.jobs' has no attribute {name!r}")
