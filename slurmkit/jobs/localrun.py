"""The LocalExecutor's controller: plays the batch shell for a job run on this machine (slurmkit/jobs/executor.py).

``python -m slurmkit.jobs.localrun RUN_DIR`` (RUN_DIR/local.json says what): runs the setup lines and
``ntasks`` ranks of the runner (RANK/LOCAL_RANK/WORLD_SIZE set, one log per attempt), sends SIGUSR2 to the ranks
``signal_delay_s`` before ``timeout_s`` (Slurm's ``--signal=B:USR2@grace``) or when it gets SIGUSR2 itself
(``job.cancel(signal="USR2")``), and after a signalled attempt starts the next one (the checkpointed call) unless
the program asked not to be (``$GPUSUB_FINAL_FILE``) or ``max_restarts`` is reached. SIGTERM (``job.cancel()``)
ends the ranks and the job, as scancel does. Hand-written: what it imitates is the batch shell in
job_templates/base.sh.j2, which no library provides.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_KILL_S = 30  # after the time limit: SIGKILL, as Slurm's KillWait


def main(argv: list[str] | None = None) -> int:
    run_dir = Path((argv or sys.argv[1:])[0])
    cfg = json.loads((run_dir / "local.json").read_text())
    job_id = str(os.getpid())
    restart = 0
    limit = cfg["timeout_s"]
    # the checkpoint signal this long before the limit: as asked, else 90 s (submitit's) or a quarter of a short one
    delay = cfg["signal_delay_s"] if cfg["signal_delay_s"] is not None else min(90, (limit or 0) // 4)
    state: dict[str, str] = {"signalled": "", "term": ""}
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        state["signalled"] = state["signalled"] or signal.Signals(signum).name
        if signum == signal.SIGTERM:
            state["term"] = "yes"
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if signum == signal.SIGTERM else signal.SIGUSR2)

    signal.signal(signal.SIGUSR2, forward)
    signal.signal(signal.SIGTERM, forward)
    rc = 0
    while True:
        log_path = run_dir / "logs" / f"local.r{restart}.log"
        final = run_dir / "attempts" / f"local.r{restart}.final"
        env = {**os.environ, **{k: str(v) for k, v in cfg["env"].items()}, "GPUSUB_RUN_DIR": str(run_dir),
               "GPUSUB_RESTART_COUNT": str(restart), "GPUSUB_CHECKPOINT_DIR": str(run_dir / "checkpoints"),
               "GPUSUB_FINAL_FILE": str(final), "SLURMKIT_LOCAL_JOB_ID": job_id,
               "WORLD_SIZE": str(cfg["ntasks"]), "LOCAL_WORLD_SIZE": str(cfg["ntasks"])}
        setup = "\n".join(cfg["setup"])
        state["signalled"] = ""
        start = time.monotonic()
        with open(log_path, "ab") as log:
            log.write(f"slurmkit local: job {job_id} attempt {restart}\n".encode())
            log.flush()
            procs[:] = [subprocess.Popen(
                ["bash", "-c", f'{setup}\nexec "$@"', "slurmkit-local", cfg["python"], "-u", cfg["runner"]],
                env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=log, stderr=subprocess.STDOUT,
                cwd=os.getcwd()) for r in range(cfg["ntasks"])]
            warned = False
            while any(p.poll() is None for p in procs):
                elapsed = time.monotonic() - start
                if limit and not warned and elapsed >= max(0, limit - delay):
                    warned = True
                    forward(signal.SIGUSR2, None)
                if limit and elapsed >= limit + GRACE_KILL_S:
                    for p in procs:
                        if p.poll() is None:
                            p.kill()
                time.sleep(0.05)
        rcs = [p.returncode for p in procs]
        rc = next((c for c in rcs if c), 0)
        signalled = state["signalled"]
        with open(log_path, "ab") as log:
            log.write(f"slurmkit local: ranks exited {rcs}{' after ' + signalled if signalled else ''}\n".encode())
        if signalled and not state["term"] and not final.exists() and restart < cfg["max_restarts"]:
            restart += 1
            continue
        if signalled and rc == 0:  # checkpointed, not restarted (max_restarts): unfinished, as the batch shell says
            from slurmkit.jobs.rundir import STOPPED_EXIT

            rc = STOPPED_EXIT
        break
    (run_dir / "attempts" / "local.exit").write_text(f"{rc}\n")
    return 0 if rc == 0 else (rc if rc > 0 else 128 - rc)


if __name__ == "__main__":
    raise SystemExit(main())
