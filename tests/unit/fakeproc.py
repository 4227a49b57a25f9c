"""A daemon in a fake /proc tree as the daemons check believes one (issue 32 item 6): its stat line (the name), its
status (uids) and its exe link to a root-owned file of that name in a root-owned directory (the test's tmp tree,
which root's pytest owns)."""

from __future__ import annotations

import os
from pathlib import Path


def fake_daemon(proc: Path, pid: int, comm: str, state: str = "S", uid: int = 0, ppid: int = 1) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} 1 1 0 -1 0 " + " ".join(["0"] * 20) + "\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    exe = proc.parent / "bin" / comm
    exe.parent.mkdir(exist_ok=True)
    if not exe.exists():
        exe.write_text("")
        exe.chmod(0o755)
    if os.path.lexists(d / "exe"):
        os.unlink(d / "exe")
    os.symlink(exe, d / "exe")
