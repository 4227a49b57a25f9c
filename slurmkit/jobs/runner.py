"""What a job submitted by ``slurmkit.launch`` (a callable) runs on every rank (see slurmkit/jobs/api.py).

Reads the pickled calls from ``$GPUSUB_RUN_DIR`` (an array task takes its own), prefers the call a checkpoint of
an earlier attempt saved, calls it, and writes this rank's result (or traceback). On SIGUSR2 / SIGTERM rank 0 calls
``fn.checkpoint(*args, **kwargs)`` (or ``__submitit_checkpoint__``) as submitit does: the DelayedSubmission it returns
is saved as the next attempt's call and the process exits 0, so the batch shell (or the local controller) requeues
the job; ``None`` means "do not requeue": the job ends, failed, with that reason. Another rank just exits.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from slurmkit.jobs.api import CALL_FILE, STATE_FILE, dumps, result_name


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _load(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)  # noqa: S301 - written by this user's own submission


def _final(reason: str) -> None:
    """Tell the batch shell (or the local controller) not to requeue this attempt."""
    path = os.environ.get("GPUSUB_FINAL_FILE")
    if path:
        Path(path).write_text(reason + "\n")


def main() -> None:
    from slurmkit.jobs.helpers import DelayedSubmission

    def early(signum: int, _frame: object) -> None:  # before the call is loaded: nothing to checkpoint yet
        print(f"slurmkit.jobs: {signal.Signals(signum).name} before the call started: exiting for the requeue",
              flush=True)
        raise SystemExit(0)

    for sig in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, early)
    run_dir = Path(os.environ["GPUSUB_RUN_DIR"])
    meta = _load(run_dir / CALL_FILE)
    # the driver's directory and working directory first: a module beside the driver script is imported from
    # there, as it was when the call was pickled (submitit runs its jobs from the submitting directory likewise)
    for p in reversed(meta["sys_path"]):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    task = int(os.environ["SLURM_ARRAY_TASK_ID"]) if meta["array"] else None
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))  # torchrun sets RANK, srun SLURM_PROCID
    state = run_dir / STATE_FILE.replace(".pkl", f".{task}.pkl" if task is not None else ".pkl")
    out = run_dir / result_name(task, rank)
    try:
        if state.is_file():
            delayed = _load(state)  # the call the last attempt's checkpoint() returned
            print(f"slurmkit.jobs: resuming the call checkpointed at {state}", flush=True)
        else:
            delayed = pickle.loads(meta["calls"])[task or 0]  # noqa: S301 - this user's own submission
    except BaseException:  # noqa: BLE001 - an unpicklable call (a module missing on the node) is the job's error
        _record(out, traceback.format_exc())
        raise SystemExit(1) from None

    def on_signal(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)  # once
        name = signal.Signals(signum).name
        if rank != 0:
            print(f"slurmkit.jobs: {name}: rank {rank} exits (rank 0 checkpoints)", flush=True)
            raise SystemExit(0)
        fn = delayed.function
        ckpt = getattr(fn, "__submitit_checkpoint__", None) or getattr(fn, "checkpoint", None)
        if ckpt is None:
            print(f"slurmkit.jobs: {name}: exiting for the requeue (the callable has no checkpoint(): it starts "
                  "over)", flush=True)
            raise SystemExit(0)
        try:
            new = ckpt(*delayed.args, **delayed.kwargs)
        except BaseException:  # noqa: BLE001 - a checkpoint that raises ends the job with its traceback
            why = f"checkpoint() raised, not requeued:\n{traceback.format_exc()}"
            _final("checkpoint() raised")
            _record(out, why)
            raise SystemExit(1) from None
        if new is None:
            _final("checkpoint() returned None")
            _record(out, "not requeued: checkpoint() returned None")
            print(f"slurmkit.jobs: {name}: checkpoint() returned None: not requeued", flush=True)
            raise SystemExit(1)
        if not isinstance(new, DelayedSubmission):
            _final("checkpoint() returned no DelayedSubmission")
            _record(out, f"not requeued: checkpoint() returned {type(new).__name__}, not a DelayedSubmission "
                         "(return launch.helpers.DelayedSubmission(self, *args, **kwargs))")
            raise SystemExit(1)
        _atomic_write(state, dumps(new))
        # the batch shell's record of a checkpoint in this attempt ($GPUSUB_CHECKPOINT_STEP_FILE): no step number
        # here, the call itself is the state; `gpusub status` then says "requeued after checkpoint"
        mark = os.environ.get("GPUSUB_CHECKPOINT_STEP_FILE")
        if mark:
            with contextlib.suppress(OSError):
                Path(mark).write_text("")
        print(f"slurmkit.jobs: {name}: checkpointed {new!r}, exiting for the requeue", flush=True)
        raise SystemExit(0)

    for sig in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        value = delayed.result()
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - recorded for Job.result(), then the job fails
        _record(out, traceback.format_exc())
        raise SystemExit(1) from None
    _atomic_write(out, dumps(("ok", value)))


def _record(out: Path, tb: str) -> None:
    print(tb, file=sys.stderr, flush=True)
    _atomic_write(out, pickle.dumps(("error", tb), protocol=pickle.HIGHEST_PROTOCOL))
