"""Callables the Python API lab tests submit (importable by the jobs: the job's PYTHONPATH holds the repo)."""

from __future__ import annotations

import os
import time

from slurmkit.jobs.helpers import DelayedSubmission


def add(a: int, b: int) -> tuple[int, int, str]:
    return a + b, int(os.environ.get("SLURM_NTASKS", "1")), os.environ.get("SLURMD_NODENAME", "?")


def boom() -> None:
    raise ValueError("boom from the job")


def square(x: int) -> int:
    return x * x


def where() -> dict[str, str]:
    """What the job was given: its tasks and GPUs (Slurm's variables), and what a setup line exported."""
    return {k: os.environ.get(k, "") for k in ("SLURM_NTASKS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE",
                                               "CUDA_VISIBLE_DEVICES", "FROM_SETUP", "SLURM_JOB_CPUS_PER_NODE")}


class Counter:
    """Checkpointable: counts to ``until``; its count survives a preemption through checkpoint()."""

    def __init__(self, until: int, flag: str) -> None:
        self.until = until
        self.flag = flag  # a file the test creates once it has seen the count pass 5 (then it sends USR2)
        self.step = 0
        self.started_at: list[int] = []
        self.checkpoints = 0

    def checkpoint(self) -> DelayedSubmission:
        self.checkpoints += 1
        return DelayedSubmission(self)  # submitit's protocol: what to resubmit (None would end the job)

    def __call__(self) -> dict[str, object]:
        self.started_at.append(self.step)
        while self.step < self.until:
            self.step += 1
            print(f"step {self.step}", flush=True)
            time.sleep(0.2 if os.path.exists(self.flag) or self.step < 8 else 1.0)
        return {"step": self.step, "started_at": self.started_at, "checkpoints": self.checkpoints,
                "restart": int(os.environ.get("GPUSUB_RESTART_COUNT", "0"))}
