"""Callables the Python API's unit tests run in real runner processes (importable: the runner's PYTHONPATH holds
the repository)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from slurmkit.jobs.helpers import DelayedSubmission


class NetworkTraining:
    """submitit's docs/checkpointing.md example, made runnable: the "model" is a step count saved as JSON."""

    def __init__(self) -> None:
        self.model: dict[str, int] | None = None

    def __call__(self, checkpointpath: str, steps: int = 10) -> dict[str, Any]:
        path = Path(checkpointpath)
        self.model = json.loads(path.read_text()) if path.exists() else {"step": 0}
        start = self.model["step"]
        while self.model["step"] < steps:
            self.model["step"] += 1
            print(f"step {self.model['step']}", flush=True)
            time.sleep(0.05)
        return {"step": self.model["step"], "resumed_from": start}

    def checkpoint(self, checkpointpath: str, steps: int = 10) -> DelayedSubmission:
        Path(checkpointpath).write_text(json.dumps(self.model))  # the model dumped in its own format
        return DelayedSubmission(NetworkTraining(), checkpointpath, steps=steps)  # a clean instance resubmitted


class Quitter:
    """A checkpoint that declines the requeue (returns None)."""

    def __call__(self, n: int) -> int:
        for i in range(n):
            print(f"step {i + 1}", flush=True)
            time.sleep(0.05)
        return n

    def checkpoint(self, n: int) -> None:
        return None


def rank_times(x: int) -> int:
    return int(os.environ.get("RANK", "0")) * x
