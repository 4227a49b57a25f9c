"""The attacker's inotify reader (issue 32 item 3), run by an unprivileged user with Debian's /usr/bin/python3:
watch TOP and every directory that appears under it (where the kernel lets this user watch it), open each file
the moment it is created or moved in, keep the fd (an fd opened while a file is still readable stays readable
after a chmod) and read it again until STOP exists. Prints "ready" once watching, then one JSON line: the counts,
the bytes read per path, and which MARKER-<n>- strings it saw.

Python has no inotify in its standard library: ctypes on libc's inotify_init1(2) / inotify_add_watch(2)."""

import ctypes
import ctypes.util
import json
import os
import re
import select
import struct
import sys
import time

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x2, 0x8, 0x80, 0x100, 0x40000000
IN_NONBLOCK = os.O_NONBLOCK  # inotify(7): IN_NONBLOCK is O_NONBLOCK


def main() -> None:
    top, stop, marker = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    ino = libc.inotify_init1(IN_NONBLOCK)
    if ino < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    wds: dict[int, str] = {}
    counts = {"create_events": 0, "watched_dirs": 0, "watch_refused": 0, "opened": 0, "open_refused": 0}
    fds: dict[tuple[int, int], list] = {}  # (dev, inode) -> [fd, opened at, path]
    got: dict[str, int] = {}
    runs: set[str] = set()
    pattern = re.compile(re.escape(marker) + rb"-(\w+)-")

    def grab(path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            counts["open_refused"] += 1
            return
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in fds:
            os.close(fd)
            return
        fds[(st.st_dev, st.st_ino)] = [fd, time.monotonic(), path]
        counts["opened"] += 1

    def watch(d: str) -> None:
        wd = libc.inotify_add_watch(ino, d.encode(), IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO)
        if wd < 0:
            counts["watch_refused"] += 1
            return
        wds[wd] = d
        counts["watched_dirs"] += 1
        try:
            for e in os.scandir(d):
                if e.is_dir(follow_symlinks=False):
                    watch(e.path)
                else:
                    grab(e.path)
        except OSError:
            pass

    def drain(final: bool = False) -> None:
        now = time.monotonic()
        for slot in fds.values():
            if slot[0] < 0:
                continue
            try:
                data = os.pread(slot[0], 1 << 20, 0)
            except OSError:
                data = b""
            got[slot[2]] = max(got.get(slot[2], 0), len(data))
            runs.update(m.group(1).decode() for m in pattern.finditer(data))
            if final or now - slot[1] > 2.0:
                os.close(slot[0])
                slot[0] = -1

    watch(top)
    print("ready", flush=True)
    while not os.path.exists(stop):
        if select.select([ino], [], [], 0.05)[0]:
            try:
                buf = os.read(ino, 1 << 16)
            except BlockingIOError:
                buf = b""
            i = 0
            while i < len(buf):
                wd, mask, _cookie, ln = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode(errors="replace")
                i += 16 + ln
                path = os.path.join(wds.get(wd, "?"), name)
                if mask & IN_CREATE:
                    counts["create_events"] += 1
                if mask & IN_ISDIR:
                    if mask & (IN_CREATE | IN_MOVED_TO):
                        watch(path)
                elif mask & (IN_CREATE | IN_MOVED_TO | IN_MODIFY):
                    grab(path)
        drain()
    drain(final=True)
    print(json.dumps({**counts, "bytes_read": got, "secret_runs": sorted(runs)}), flush=True)


if __name__ == "__main__":
    main()
