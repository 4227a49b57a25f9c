"""What a lab is: ``LabSpec`` (nodes, GPUs, topology, the modes ``lab up`` takes) and the ports, node names and GPU
types that follow from it, including the room for spare nodes that `slurmkit nodes add` brings in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurmkit.errors import LabError

DEFAULT_DIR = "/tmp/slurmkit-lab"
DEFAULT_PORT_BASE = 16817


@dataclass
class LabSpec:
    dir: str = DEFAULT_DIR
    nodes: int = 8
    gpus_per_node: int = 8
    gpu_type: str = "h100"
    nodes_per_leaf: int = 4
    accounting: bool = False
    port_base: int = DEFAULT_PORT_BASE
    hooks: bool = False  # wire slurmkit's prolog/epilog/health hooks (fake NVML per node)
    healthcheck_interval: int = 0
    # with hooks: a recorded NVML state (JSON, see slurmkit/health/fakenvml.py) copied to DIR/fake-nvml/<node>.json
    # for every node before slurmd starts, trimmed to gpus_per_node devices; edit one node's copy to inject a fault
    fake_nvml_template: str | None = None
    # the Slurm release to run ("24.11"); None: the host's own. Another release runs from a cached root filesystem
    # (slurmkit/lab/image.py) seen through a view of the host (slurmkit/lab/view.py)
    slurm: str | None = None
    topology: str = "tree"  # or "block": groups of nodes_per_leaf nodes as topology/block blocks (Slurm 23.11+)
    submit_policy: bool = False  # JobSubmitPlugins=lua with the job_submit.lua generated from a submit_policy
    # proctrack/cgroup + task/cgroup (ConstrainCores, ConstrainRAMSpace, ConstrainDevices) on cgroup v1, each node
    # in its own cgroup namespace under the lab's group (slurmkit/lab/cgroups.py); nodes get the host's core count
    cgroups: bool = False
    # room for this many more nodes (node<N+1>..node<N+spare>) that are not in the cluster yet: their ports are
    # checked free, /etc/hosts, spool dirs and fake NVML states are ready, so `slurmkit nodes add` can bring them in
    spare: int = 0
    # the last `power` nodes are a node group powered on demand (slurmctld's power saving, slurmkit's `lab`
    # provider: their slurmd is stopped when suspended and started when a job needs them)
    power: int = 0
    suspend_time: int = 10
    # slurmd fetch their config from slurmctld (SlurmctldParameters=enable_configless, slurmd --conf-server)
    configless: bool = False
    # with accounting: the inventory's tenants section (None: lab_tenants(), two teams over the lab's GPUs), applied
    # with `slurmkit accounts apply` once the lab is up
    tenants: dict | None = None
    # a site inventory (examples/gb200-nvl72.yaml) the lab is shaped after, scaled to `nodes` and `nodes_per_leaf`
    # (lab/inventory.py lab_from_preset); its GPU count, GPU type and topology kind replace the three fields above
    preset: str | None = None
    # Debian's prometheus + one prometheus-node-exporter per node (on its textfile dir) + `slurmkit exporter`, with
    # the rules `slurmkit monitor generate` makes (slurmkit/lab/monitoring.py); on monitoring_port (0: base+140),
    # the exporter on +1, nodeI's node_exporter on +1+I
    monitoring: bool = False
    monitoring_port: int = 0

    @property
    def monitoring_port_resolved(self) -> int:
        return self.monitoring_port or self.port_base + 140

    def apply_preset(self) -> None:
        """Take the preset's GPU count, GPU type and topology kind (``lab up`` does, before its checks)."""
        if self.preset:
            from slurmkit.lab.inventory import preset_shape
            from slurmkit.model.load import load_cluster

            if self.cgroups or self.power:
                # both reshape the lab's nodes (the host's core count; a second, power-managed group)
                raise LabError("--preset takes the preset's node shape; not together with --cgroups or --power")
            load_cluster(self.preset)  # a bad preset is refused with its key path before anything starts
            try:
                _g, self.gpus_per_node, self.gpu_type, self.topology = preset_shape(read_yaml(self.preset), self.preset)
            except ValueError as exc:
                raise LabError(str(exc)) from exc

    @property
    def ctld_port(self) -> int:
        return self.port_base

    def slurmd_port(self, i: int) -> int:
        return self.port_base + i  # node1 -> base+1

    @property
    def dbd_port(self) -> int:
        return self.port_base + 1000

    @property
    def db_port(self) -> int:
        return self.port_base + 1001

    def ports(self) -> dict[int, str]:
        """Every TCP port the lab listens on -> what listens there (for messages)."""
        out = {self.ctld_port: "slurmctld, --port-base"}
        for i in range(1, self.nodes + self.spare + 1):
            out[self.slurmd_port(i)] = f"slurmd of node{i}, --port-base+{i}"
        if self.accounting:
            out[self.dbd_port] = "slurmdbd, --port-base+1000 with --accounting"
            out[self.db_port] = "MariaDB, --port-base+1001 with --accounting"
        return out

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def all_node_names(self) -> list[str]:
        """The nodes the lab has room for: those it starts with and the spare ones."""
        return [f"node{i}" for i in range(1, self.nodes + self.spare + 1)]

    @property
    def gpu_types(self) -> list[tuple[str, int]]:
        """(GPU type, nodes) in node order: ``gpu_type`` is one type or ``TYPE:NODES,...`` (lab/inventory.py)."""
        from slurmkit.lab.inventory import gpu_types

        try:
            return gpu_types(self.gpu_type, self.nodes)
        except ValueError as exc:
            raise LabError(str(exc)) from exc

    def node_gpu_type(self, name: str) -> str:
        """The GPU type of ``nodeI``; a spare node has the last type."""
        i = self.node_index(name)
        for t, n in self.gpu_types:
            if i <= n:
                return t
            i -= n
        return self.gpu_types[-1][0]

    def node_index(self, name: str) -> int:
        """nodeI -> I, for a node the lab has room for; LabError otherwise."""
        if name not in self.all_node_names:
            raise LabError(f"{name} is not a node this lab has room for ({self.all_node_names[0]}.."
                           f"{self.all_node_names[-1]}; `slurmkit lab up --spare N` makes room)")
        return int(name[4:])


def read_yaml(path: str) -> dict:
    from slurmkit.model.yamlio import load as yload

    return yload(Path(path).read_text())  # type: ignore[no-any-return]
