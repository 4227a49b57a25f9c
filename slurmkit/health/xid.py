"""XID errors from the kernel log, with a cursor in the state dir: an old XID never drains twice, a new one is never
missed, and a critical one stays failed until the node reboots or an admin clears it.

Source: /dev/kmsg (one record per read: ``prio,seq,usec,flags;message``); its sequence numbers restart at boot, so
the cursor is (boot_id, seq). Reading /dev/kmsg needs root, as slurmd's hooks are. Under the fake NVML the records
come from the fixture's ``kmsg`` list instead, so a lab node's XID is injected in the same JSON as its GPU state.

Why sticky: an XID is an event, not a state. If the prolog consumed an XID 79 and drained the node, the health check
would see no *new* XID and resume the node after N passes. Critical XIDs are kept in the state file until
``boot_id`` changes or ``slurmkit check --clear-xid``.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

# NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\): (\d+)(.*)")
# NVSwitch errors (NVIDIA Fabric Manager user guide, "NVSwitch errors"/SXid): the nvidia-nvswitch driver logs
# nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 30 LTSSM Fault Up
# nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 28 egress non-posted PRIV error (First)
# A fatal SXid leaves the NVSwitch (and every GPU's NVLink through it) unusable until reset: sticky like a
# critical XID; a non-fatal one is a WARN.
_SXID_RE = re.compile(r"SXid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\): (\d+), "
                      r"(Non-fatal|Fatal)", re.IGNORECASE)
MAX_STICKY = 64  # a GPU spamming XIDs must not grow the state file without bound

# Host machine checks in the same kernel log (the hooks read it once, with one cursor). Linux x86
# arch/x86/kernel/cpu/mce/core.c: a corrected error the kernel logged prints "mce: [Hardware Error]: Machine check
# events logged" (mce_notify_irq; pr_fmt "mce: ", HW_ERR "[Hardware Error]: "), an uncorrected memory error a task
# consumed "mce: Uncorrected hardware memory error in user-access at ..." (kill_me_maybe); mm/memory-failure.c
# prints "Memory failure: 0x<pfn>: recovery action for ..." (pr_fmt "Memory failure: ") when a page is poisoned and
# taken out. An EDAC driver (the edac check) counts memory errors where one is loaded; these lines are what a host
# without one still shows (LBNL NHC's check_hw_mcelog asks mcelog for the same events).
_MCE_CORRECTED_RE = re.compile(r"\bMachine check events logged\b")
# Only memory_failure()'s verdict on a poisoned page ("recovery action for <page type>: <result>", action_result)
# counts: soft-offlining, the kernel's answer to *corrected* errors, prints under the same prefix ("page migration
# failed", "page was already unpoisoned") and is no uncorrected error.
_MCE_UNCORRECTED_RE = re.compile(r"^Memory failure: 0x[0-9a-f]+: recovery action for |"
                                 r"\bUncorrected hardware memory error\b")


def norm_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` and ``0000:18:00`` -> ``0000:18:00`` (domain:bus:device, lower case)."""
    m = re.match(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id or "")
    if not m:
        return ""
    return f"{int(m.group(1), 16):04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}"


@dataclass(frozen=True)
class XidEvent:
    seq: int
    xid: int
    bus_id: str  # normalised
    text: str
    kind: str = "xid"  # "xid" (a GPU's) or "sxid" (an NVSwitch's)
    fatal: bool = False  # sxid only: the driver said Fatal

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seq": self.seq, "xid": self.xid, "bus_id": self.bus_id, "text": self.text}
        if self.kind != "xid":
            d.update(kind=self.kind, fatal=self.fatal)
        return d


def parse_record(seq: int, msg: str) -> XidEvent | None:
    m = _XID_RE.search(msg)
    if m:
        bus = norm_bus_id(f"{m.group(1)}:{m.group(2)}:{m.group(3)}")
        return XidEvent(seq=seq, xid=int(m.group(4)), bus_id=bus, text=msg.strip()[:200])
    m = _SXID_RE.search(msg)
    if m:
        bus = norm_bus_id(f"{m.group(1)}:{m.group(2)}:{m.group(3)}")
        return XidEvent(seq=seq, xid=int(m.group(4)), bus_id=bus, text=msg.strip()[:200], kind="sxid",
                        fatal=m.group(5).lower() == "fatal")
    return None


def is_critical(e: XidEvent, fail_codes: frozenset[int]) -> bool:
    return e.fatal if e.kind == "sxid" else e.xid in fail_codes


def read_kmsg(path: str = "/dev/kmsg", after: int = -1, max_records: int = 200_000) -> list[tuple[int, str]]:
    """All records with seq > ``after`` still in the ring buffer. Non-blocking; EPIPE (overwritten) is skipped."""
    out: list[tuple[int, str]] = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        for _ in range(max_records):
            try:
                raw = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:
                    continue  # the record we were about to read was overwritten; the next read resyncs
                raise
            if not raw:
                break
            head, _, msg = raw.decode(errors="replace").partition(";")
            parts = head.split(",")
            try:
                seq = int(parts[1])
            except (IndexError, ValueError):
                continue
            if seq > after:
                out.append((seq, msg.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return out


def read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class XidState:
    boot_id: str = ""
    seq: int = -1
    sticky: list[dict[str, Any]] = field(default_factory=list)  # critical XIDs seen this boot, not yet cleared
    # host machine-check lines seen this boot: {"corrected": n, "uncorrected": n, "last": text}
    mce: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> XidState:
        try:
            with open(path) as f:
                d = json.load(f)
            mce = d.get("mce") if isinstance(d.get("mce"), dict) else {}
            return cls(boot_id=str(d.get("boot_id", "")), seq=int(d.get("seq", -1)), sticky=list(d.get("sticky", [])),
                       mce=mce)
        except (OSError, ValueError, TypeError):
            return cls()  # no cursor yet (or a corrupt one): read the whole ring buffer again, duplicates are de-duped

    def to_json(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "seq": self.seq, "sticky": self.sticky, **({"mce": self.mce} if self.mce else {})}


@dataclass
class XidScan:
    new: list[XidEvent]  # since the cursor
    sticky: list[dict[str, Any]]  # critical ones still standing (includes the new critical ones)
    state: XidState  # what to persist if the caller commits
    source: str
    commit_error: str | None = None  # the cursor could not be saved (state dir read-only/full): bookkeeping only

    @property
    def mce(self) -> dict[str, Any]:
        """Host machine checks this boot (the mce check)."""
        return self.state.mce


def scan(records: list[tuple[int, str]], state: XidState, boot_id: str, fail_codes: frozenset[int],
         source: str) -> XidScan:
    """Pure: apply new kernel-log records to the cursor state."""
    if state.boot_id != boot_id:
        state = XidState(boot_id=boot_id)  # reboot: sequence numbers restarted and a reboot clears GPU faults
    new = [e for seq, msg in records if seq > state.seq and (e := parse_record(seq, msg)) is not None]
    last = max((seq for seq, _ in records), default=state.seq)
    sticky = list(state.sticky)
    known = {(s["seq"], s["xid"]) for s in sticky}
    for e in new:
        if is_critical(e, fail_codes) and (e.seq, e.xid) not in known:
            sticky.append(e.to_json())
    sticky = sticky[-MAX_STICKY:]
    mce = dict(state.mce)
    for seq, msg in records:
        if seq <= state.seq:
            continue
        for kind, rx in (("corrected", _MCE_CORRECTED_RE), ("uncorrected", _MCE_UNCORRECTED_RE)):
            if rx.search(msg):
                mce[kind] = int(mce.get(kind, 0)) + 1
                if kind == "uncorrected" or "last" not in mce:
                    mce["last"] = msg.strip()[:200]
    return XidScan(new=new, sticky=sticky, state=XidState(boot_id=boot_id, seq=max(last, state.seq), sticky=sticky,
                                                          mce=mce), source=source)
