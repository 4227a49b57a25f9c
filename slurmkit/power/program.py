"""What slurmctld runs: `slurmkit power suspend|resume|resume-fail HOSTLIST --inventory PATH`.

slurmctld waits for nothing here (power_save.c reaps its programs with WNOHANG), but from 24.11 it kills one that
runs past the largest ResumeTimeout/SuspendTimeout (slurm.conf(5) ResumeProgram), and a BMC can be slow: so the
program answers at once and acts in a detached child, every node in parallel, each action under the group's
``power.timeout``. One log line per action (``$SLURMKIT_POWER_LOG``, default /var/log/slurmkit/power.log).

A node that cannot be powered on is set DOWN with a ``slurmkit: resume failed: ...`` reason: slurm.conf(5)
ResumeProgram (22.05, 24.11): "If ResumeProgram is unable to restore a node to service ... it should set the node
state to DOWN, which will result in a requeue of any job associated with the node". A node that cannot be powered
off is set DOWN too ("slurmkit: suspend failed: ..."), so nobody counts on it being off or usable. When Slurm's
ResumeTimeout replaces that reason with its own (22.05), resume-fail re-states the cause from the log.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from slurmkit import hostlist
from slurmkit.model.cluster import Cluster

DEFAULT_LOG = "/var/log/slurmkit/power.log"
ACTIONS = ("suspend", "resume", "resume-fail")
# slurmctld runs its power programs with SLURM_CONF alone in the environment (power_save.c _run_prog, 22.05)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Log = Callable[[str], None]


def file_log(path: str) -> Log:
    lock = threading.Lock()

    def log(line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with lock:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a") as fh:
                    fh.write(f"{stamp} {line}\n")
            except OSError:
                pass  # a log that cannot be written never stops a power action

    return log


def _reason(text: str) -> str:
    # a Slurm reason is one argv word here (list argv, no shell); keep it one readable line
    return " ".join(text.split())[:200]


# What Slurm writes when ResumeTimeout passes (power_save.c, 22.05 and 24.11: set_node_down_ptr(node_ptr,
# "ResumeTimeout reached")). 22.05 frees the node's reason first (power_save.c of slurm-22-05-8-1, "xfree(
# node_ptr->reason); set_node_down_ptr(...)"), so slurmkit's "resume failed: <why>" is gone; 24.11 appends it to
# ours (node_mgr.c of slurm-24-11-5-1 set_node_reason: reason + " : " + message). Both set it before running
# ResumeFailProgram in the same pass (_do_failed_nodes after the node loop), so resume-fail can re-state the cause.
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"
_RESULT = re.compile(r"^\S+ resume (?P<node>\S+) provider=\S+: (?:ok in |FAILED in [0-9.]+s: (?P<why>.*); setting the "
                     r"node DOWN$)")


def last_resume_failure(lines: list[str], node: str) -> str | None:
    """Why the last power-on of ``node`` failed, from power.log's lines (None: the last one worked, or none)."""
    why: str | None = None
    for line in lines:
        m = _RESULT.match(line)
        if m and m.group("node") == node:
            why = m.group("why")
    return why


def restated_reason(current: str, why: str | None) -> str | None:
    """The reason resume-fail sets, or None to leave ``current`` (without scontrol's [user@time] stamp) alone:
    only Slurm's bare ResumeTimeout reason is replaced (24.11 kept ours; a reason someone else set is theirs)."""
    if why is None or current != RESUME_TIMEOUT_REASON:
        return None
    return _reason(f"slurmkit: resume failed: {why} (then {RESUME_TIMEOUT_REASON})")


def read_log(path: str, limit: int = 1 << 20) -> list[str]:
    """The last ``limit`` bytes of the power log, as lines (empty when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def node_reason(node: str, env: dict[str, str] | None = None) -> str:
    from slurmkit.backend.records import parse_oneline, strip_reason_stamp
    from slurmkit.backend.run import run

    out = run(["scontrol", "-o", "show", "node", node], timeout=30, env=env).stdout
    return strip_reason_stamp(parse_oneline(out.splitlines()[0] if out.strip() else "").get("Reason", ""))


def set_reason(node: str, reason: str, env: dict[str, str] | None = None) -> None:
    from slurmkit.backend.run import run

    # a reason alone, the state kept (scontrol update_node.c asks for a reason only with DOWN/DRAIN; node_mgr.c
    # update_node, 22.05 and 24.11, replaces the reason whenever one is given)
    run(["scontrol", "update", f"nodename={node}", f"reason={reason}"], timeout=30, env=env)


def mark_down(node: str, reason: str, env: dict[str, str] | None = None) -> None:
    from slurmkit.backend.run import run

    run(["scontrol", "update", f"nodename={node}", "state=down", f"reason={_reason(reason)}"], timeout=30, env=env)


def act(cluster: Cluster, conf_dir: Path, action: str, nodes: list[str], log: Log,
        mark: Callable[[str, str], None] = mark_down, history: Callable[[], list[str]] = list,
        reason_of: Callable[[str], str] = node_reason,
        restate: Callable[[str, str], None] = set_reason) -> int:
    """Do ``action`` for every node (in parallel threads); returns how many failed. For resume-fail, a node whose
    last power-on failed (``history``: power.log's lines) and whose reason Slurm replaced with its bare
    ResumeTimeout one gets slurmkit's cause back, so `sinfo -R` says why."""
    from slurmkit.power.providers import PowerError, provider_for

    owner = {h: g for g in cluster.node_groups for h in g.hostnames}
    failed = 0
    lock = threading.Lock()

    def one(node: str) -> None:
        nonlocal failed
        g = owner.get(node)
        if g is None or g.power is None:
            log(f"{action} {node}: not a power-managed node of the inventory; nothing done")
            return
        t0 = time.monotonic()
        try:
            prov = provider_for(g.power, conf_dir)
            if action == "resume":
                prov.on(node)
            else:  # suspend, and resume-fail: a node that did not come up is switched off again
                prov.off(node)
            log(f"{action} {node} provider={g.power.provider}: ok in {time.monotonic() - t0:.1f}s")
        except Exception as exc:  # noqa: BLE001 - a provider's own bug too: else the node waits for ResumeTimeout
            with lock:
                failed += 1
            msg = exc.one_line() if isinstance(exc, PowerError) else " ".join(
                f"{type(exc).__name__}: {exc}".split())
            if action == "resume-fail":
                log(f"{action} {node} provider={g.power.provider}: power-off after the failed resume failed: {msg}")
                return
            verb = "resume" if action == "resume" else "suspend"
            log(f"{action} {node} provider={g.power.provider}: FAILED in {time.monotonic() - t0:.1f}s: {msg}; "
                "setting the node DOWN")
            try:
                mark(node, f"slurmkit: {verb} failed: {msg}")
            except Exception as exc2:  # noqa: BLE001 - the log line is all that is left
                log(f"{action} {node}: could not set the node DOWN: {exc2}")

    if action == "resume-fail":
        log(f"resume-fail {hostlist.fold(nodes)}: Slurm set them DOWN after ResumeTimeout; powering them off")
        lines = history()
        for node in nodes:
            try:
                why = last_resume_failure(lines, node)
                new = restated_reason(reason_of(node), why) if why is not None else None
                if new:
                    restate(node, new)
                    log(f"resume-fail {node}: reason re-stated: {new}")
            except Exception as exc:  # noqa: BLE001 - the power-off still goes on; the log keeps the cause
                log(f"resume-fail {node}: could not re-state the reason: {exc}")
    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


def detach() -> bool:
    """Fork twice; True in the grandchild (which goes on in its own session, stdio on /dev/null), False in the
    caller (which returns to slurmctld at once)."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return False
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(fd, std)
    return True


def main(action: str, hosts: str, inventory: str, foreground: bool = False) -> int:
    """The edge's body: load, then act (detached unless ``foreground``). Returns the exit code."""
    from slurmkit.errors import SlurmkitError
    from slurmkit.model.load import load_cluster

    os.environ.setdefault("PATH", DEFAULT_PATH)
    log_path = os.environ.get("SLURMKIT_POWER_LOG") or DEFAULT_LOG
    log = file_log(log_path)
    try:
        nodes = hostlist.expand(hosts, "HOSTS")
        cluster = load_cluster(inventory)
    except SlurmkitError as exc:
        log(f"{action} {hosts}: cannot start: {exc.one_line()}")
        print(f"slurmkit power: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    log(f"{action} {hostlist.fold(nodes)}: requested by slurmctld")
    if not foreground and not detach():
        return 0
    try:
        failed = act(cluster, Path(inventory).resolve().parent, action, nodes, log, history=lambda: read_log(log_path))
    except BaseException as exc:  # noqa: BLE001 - the detached child has nobody else to tell
        log(f"{action} {hostlist.fold(nodes)}: crashed: {type(exc).__name__}: {exc}")
        failed = len(nodes)
    if not foreground:
        os._exit(1 if failed else 0)
    return 1 if failed else 0
