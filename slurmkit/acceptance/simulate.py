"""A bandwidth model that stands in for the cluster: the bench's large clusters and the plan's unit tests.

busbw of a group = the slowest member's NIC (a ring all-reduce runs at its slowest link) x the group's leaf-uplink
factor when it spans leaves, x a deterministic per-measurement jitter. Wall time of a measurement = scheduling +
bootstrap (grows with the rank count) + the sweep's bytes through that bandwidth; jobs on disjoint nodes overlap.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from slurmkit.acceptance.plan import Task
from slurmkit.acceptance.runner import Executor, Measurement, Progress, Store


@dataclass
class Model:
    node_bw: dict[str, float]  # GB/s a healthy pair reaches through each node
    leaf_of: dict[str, str] = field(default_factory=dict)
    uplink: float = 1.0  # cross-leaf factor (1: full bisection bandwidth)
    jitter: float = 0.03  # +- relative noise
    sched_s: float = 2.0  # queueing + launch of one job
    init_s_per_node: float = 0.01  # NCCL bootstrap grows with the nodes
    sweep_bytes: float = 4 * (16 + 64 + 256 + 1024) * 2**20 * 20  # sizes x iterations of the default GPU sweep

    def busbw(self, nodes: tuple[str, ...], key: str) -> float:
        bw = min(self.node_bw[n] for n in nodes)
        if len({self.leaf_of.get(n, "") for n in nodes}) > 1:
            bw *= self.uplink
        h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return bw * (1 + self.jitter * (2 * h - 1))

    def seconds(self, nodes: tuple[str, ...], bw: float) -> float:
        n = len(nodes)
        return self.sched_s + 1.0 + self.init_s_per_node * n + self.sweep_bytes * 2 * (n - 1) / max(n, 1) / (bw * 1e9 + 1)


class ModelExecutor(Executor):
    """Runs a batch as Slurm would: tasks that share no node at the same time, the rest in later waves."""

    def __init__(self, model: Model):
        self.model = model
        self.jobs_submitted = 0
        self.wall_s = 0.0
        self.waves = 0

    def run(self, tasks: list[Task], store: Store, progress: Progress) -> None:
        left = list(tasks)
        while left:
            busy: set[str] = set()
            wave = []
            for t in left:
                if not busy & set(t.nodes):
                    wave.append(t)
                    busy |= set(t.nodes)
            left = [t for t in left if t not in wave]
            longest = 0.0
            for t in wave:
                bw = self.model.busbw(t.nodes, t.key)
                secs = self.model.seconds(t.nodes, bw)
                longest = max(longest, secs)
                store.measurements[t.key] = Measurement(
                    t.key, t.level, t.step, list(t.nodes), [self.model.leaf_of.get(n, "") for n in t.nodes],
                    ranks=len(t.nodes), transport="model", busbw=bw, seconds=round(secs, 2)).__dict__
                self.jobs_submitted += 1
            self.wall_s += longest
            self.waves += 1


def cluster(n: int, leaf_size: int, healthy: float = 50.0, slow: dict[str, float] | None = None) -> tuple[list[str], dict[str, str], dict[str, float]]:
    """``n`` nodes ``n00001``.. in leaves of ``leaf_size``; ``slow`` overrides some nodes' bandwidth."""
    width = max(2, int(math.log10(n)) + 1)
    nodes = [f"n{i:0{width}d}" for i in range(1, n + 1)]
    leaf_of = {x: f"leaf{i // leaf_size + 1}" for i, x in enumerate(nodes)}
    bw = {x: healthy for x in nodes}
    bw.update(slow or {})
    return nodes, leaf_of, bw
