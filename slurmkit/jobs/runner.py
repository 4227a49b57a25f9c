"""What a job submitted by ``slurmkit.jobs.submit(callable)`` runs on every rank (see slurmkit/jobs/api.py).

Reads the pickled call from ``$GPUSUB_RUN_DIR``, prefers a checkpointed callable object saved by an earlier
attempt, calls it, and has rank 0 write the result (or the traceback). SIGUSR2 / SIGTERM: ``checkpoint()`` (when the
object has one), rank 0 saves the object, and the process exits 0 so the batch shell requeues the job.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from slurmkit.jobs.api import CALL_FILE, STATE_FILE


def _atomic_pickle(path: Path, obj: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _load(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)  # noqa: S301 - written by this user's own submission


def main() -> None:
    run_dir = Path(os.environ["GPUSUB_RUN_DIR"])
    payload = _load(run_dir / CALL_FILE)
    task: int | None = None
    if payload[0] == "array":
        _, fn, params = payload
        task = int(os.environ["SLURM_ARRAY_TASK_ID"])
        p = params[task]
        args, kwargs = ((), p) if isinstance(p, dict) else ((p if isinstance(p, tuple) else (p,)), {})
    else:
        _, fn, args, kwargs = payload
    suffix = f".{task}" if task is not None else ""
    state = run_dir / (STATE_FILE.replace(".pkl", f"{suffix}.pkl"))
    if state.is_file():
        fn = _load(state)  # the object as the last attempt checkpointed it
        print(f"slurmkit.jobs: resuming the callable checkpointed at {state}", flush=True)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))  # torchrun sets RANK, srun SLURM_PROCID

    def on_signal(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)  # once
        name = signal.Signals(signum).name
        if hasattr(fn, "checkpoint"):
            fn.checkpoint()
            if rank == 0:
                _atomic_pickle(state, fn)
            print(f"slurmkit.jobs: {name}: checkpointed the callable, exiting for the requeue", flush=True)
        else:
            print(f"slurmkit.jobs: {name}: exiting for the requeue (the callable has no checkpoint(): it starts "
                  "over)", flush=True)
        raise SystemExit(0)

    for sig in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, on_signal)
    out = run_dir / f"result{suffix}.pkl"
    try:
        value = fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - recorded for Job.result(), then the job fails
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        if rank == 0:
            _atomic_pickle(out, ("error", tb))
        raise SystemExit(1) from None
    if rank == 0:
        _atomic_pickle(out, ("ok", value))
