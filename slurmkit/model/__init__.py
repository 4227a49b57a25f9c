"""The cluster model (frozen dataclasses) and its only loader.

Names are resolved lazily (PEP 562): `import slurmkit.model.cluster` on a hot path (gpusub, the prolog) must not
pull in the YAML loader.
"""

from __future__ import annotations

import importlib
from typing import Any

_LOADERS = ("load_cluster", "load_cluster_dict", "load_cluster_text")
_MODEL = (
    "CPU", "NIC", "SUPPORTED_SLURM_VERSIONS", "Accounting", "Block", "Cluster", "Controller", "GPUs", "Hooks",
    "NodeGroup", "Partition", "Policy", "Reserve", "Runtime", "Site", "SubmitPolicy", "Switch", "Topology",
)
__all__ = [*_MODEL, *_LOADERS]


def __getattr__(name: str) -> Any:
    if name in _LOADERS:
        return getattr(importlib.import_module("slurmkit.model.load"), name)
    if name in _MODEL:
        return getattr(importlib.import_module("slurmkit.model.cluster"), name)
    raise AttributeError(f"module 'slurmkit.model' has no attribute {name!r}")
