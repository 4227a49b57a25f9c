"""Config generation: pure functions from the Cluster model to file texts.

Imports are lazy (PEP 562): ``from slurmkit.generate.confparse import ...`` (gpusub's tenant check reads
slurm.conf on every submit) must not pull in the generator, Jinja2, PyYAML and the inventory model (~40 % of a
submit's CPU time before this).
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXECUTABLE_FILES", "Overrides", "generate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from slurmkit.generate import slurmconf

        return getattr(slurmconf, name)
    raise AttributeError(f"module 'slurmkit.generate' has no attribute {name!r}")
