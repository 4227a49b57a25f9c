"""The local multi-node Slurm lab (`slurmkit lab up|status|env|down`)."""

from slurmkit.lab.lab import Lab  # noqa: F401
from slurmkit.lab.spec import DEFAULT_DIR, DEFAULT_PORT_BASE, LabSpec  # noqa: F401
