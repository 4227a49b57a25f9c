"""The site's own commands (the ``commands`` check, NHC's check_cmd_output / check_cmd_status), run as the hook runs:
root, on a real node. What keeps that safe:

- only commands from a policy file that no one but root (or the user the hook runs as: the commands run with no
  more than that user's rights) can change: the file and every directory above it owned by one of them and not
  writable by anyone else (a sticky directory such as /tmp excepted, whose other users cannot replace the entry).
  A policy without a file of its own (built in code) runs no command;
- no shell unless the entry says ``shell``; argv[0] an absolute path (no PATH search);
- a clean environment (PATH, LANG=C: never the job's or slurmd's), stdin /dev/null, cwd /, its own session, so a
  timeout kills the whole process group;
- a timeout per command within the check's own, and at most ``max_output_bytes`` of output kept (the rest is read
  and dropped, so a chatty command neither blocks nor fills memory).

subprocess is used directly (no library adds to this); the read loop is hand-written because subprocess.run's
capture keeps all of a command's output in memory.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import stat
import subprocess
import time
from typing import Any

CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C", "LC_ALL": "C"}
SHELL = "/bin/sh"
_TAIL = 240  # characters of output in the record (the finding names the command, never its output)


def trusted_source(path: str | None) -> str:
    """"" when no one but root or this process's user can change ``path`` (the file and each directory from / to
    it); else why not."""
    if not path:
        return "the policy has no file of its own whose owner could be checked"
    me = {0, os.geteuid()}
    real = os.path.realpath(path)
    try:
        s = os.stat(real)
    except OSError as exc:
        return f"{real}: {exc.strerror}"
    if not stat.S_ISREG(s.st_mode):
        return f"{real}: not a regular file"
    if s.st_uid not in me:
        return f"{real} is owned by uid {s.st_uid}"
    if s.st_mode & 0o022:
        return f"{real} is writable by {'group' if s.st_mode & 0o020 else 'others'}"
    cur = os.path.dirname(real)
    while True:
        try:
            d = os.stat(cur)
        except OSError as exc:
            return f"{cur}: {exc.strerror}"
        if d.st_uid not in me:
            return f"{cur} is owned by uid {d.st_uid}"
        if d.st_mode & 0o022 and not d.st_mode & stat.S_ISVTX:
            return f"{cur} is writable by {'group' if d.st_mode & 0o020 else 'others'}"
        if cur == "/":
            return ""
        cur = os.path.dirname(cur)


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_one(cmd: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one command for at most ``timeout_s``: exit code (negative: the signal), kept output, timed out."""
    argv = list(cmd["argv"]) if "argv" in cmd else [SHELL, "-c", cmd["shell"]]
    keep = int(cmd["max_output_bytes"])
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(CLEAN_ENV), cwd="/", start_new_session=True, close_fds=True)
    except OSError as exc:
        return {"error": f"cannot run {argv[0]}: {exc.strerror or exc}", "s": round(time.monotonic() - t0, 3)}
    assert p.stdout is not None
    buf = bytearray()
    dropped = 0
    timed_out = False
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    end = t0 + timeout_s
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break  # EOF: every writer closed the pipe
            room = keep - len(buf)
            buf += chunk[:max(room, 0)]
            dropped += max(0, len(chunk) - max(room, 0))
        if not timed_out:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True  # closed its output but kept running
    finally:
        sel.close()
        # a timed-out command, and whatever the command left behind in its session, never outlives the check
        _kill_group(p)
        p.stdout.close()
        try:
            p.wait(1.0)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state): left to init, the check already failed
    text = bytes(buf).decode(errors="replace")
    return {"exit": p.returncode, "timed_out": timed_out, "output": text, "truncated": dropped > 0,
            "s": round(time.monotonic() - t0, 3)}


def judge(cmd: dict[str, Any], r: dict[str, Any], timeout_s: float) -> str | None:
    """The finding for one command's run, None when it passed."""
    name = cmd["name"]
    if r.get("error"):
        return f"cmd {name} not run ({r['error']})"
    if r["timed_out"]:
        return f"cmd {name} timed out after {timeout_s:g}s"
    rc = r["exit"]
    if rc is not None and rc < 0:
        return f"cmd {name} killed by signal {-rc}"
    if rc != cmd["exit"]:
        return f"cmd {name} exit {rc}" + (f" (expected {cmd['exit']})" if cmd["exit"] else "")
    if cmd.get("match") and not re.search(cmd["match"], r["output"], re.MULTILINE):
        return f"cmd {name} output lacks /{cmd['match']}/"
    if cmd.get("no_match") and re.search(cmd["no_match"], r["output"], re.MULTILINE):
        return f"cmd {name} output has /{cmd['no_match']}/"
    return None


def gather_commands(cmds: tuple[dict[str, Any], ...], source: str | None, budget_s: float) -> dict[str, Any]:
    """Run each command in turn within ``budget_s`` altogether, when ``source`` (the policy's file) is trusted."""
    if not cmds:
        return {"commands": []}
    why = trusted_source(source)
    if why:
        return {"untrusted": why, "source": source, "commands": []}
    end = time.monotonic() + budget_s
    out = []
    for c in cmds:
        left = end - time.monotonic()
        if left <= 0.01:
            out.append({"name": c["name"], "finding": f"cmd {c['name']} not run (no time left in the check)"})
            continue
        t = min(float(c.get("timeout_s") or left), left)
        r = run_one(c, t)
        finding = judge(c, r, t)
        rec = {"name": c["name"], "argv": list(c["argv"]) if "argv" in c else [SHELL, "-c", c["shell"]],
               "exit": r.get("exit"), "s": r.get("s"), "timed_out": r.get("timed_out", False),
               "truncated": r.get("truncated", False), "output_tail": (r.get("output") or "")[-_TAIL:]}
        if r.get("error"):
            rec["error"] = r["error"]
        if finding:
            rec["finding"] = finding
        out.append(rec)
    return {"commands": out, "source": source}
