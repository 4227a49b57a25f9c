"""Files root shares a filesystem with users (issue 32 items 3 and 4; docs/security.md).

Writing: a file that may hold a secret (slurmdbd.conf's StoragePass, a journal holding a copy of it) is created with
its final mode by the open itself (O_CREAT|O_EXCL|O_NOFOLLOW: a name planted in advance, file or symlink, is refused,
not used), owned as it must be before its first byte is written, so no other user can open it at any moment: a
reader that opens a file while it is still 0644 keeps that fd after a later chmod, which is how a user watching the
directory with inotify read StoragePass before. Directories that hold such files are 0700 (made so if they exist
wider), and opened with O_NOFOLLOW so a symlink in their place is refused.

Reading: a tree a user can write (a job's run dir, its checkpoints/, their /dev/shm entries) is walked from
directory fds opened with O_NOFOLLOW relative to their parent (no symlink followed at any level, no path resolved
twice), counts only what belongs to the user, and stops at a bound of entries, depth and time.

Standard library only: the node hooks import it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | _NOFOLLOW


def _euid_is_root() -> bool:
    return os.geteuid() == 0


def write_new(path: str | os.PathLike[str], data: str | bytes, mode: int, durable: bool = True,
              uid: int = -1, gid: int = -1) -> None:
    """Create ``path`` (it must not exist) with ``mode`` from the open on, owned by ``uid``/``gid`` (-1: this
    process's) before anything is written, write ``data``, fsync unless ``durable`` is False. The umask can only
    narrow the open's mode; the fchmod that follows sets exactly ``mode`` while the file is still empty. On any
    error the half-written file is removed."""
    body = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode & 0o777)
    try:
        if uid != -1 or gid != -1:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, mode & 0o777)
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    os.close(fd)


def copy_new(src: str | os.PathLike[str], dst: str | os.PathLike[str], durable: bool = True) -> None:
    """Copy the regular file ``src`` to ``dst`` (which must not exist) as ``write_new`` creates files: the copy
    has the source's permission bits from its open on (never wider), its owner and group when this process is root
    (so a copy restored by a rollback is the file it was: slurmdbd.conf stays its SlurmUser's), and its times."""
    sfd = os.open(src, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(src))
        mode = stat.S_IMODE(st.st_mode) & 0o777
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
        try:
            if _euid_is_root():
                os.fchown(dfd, st.st_uid, st.st_gid)
            os.fchmod(dfd, mode)
            while True:
                chunk = os.read(sfd, 1 << 20)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dfd, view):]
            os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
            if durable:
                os.fsync(dfd)
        except BaseException:
            os.close(dfd)
            try:
                os.unlink(dst)
            except OSError:
                pass
            raise
        os.close(dfd)
    finally:
        os.close(sfd)


def private_dir(path: str | os.PathLike[str], mode: int = 0o700) -> None:
    """Make ``path`` a directory of this process's user with exactly ``mode``: created so, or an existing one
    narrowed (or widened back to ``mode``: the umask may have narrowed mkdir's). Refused (OSError naming the path)
    where a symlink, a non-directory or another user's directory stands there."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, _DIR)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(exc.errno, "not a directory (a symlink or a file stands there)", os.fspath(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}",
                          os.fspath(path))
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def makedirs_private(path: str | os.PathLike[str]) -> None:
    """``path`` and each missing parent created 0700 (a user's cache: ``$XDG_CACHE_HOME/slurmkit/...``). Neither
    ``os.makedirs(mode=)`` nor ``Path.mkdir(parents=True, mode=)`` gives the parents that mode (they get the umask's,
    0755), so whichever of gpusub's caches ran first decided who could list ``slurmkit/``. Existing directories are
    left as they are (they are the user's)."""
    missing: list[str] = []
    p = os.path.abspath(os.fspath(path))
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


# --------------------------------------------------------------------------------------------------------------
# reading what users write


def uid_of_record(value: str | None) -> int | None:
    """The uid of a Slurm ``UserId=name(uid)`` field (scontrol show job), None when it holds none."""
    if not value or not value.endswith(")") or "(" not in value:
        return None
    digits = value.rsplit("(", 1)[1][:-1]
    return int(digits) if digits.isdigit() else None


def open_owned_dir(path: str | os.PathLike[str], uid: int, dir_fd: int | None = None) -> int | None:
    """An fd of the directory ``path`` when it is a directory owned by ``uid`` and its last component is no symlink
    (O_NOFOLLOW); None otherwise. Symlinks higher up the path may lead there: what decides is the owner of the
    directory reached, which no symlink can change (a user's link to another user's dir reaches a dir they do
    not own)."""
    try:
        fd = os.open(path, _DIR, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid == uid:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def owned_file(dir_fd: int, name: str, uid: int) -> os.stat_result | None:
    """lstat of ``name`` in ``dir_fd`` when it is a regular file (not a symlink) owned by ``uid``; else None."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) and st.st_uid == uid else None


class Walk:
    """A bounded walk of a user's tree from an open directory fd: at most ``max_entries`` directory entries, ``max_depth``
    levels below the top and ``seconds`` of time; ``complete`` says whether it saw the whole tree. Subdirectories are
    opened relative to their parent's fd with O_NOFOLLOW and must be owned by ``uid``; symlinks are never followed
    (an entry that is one is counted and skipped). ``files()`` yields (dir fd, name, lstat) of the regular files owned
    by ``uid``."""

    def __init__(self, uid: int, max_entries: int = 10_000, max_depth: int = 8, seconds: float = 1.0) -> None:
        self.uid = uid
        self.max_entries = max_entries
        self.max_depth = max_depth
        self.seconds = seconds
        self.entries = 0
        self.complete = True
        self.why = ""

    def _stop(self, why: str) -> None:
        self.complete = False
        self.why = self.why or why

    def files(self, top_fd: int) -> Iterator[tuple[int, str, os.stat_result]]:
        deadline = time.monotonic() + self.seconds
        stack: list[tuple[int, int]] = [(os.dup(top_fd), 0)]
        try:
            while stack:
                fd, depth = stack.pop()
                try:
                    with os.scandir(fd) as it:
                        for e in it:
                            self.entries += 1
                            if self.entries > self.max_entries:
                                self._stop(f"more than {self.max_entries} entries")
                                return
                            if time.monotonic() > deadline:
                                self._stop(f"walk exceeded {self.seconds:g}s")
                                return
                            try:
                                st = e.stat(follow_symlinks=False)
                            except OSError:
                                continue
                            if st.st_uid != self.uid:
                                continue
                            if stat.S_ISREG(st.st_mode):
                                yield fd, e.name, st
                            elif stat.S_ISDIR(st.st_mode):
                                if depth >= self.max_depth:
                                    self._stop(f"deeper than {self.max_depth} levels")
                                    continue
                                sub = open_owned_dir(e.name, self.uid, dir_fd=fd)
                                if sub is not None:
                                    stack.append((sub, depth + 1))
                except OSError:
                    self._stop("a directory could not be read")
                finally:
                    os.close(fd)
        finally:
            for fd, _ in stack:
                os.close(fd)


def newest_mtime(top_fd: int, walk: Walk) -> float | None:
    """The newest mtime of ``walk``'s files under ``top_fd``; None when there is none or the walk hit a bound (a
    partial walk proves nothing about the newest file)."""
    newest = None
    for _fd, _name, st in walk.files(top_fd):
        newest = st.st_mtime if newest is None or st.st_mtime > newest else newest
    return newest if walk.complete else None


class Budget:
    """What a bounded job may still do: ``entries`` directory entries and ``seconds`` of time from now."""

    def __init__(self, entries: int, seconds: float) -> None:
        self.entries = entries
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.used = 0
        self.spent = ""

    def take(self) -> bool:
        """One entry more; False (and ``spent`` says why) once the entries or the time are gone."""
        if not self.spent:
            if self.used >= self.entries:
                self.spent = f"stopped after {self.entries} entries"
            elif time.monotonic() > self.deadline:
                self.spent = f"stopped after {self.seconds:g}s"
        if self.spent:
            return False
        self.used += 1
        return True


def remove_user_tree(parent_fd: int, name: str, uid: int, budget: Budget, max_depth: int = 64) -> bool:
    """Remove the directory ``name`` of ``parent_fd`` when it is ``uid``'s, as that user could: every file and link
    in it unlinked (a link is never followed), its subdirectories of ``uid`` removed the same way from fds opened
    with O_NOFOLLOW relative to their parent, a subdirectory of another user left (its owner's contents), all within
    ``budget`` and ``max_depth`` levels. True when the directory is gone."""
    fd = open_owned_dir(name, uid, dir_fd=parent_fd)
    if fd is None:
        return False
    whole = True
    try:
        while True:
            batch: list[tuple[str, bool]] = []
            with os.scandir(fd) as it:
                for e in it:
                    if not budget.take():
                        break  # what is collected is still removed
                    try:
                        is_dir = stat.S_ISDIR(e.stat(follow_symlinks=False).st_mode)
                    except OSError:
                        continue
                    batch.append((e.name, is_dir))
                    if len(batch) >= 1024:
                        break
            if not batch:
                break
            progress = False
            for child, is_dir in batch:
                try:
                    if not is_dir:
                        os.unlink(child, dir_fd=fd)
                        progress = True
                    elif max_depth > 0 and remove_user_tree(fd, child, uid, budget, max_depth - 1):
                        progress = True
                    else:
                        whole = False
                except OSError:
                    whole = False
            if budget.spent:
                return False
            if not progress:
                break
    finally:
        os.close(fd)
    if not whole:
        return False
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        return False
    return True
