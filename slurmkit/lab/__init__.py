"""The local multi-node Slurm lab (`slurmkit lab up|status|env|down`)."""

from slurmkit.lab.lab import DEFAULT_DIR, DEFAULT_PORT_BASE, Lab, LabSpec  # noqa: F401
