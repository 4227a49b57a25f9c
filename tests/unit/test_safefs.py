"""slurmkit/safefs.py: files created with their final mode, private dirs, bounded walks that follow no symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurmkit import safefs


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("umask", [0, 0o022, 0o077])
def test_write_new_gives_exactly_the_mode_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        safefs.write_new(tmp_path / "secret", "pw\n", 0o600)
        safefs.write_new(tmp_path / "plain", b"x\n", 0o644, durable=False)
    finally:
        os.umask(old)
    assert mode(tmp_path / "secret") == 0o600 and (tmp_path / "secret").read_text() == "pw\n"
    assert mode(tmp_path / "plain") == 0o644


def test_write_new_uses_no_planted_name(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("planted")
    (tmp_path / "target").write_text("t")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("file", "link", "dangling"):
        with pytest.raises(FileExistsError):
            safefs.write_new(tmp_path / name, "pw", 0o600)
    assert (tmp_path / "target").read_text() == "t" and not (tmp_path / "nowhere").exists()
    assert (tmp_path / "file").read_text() == "planted"


def test_copy_new_keeps_mode_and_times_and_never_widens(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_text("StoragePass=x\n")
    src.chmod(0o640)
    os.utime(src, (1000, 2000))
    old = os.umask(0)
    try:
        safefs.copy_new(src, tmp_path / "dst")
    finally:
        os.umask(old)
    st = os.stat(tmp_path / "dst")
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime == 2000 and (tmp_path / "dst").read_text() == src.read_text()
    with pytest.raises(FileExistsError):
        safefs.copy_new(src, tmp_path / "dst")
    with pytest.raises(OSError, match="not a regular file"):
        safefs.copy_new(tmp_path, tmp_path / "dir-copy")
    assert not (tmp_path / "dir-copy").exists()


def test_private_dir_narrows_and_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir(mode=0o755)
    d.chmod(0o777)
    safefs.private_dir(d)
    assert mode(d) == 0o700
    safefs.private_dir(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o700
    (tmp_path / "link").symlink_to(d)
    with pytest.raises(OSError, match="symlink"):
        safefs.private_dir(tmp_path / "link")
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="not a directory"):
        safefs.private_dir(tmp_path / "file")
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 5, 60)
        with pytest.raises(OSError, match="owned by uid 5"):
            safefs.private_dir(other)


def test_uid_of_record() -> None:
    assert safefs.uid_of_record("games(5)") == 5
    assert safefs.uid_of_record("a(b)(1000)") == 1000
    assert safefs.uid_of_record("games") is None and safefs.uid_of_record("") is None
    assert safefs.uid_of_record("x(5a)") is None and safefs.uid_of_record(None) is None


def test_walk_follows_no_symlink_and_keeps_its_bounds(tmp_path: Path) -> None:
    uid = os.geteuid()
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    os.utime(tmp_path / "a" / "b" / "f", (500, 500))
    (tmp_path / "g").write_text("")
    os.utime(tmp_path / "g", (400, 400))
    (tmp_path / "up").symlink_to("/")
    (tmp_path / "file-link").symlink_to("/etc/hostname")
    fd = safefs.open_owned_dir(tmp_path, uid)
    assert fd is not None
    try:
        w = safefs.Walk(uid)
        assert safefs.newest_mtime(fd, w) == 500 and w.complete and w.entries == 6
        w = safefs.Walk(uid, max_entries=3)
        assert safefs.newest_mtime(fd, w) is None and not w.complete and "entries" in w.why
        w = safefs.Walk(uid, max_depth=1)
        assert safefs.newest_mtime(fd, w) is None and not w.complete and "deeper" in w.why
        w = safefs.Walk(uid + 1)  # another user's tree: nothing of theirs in it
        assert safefs.newest_mtime(fd, w) is None and w.entries == 4
    finally:
        os.close(fd)
    assert safefs.open_owned_dir(tmp_path / "up", uid) is None  # the last component a symlink
    assert safefs.open_owned_dir(tmp_path, uid + 1) is None
    top = os.open(tmp_path, os.O_RDONLY)
    try:
        assert safefs.owned_file(top, "file-link", uid) is None and safefs.owned_file(top, "g", uid) is not None
    finally:
        os.close(top)
