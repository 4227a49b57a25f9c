"""The cluster model (frozen dataclasses) and its only loader."""

from slurmkit.model.cluster import (  # noqa: F401
    CPU,
    NIC,
    SUPPORTED_SLURM_VERSIONS,
    Accounting,
    Block,
    Cluster,
    Controller,
    GPUs,
    Hooks,
    NodeGroup,
    Partition,
    Policy,
    Reserve,
    Site,
    Switch,
    Topology,
)
from slurmkit.model.load import load_cluster, load_cluster_dict, load_cluster_text  # noqa: F401
