"""slurmkit: Slurm config generation, topology-aware job submission and GPU node health hooks."""

__version__ = "0.1.0"
