"""Test-side helpers for the attacker suite's filesystem tests (items 3 and 4)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def reachable(path: Path) -> Path:
    """Let an ordinary user reach and list ``path`` (made 0755): each directory above it gets the search bits
    (pytest's basetemp /tmp/pytest-of-root is 0700), never read or write. The search bits are left on afterwards:
    another test of the session may be using the same parents."""
    path.chmod(0o755)
    for p in path.parents:
        st = p.stat()
        if not st.st_mode & stat.S_IXOTH:
            os.chmod(p, stat.S_IMODE(st.st_mode) | stat.S_IXGRP | stat.S_IXOTH)
    return path


def user_dir(path: Path, user: str, mode: int = 0o755) -> Path:
    """``path`` created as a directory owned by ``user`` (what their own mkdir would make)."""
    import pwd

    pw = pwd.getpwnam(user)
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(mode)
    return path
