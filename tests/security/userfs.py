"""Test-side helpers for the attacker suite's filesystem tests (items 3 and 4)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path


def user_dir(path: Path, user: str, mode: int = 0o755) -> Path:
    """``path`` created as a directory owned by ``user`` (what their own mkdir would make)."""
    pw = pwd.getpwnam(user)
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(mode)
    return path
