"""Carry a defrag plan out (issue 26): hold the target's nodes for the blocked job with a reservation, move the
planned jobs through the checkpoint-keeping requeue path, wait for the blocked job to start, then release the
reservation. The rollback discipline of ``nodes add``: every step is checked before the next; a failure, a timeout
or Ctrl-C removes the reservation (and the blocked job's use of it) before returning, so none is ever left behind;
moved jobs already requeued stay pending and start elsewhere.

Why each step is safe, per Slurm (22.05 and 24.11 alike):
* ``scontrol create reservation ... Flags=IGNORE_JOBS`` takes nodes that jobs still run on (scontrol(1),
  IGNORE_JOBS); jobs outside the reservation can no longer be started there, so a moved job cannot land back.
* ``scontrol update JobId=B ReservationName=R`` is allowed for a pending or running job, and ``ReservationName=``
  (blank) clears it again (src/slurmctld/job_mgr.c _update_job: ESLURM_JOB_NOT_PENDING_NOR_RUNNING otherwise).
* A reservation a running job uses cannot be deleted (src/slurmctld/reservation.c _delete_resv_internal:
  ESLURM_RESERVATION_BUSY), hence the clear first, then the delete.
* A gpusub job is moved with ``scancel --signal=USR2 --batch``: its batch shell asks the step to checkpoint and
  requeues it (job_templates/base.sh.j2); a job the site marks movable is requeued with ``scontrol requeue``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from slurmkit import hostlist
from slurmkit.defrag.plan import DefragPlan
from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:
    from slurmkit.backend.cli import CLIBackend


class DefragError(SlurmkitError):
    exit_code = 1


def carry_out(plan: DefragPlan, blocked: str, user: str, gpusub_jobs: set[str], backend: CLIBackend,
              log: Callable[[str], None], timeout: float = 300.0, duration: str = "UNLIMITED",
              poll: float = 1.0, before_move: Callable[[str], None] | None = None,
              reservation: str | None = None) -> str:
    """-> the nodes the blocked job started on. Raises DefragError (after the rollback) when it did not start.
    ``before_move(job_id)`` is called before each move is sent (defrag watch records it there: record first, then
    act); whatever it raises (the state disk full) stops carry_out before that move, with the same rollback, so a
    move is never sent that is not recorded. ``reservation``: one
    that already holds ``plan.nodes`` for the user (defrag watch's hold, started by now): used instead of a new one,
    and removed the same way at the end."""
    name = reservation or f"slurmkit-defrag-{blocked}"
    nodes = hostlist.fold(plan.nodes)
    created = assigned = False
    try:
        if reservation is None:
            backend.create_reservation(ReservationName=name, StartTime="now", Duration=duration, Nodes=nodes,
                                       Users=user, Flags="IGNORE_JOBS")
            log(f"reserved {nodes} as {name} for job {blocked} (user {user})")
        created = True
        backend.update_job(blocked, ReservationName=name)
        assigned = True
        log(f"job {blocked} now waits in {name}")
        for m in plan.moves:
            if before_move is not None:
                before_move(m.job_id)
            if m.job_id in gpusub_jobs:
                backend.cancel(m.job_id, signal="USR2", batch=True)
                log(f"moving job {m.job_id}: USR2 to its batch shell (checkpoint, requeue), expected on "
                    f"{hostlist.fold(m.goes_to)}")
            else:
                backend.requeue(m.job_id)
                log(f"moving job {m.job_id}: scontrol requeue, expected on {hostlist.fold(m.goes_to)}")
        deadline = time.monotonic() + timeout
        while True:
            j = backend.job(blocked)
            if j.state == "RUNNING":
                log(f"job {blocked} runs on {hostlist.fold(j.nodes)}")
                break
            if j.finished or time.monotonic() > deadline:
                raise DefragError(f"job {blocked} did not start ({j.state}, reason {j.reason}) within {timeout:.0f} s; "
                                  f"the reservation is removed, moved jobs stay queued")
            time.sleep(poll)
        return hostlist.fold(j.nodes)
    finally:
        if assigned:
            try:
                backend.update_job(blocked, ReservationName="")
            except SlurmkitError as exc:
                log(f"could not clear job {blocked}'s reservation: {exc.one_line()}")
        if created:
            backend.delete_reservation(name)
            log(f"released {name}")
