"""A user's FUSE mount never drains a node (docs/security.md "Mounts: root's own only").

Where fusermount3 is installed (setuid root: Apptainer, enroot and sshfs need it) any user mounts FUSE with a
subtype of their choosing, and where /etc/fuse.conf has ``user_allow_other`` with ``-o allow_other``: then root's
statvfs goes to the user's daemon, which may never answer (the filesystems check calls the mount hung) or be gone
(ENOTCONN), and the filesystems check drained the node. This machine's /dev/fuse is root's 0600 (no udev), so root
makes the very mount fusermount3 makes for the attacker (util/fusermount.c of libfuse 3.14: ``fd=N,rootmode=...,
user_id=<getuid()>,group_id=<getgid()>`` plus the user's allowed options) and hands the fuse fd to a process of the
attacker's, which never answers; the kernel then holds exactly the state a user's own fusermount3 leaves.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import subprocess

import pytest

from slurmkit.health import checks, host
from tests.security.conftest import ATTACKER, USER_PYTHON

MS_NOSUID, MS_NODEV = 2, 4


def _cannot(why: str) -> None:
    """A machine without FUSE skips this locally; in CI (root, this kind of machine) it fails: never a silent skip."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def _mount_fuse(point: str, uid: int, gid: int, extra: str = "allow_other") -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    opts = f"fd={fd},rootmode=40000,user_id={uid},group_id={gid},{extra}".encode()
    if libc.mount(b"gw:/data", point.encode(), b"fuse.sshfs", MS_NOSUID | MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        _cannot(f"cannot mount FUSE here: {os.strerror(err)}")
    return fd


def _umount(point: str) -> None:
    ctypes.CDLL(None, use_errno=True).umount2(point.encode(), 2)  # MNT_DETACH


def test_users_fuse_mount_that_never_answers_drains_nothing(open_tmp):
    if not os.path.exists("/dev/fuse"):
        _cannot("no /dev/fuse")
    pw = pwd.getpwnam(ATTACKER)
    held, gone = open_tmp / "held", open_tmp / "gone"
    for d in (held, gone):
        d.mkdir()
        os.chown(d, pw.pw_uid, pw.pw_gid)
    fd_held = _mount_fuse(str(held), pw.pw_uid, pw.pw_gid)
    daemon = None
    try:
        fd_gone = _mount_fuse(str(gone), pw.pw_uid, pw.pw_gid)
        os.close(fd_gone)  # the attacker's daemon exited: the connection is gone
        # the attacker's "daemon": holds the fuse fd and never reads a request
        # (Popen's user=: the attacker's uid itself, so the kill at the end reaches it, not a runuser between)
        daemon = subprocess.Popen([USER_PYTHON, "-c", "import time; time.sleep(120)"], pass_fds=[fd_held],
                                  user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        os.close(fd_held)
        fd_held = -1
        with pytest.raises(OSError) as e:
            os.statvfs(gone)  # root's statvfs reaches the user's dead connection: the hole, for real
        assert e.value.errno == errno.ENOTCONN
        paths = host.HostPaths()
        data = host.gather_filesystems(paths, (), 1.0)
        ours = {p: m for p, m in data["mounts"].items() if p.startswith(str(open_tmp))}
        assert ours == {}, ours  # before: {held: hung, gone: ENOTCONN}, and the check drained the node
        assert data["users_fuse_mounts"] >= 2
        v = checks.eval_filesystems(data, None)  # type: ignore[arg-type]
        assert not any(str(open_tmp) in f for f in v.findings)
    finally:
        if fd_held >= 0:
            os.close(fd_held)
        _umount(str(held))
        _umount(str(gone))
        if daemon is not None:
            daemon.kill()
            daemon.wait(10)
