"""Adopting a running cluster: read its config as Slurm does (``read``), infer an inventory (``infer``)."""
