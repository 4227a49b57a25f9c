"""Issue 32 item 1 on this machine's real kernel: an ordinary user writes kernel-log records that look like a
driver's XID, SXid or machine check, and root's XID scan counts none of them.

The attack needs no privilege: with /proc/sys/debug/exception-trace on (the default), the kernel logs a user's
segfault as "<comm>[<pid>]: segfault at ... error 4 in <mapped file name>[...]" (arch/x86/mm/fault.c
show_signal_msg, mm/memory.c print_vma_addr), a record of the kernel's own facility whose text ends with a file
name the user chose and starts with a comm the user chose (prctl PR_SET_NAME, 15 bytes). Before the fix, a file
named "NVRM: Xid (PCI:0000:ee:00): 79, x" made `slurmkit check` report xid79 and the health check drain the node,
sticky until --clear-xid, whatever the bus id.

The test reads /dev/kmsg as root (so it proves the forged records are really there, with the kernel's facility,
and cannot pass on an empty log), then runs the xid gather `slurmkit check` and the health hook run (the real
/dev/kmsg, a state dir in tmp_path) and the xid check with the node's GPUs on the forged bus ids. Beside it the
drivers' own formats (tests/data/kmsg/records.json) through the same reader still count. The lab's hooks read the
fake NVML's kernel log, not this kernel's, so the real-kernel run is the one that shows it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.health import xid
from slurmkit.health.checks import CHECKS, EvalContext
from slurmkit.health.expect import Expectations
from slurmkit.health.hooks import HookEnv, run_hook
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import parse_policy
from slurmkit.health.result import Status
from slurmkit.health.runner import RunSpec, _xid_gather
from tests.conftest import needs

from .conftest import ATTACKER, USER_PYTHON, as_user

KMSG = "/dev/kmsg"

# What the attacker runs (Debian's python3, no privilege): 8 bytes of x86-64 code, mov rax,[0], written to a file
# named as the forged text, mapped PROT_READ|PROT_EXEC and called, after naming the task (PR_SET_NAME = 15).
ATTACK = r"""
import ctypes, os, sys
where, name, comm = sys.argv[1:4]
path = os.path.join(where, name)
with open(path, "wb") as f:
    f.write(bytes.fromhex("488b042500000000"))
libc = ctypes.CDLL(None, use_errno=True)
if comm:
    libc.prctl(15, comm.encode(), 0, 0, 0)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(path, os.O_RDONLY)
addr = libc.mmap(None, 4096, 0x1 | 0x4, 0x02, fd, 0)
print(os.getpid(), flush=True)
ctypes.CFUNCTYPE(None)(addr)()
"""

# (file name, comm): what each forged record claims
FORGERIES = [
    ("NVRM: Xid (PCI:0000:ee:00): 79, x", ""),  # the repro: a bus id no GPU has
    ("NVRM: Xid (PCI:0000:18:00): 79, x", "NVRM: Xid (PCI:0000:18:00)"),  # the record also starts as the driver's
    ("a\nNVRM: Xid (PCI:0000:18:00): 48, x", ""),  # a newline in the name
    ("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, x", "nvidia-nvswitch3"),
    ("mce: Uncorrected hardware memory error in user-access at 1", ""),
    ("Memory failure: 0x1: recovery action for dirty LRU page: Recovered", "Memory failure: 0x1"),
]
# the node's GPUs as NVML lists them: the forged bus ids included, so a matching bus id cannot be why none counts
NODE_GPUS = {"count": 3, "devices": [
    {"index": i, "minor": i, "pci_bus_id": b, "name": "NVIDIA H100 80GB HBM3"}
    for i, b in enumerate(("00000000:EE:00.0", "00000000:18:00.0", "00000000:C1:00.0"))]}


def _why_not() -> str | None:
    if platform.machine() != "x86_64":
        return "the forged records come from x86-64 code"
    if os.geteuid() != 0:
        return "reading /dev/kmsg and running as another user need root"
    try:
        if Path("/proc/sys/debug/exception-trace").read_text().strip() == "0":
            return "this kernel does not log user segfaults (debug.exception-trace = 0)"
        os.close(os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        return f"no kernel log here: {exc}"
    return None


pytestmark = needs(_why_not() is None, _why_not() or "")  # never skipped in CI (tests.conftest.needs)


@pytest.fixture
def attacker_dir() -> Iterator[Path]:
    """A dir only the attacker writes (pytest's basetemp is root's 0700, which the attacker cannot enter)."""
    d = Path(tempfile.mkdtemp(prefix="slurmkit-sec-kmsg-"))
    try:
        shutil.chown(d, ATTACKER)
        (d / "attack.py").write_text(ATTACK)
        (d / "attack.py").chmod(0o644)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def kernel_log() -> list[tuple[int, int, str]]:
    """(facility, seq, message) of every record in the ring buffer, read from /dev/kmsg as root with nothing of
    slurmkit's: the test's own witness that the forged records are there (Documentation/ABI/testing/dev-kmsg:
    one record per read, "prio,seq,usec,flags[,...];message\\n"; prio = facility << 3 | level)."""
    out = []
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                raw = os.read(fd, 8192)
            except BlockingIOError:
                return out
            except BrokenPipeError:
                continue  # overwritten while we read: the next read resyncs
            head, _, msg = raw.decode(errors="replace").partition(";")
            prio, seq = head.split(",")[:2]
            out.append((int(prio) >> 3, int(seq), msg.split("\n", 1)[0]))
    finally:
        os.close(fd)


def forge(where: Path, name: str, comm: str) -> tuple[int, int, str]:
    """Run the attack as the attacker and return the record it left in the kernel log. The kernel rate-limits
    segfault reports (printk_ratelimit: 10 per 5 s, for the whole machine): try again after a wait."""
    for _attempt in range(4):
        # -I: no PYTHON* variables (PYTHONFAULTHANDLER's SIGSEGV handler would keep the kernel from reporting it)
        p = as_user(ATTACKER, [USER_PYTHON, "-I", str(where / "attack.py"), str(where), name, comm], check=False)
        assert p.returncode != 0 and p.stdout.strip().isdigit(), (p.returncode, p.stdout, p.stderr)
        mark = f"[{p.stdout.strip()}]: segfault at "
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            got = [r for r in kernel_log() if mark in r[2]]
            if got:
                return got[-1]
            time.sleep(0.05)
        time.sleep(5)
    raise AssertionError(f"the kernel logged no segfault of the attacker's program for {name!r}")


def spec(tmp_path: Path, hook: str) -> RunSpec:
    """What `slurmkit check` (read-only) and the health hook (commits the cursor) gather from: the real kernel log."""
    return RunSpec(hook=hook, node="node1", policy=parse_policy({}),
                   expect=Expectations(node="node1", gpu_count=3, minors=(0, 1, 2)),
                   node_state_dir=str(tmp_path / "state"), paths=HostPaths(kmsg=KMSG),
                   deadline=time.monotonic() + 10, commit_xid=hook != "check")


def judge(scan: xid.XidScan, hook: str):
    ctx = EvalContext(hook=hook, policy=parse_policy({}).check("xid"), expect=Expectations(node="node1", gpu_count=3),
                      init=NODE_GPUS, extra={"gpu_expected": 3})
    return CHECKS["xid"].evaluate(scan, ctx), CHECKS["mce"].evaluate(scan, ctx)


def test_a_user_cannot_write_the_kernel_log_directly():
    """/dev/kmsg is root's (0644): the attacker's only way in is a record the kernel writes for them."""
    p = as_user(ATTACKER, [USER_PYTHON, "-c", f"open({KMSG!r}, 'w').write('NVRM: Xid (PCI:0000:18:00): 79, x')"],
                check=False)
    assert p.returncode != 0 and "PermissionError" in p.stderr, p.stderr


def test_a_users_segfault_records_are_no_xid_and_no_machine_check(tmp_path, attacker_dir):
    (tmp_path / "state").mkdir()
    before = _xid_gather(spec(tmp_path, "health"), frozenset(parse_policy({}).check("xid").get("codes") or ()))
    cursor = before.state.seq
    assert cursor >= 0 and json.loads((tmp_path / "state" / "xid.json").read_text())["seq"] == cursor

    forged = [forge(attacker_dir, name, comm) for name, comm in FORGERIES]
    for (facility, seq, msg), (name, comm) in zip(forged, FORGERIES, strict=True):
        # really there, as the kernel's own record (facility 0, LOG_KERN), after the cursor, holding the forged text
        # verbatim (a newline escaped as \x0a) and starting with the comm the attacker chose
        assert facility == 0 and seq > cursor, (facility, seq, msg)
        assert name.replace("\n", "\\x0a") in msg and msg.startswith((comm or "python3")[:15] + "["), msg
    last = max(seq for _, seq, _ in forged)
    codes = frozenset(parse_policy({}).check("xid").get("codes") or ())
    for hook in ("check", "health"):
        scan = _xid_gather(spec(tmp_path, hook), codes)
        assert scan.source == KMSG and scan.state.seq >= last  # read past every forged one
        assert (scan.new, scan.sticky, scan.mce) == ([], [], {}), (hook, scan.new, scan.mce)
        v_xid, v_mce = judge(scan, hook)
        assert (v_xid.status, v_mce.status) == (Status.OK, Status.OK), (v_xid.summary, v_mce.summary)
    # the health run moved the cursor past them: they are never read again
    assert json.loads((tmp_path / "state" / "xid.json").read_text())["seq"] >= last

    # the repro command, `slurmkit check` (its run_hook, without the site's inventory: a fresh state dir, so
    # it reads the whole ring buffer, this run's forged records and any earlier run's)
    rep = run_hook(HookEnv(hook="check", node="node1", state_dir=str(tmp_path / "check")))
    res = {r.name: r for r in rep.results}
    seqs = {seq for _, seq, _ in forged}
    assert not seqs & {e["seq"] for e in res["xid"].evidence.get("new", []) + res["xid"].evidence.get("sticky", [])}
    assert res["mce"].evidence.get("last") not in {msg for _, _, msg in forged}
    if not os.path.exists("/proc/driver/nvidia"):  # no GPU driver here: nothing else in the log is an XID
        assert (res["xid"].status, res["mce"].status) == (Status.OK, Status.OK), (res["xid"].summary,
                                                                                  res["mce"].summary)
        assert "xid" not in rep.reason and "mce" not in rep.reason, rep.reason


def test_the_drivers_own_records_still_count_through_the_same_reader(tmp_path):
    """The same reader and check over the drivers' formats (tests/data/kmsg/records.json), as /dev/kmsg gives
    them: the XID on a GPU of this node, the fatal SXid and the machine checks count."""
    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "kmsg" / "records.json").read_text())
    recs: list = []
    for i, r in enumerate([data["driver"][0], data["driver"][7], *data["mce"][:3]]):
        raw = r["raw"].replace("0000:5d:00", "0000:18:00")  # on one of this node's GPUs
        (tmp_path / f"r{i}").write_bytes(raw.encode())
        recs += xid.read_kmsg(str(tmp_path / f"r{i}"))
    scan = xid.scan(recs, xid.XidState(), "boot", frozenset(parse_policy({}).check("xid").get("codes") or ()), KMSG)
    v_xid, v_mce = judge(scan, "health")
    assert v_xid.status == Status.FAIL and v_xid.findings == ["gpu1 xid79", "nvswitch0000:c1:00 sxid20034"]
    assert v_mce.status == Status.FAIL and v_mce.findings == ["mce uncorrected=2"]
