"""defrag watch on a state disk that cannot take a write (issue 32 item 7): the pass died with an OSError
traceback, and a move was recorded only after its USR2/requeue was sent, so a full disk meant a job moved that the
rate limits never counted. Now the move is recorded first, then sent; a write that fails is one StateWriteError line,
the reservation is rolled back and no job is moved. The full disk is a real one: a 64 KiB tmpfs this test mounts in
its own tmp dir (root), filled to ENOSPC, unmounted at the end."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from slurmkit.defrag.gather import Policy
from slurmkit.defrag.watch import StateWriteError, WatchState, run_pass
from tests.conftest import needs
from tests.unit.test_defrag_watch import JOB11, JOB20, FakeBackend, HoldBackend, held, snap, snap_of

NOW = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
MOVABLE = Policy(movable_qos=frozenset({"scav"}), restart_s=60, min_wait_s=600)


@contextlib.contextmanager
def full_tmpfs(where: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs at ``where``, filled until the kernel says ENOSPC; unmounted (lazily if busy) at the end."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=700", "slurmkit-test-full", str(where)], check=True,
                   capture_output=True, timeout=30)
    try:
        with open(where / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _can_mount() -> bool:
    return os.geteuid() == 0


@needs(_can_mount(), "mounting a tmpfs needs root")
def test_full_state_disk_is_one_line_and_no_move(tmp_path: Path) -> None:
    with full_tmpfs(tmp_path / "state") as d:
        state = str(d / "w.json")
        b, lines = FakeBackend(), []
        with pytest.raises(StateWriteError) as exc:
            run_pass(snap, b, MOVABLE, state, None, lines.append, now=lambda: NOW, minute_of_day=60)
        msg = exc.value.one_line()
        assert msg == (f"{state}: cannot write defrag watch state (No space left on device); no job moved: free the "
                       "disk, the next pass tries again")
        assert "\n" not in str(exc.value)
        # no job moved: neither the USR2 (cancel) nor a requeue was sent; the reservation was rolled back
        assert not [c for c in b.calls if c[0] in ("cancel", "requeue")], b.calls
        assert ("create", "n[3-4]") in b.calls and b.calls[-1][0] == "delete", b.calls
        # nothing half-written
        assert sorted(os.listdir(d)) == ["filler", "w.json.lock"]


@needs(_can_mount(), "mounting a tmpfs needs root")
def test_full_state_disk_creates_no_hold(tmp_path: Path) -> None:
    """Nothing may move: the pass would hold a leaf with a reservation; a state that cannot record the hold makes
    none (a reservation the next pass would not know of)."""
    with full_tmpfs(tmp_path / "state") as d:
        b, lines = HoldBackend(), []
        with pytest.raises(StateWriteError):
            run_pass(snap, b, Policy(), str(d / "w.json"), None, lines.append, now=lambda: NOW, minute_of_day=60)
        assert b.calls == []


@needs(_can_mount(), "mounting a tmpfs needs root")
def test_no_room_for_the_lock_is_one_line_too(tmp_path: Path) -> None:
    """The state dir itself cannot be made (the disk's inodes are spent too): one line, nothing read or done."""
    where = tmp_path / "state"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=2,mode=700", "slurmkit-test-full", str(where)],
                   check=True, capture_output=True, timeout=30)
    try:
        with contextlib.suppress(OSError):
            for i in range(10):
                (where / f"f{i}").touch()
        b = FakeBackend()
        with pytest.raises(StateWriteError, match=r"w\.json\.lock: cannot write defrag watch state \("):
            run_pass(snap, b, MOVABLE, str(where / "sub" / "w.json"), None, lambda m: None, now=lambda: NOW,
                     minute_of_day=60)
        assert b.calls == []
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


class WitnessBackend(FakeBackend):
    """Reads the state file from disk at the moment each move is sent: the move must already be in it."""

    def __init__(self, state: str) -> None:
        super().__init__()
        self.state = state
        self.seen: list[list[str]] = []

    def _witness(self) -> None:
        self.seen.append([m["job"] for m in WatchState.load(self.state).moves])

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        self._witness()
        super().cancel(job_id, signal, batch)

    def requeue(self, job_id: str) -> None:
        self._witness()
        super().requeue(job_id)


def test_a_move_is_recorded_before_it_is_sent(tmp_path: Path) -> None:
    state = str(tmp_path / "w.json")
    b, lines = WitnessBackend(state), []
    assert run_pass(snap, b, MOVABLE, state, None, lines.append, now=lambda: NOW, minute_of_day=60), lines
    assert ("requeue", "11") in b.calls
    assert b.seen == [["11"]]  # on disk when the requeue went out
    st = WatchState.load(state)
    assert [m["job"] for m in st.moves] == ["11"] and st.counters["slurmkit_defrag_moves_total"] == 1


def test_a_write_that_fails_leaves_the_state_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """record_move: the entry and the counters are taken back when the save fails (the pass then sends nothing)."""
    from slurmkit.health import state as hstate

    st = WatchState()

    def enospc(*_a: Any, **_k: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hstate, "atomic_write", enospc)
    with pytest.raises(StateWriteError):
        st.record_move(str(tmp_path / "w.json"), NOW, 3600, "11", "20", 5280.0)
    assert st.moves == [] and st.counters["slurmkit_defrag_moves_total"] == 0


def test_the_hold_path_records_before_it_moves(tmp_path: Path) -> None:
    """A due hold's moves (the _execute_hold path) are recorded before they are sent as well: job 20's hold of
    n[3-4] (made by a real pass), then job 11 ended early and a movable job 12 runs on n4."""
    path, now = held(tmp_path)
    job12 = JOB11.replace("JobId=11", "JobId=12").replace("n3", "n4")

    class B(WitnessBackend, HoldBackend):
        def __init__(self, state: str) -> None:
            HoldBackend.__init__(self)
            self.state, self.seen = state, []

    b, lines = B(path), []
    assert run_pass(snap_of(JOB20, job12, busy=("n4",)), b, Policy(movable_qos=frozenset({"scav"})), path, None,
                    lines.append, now=lambda: now + 1800, minute_of_day=90), lines
    assert ("requeue", "12") in b.calls
    assert b.seen == [["12"]], (b.seen, lines)
