"""XID errors from the kernel log, with a cursor in the state dir: an old XID never drains twice, a new one is never
missed, and a critical one stays failed until the node reboots or an admin clears it.

Source: /dev/kmsg (one record per read: ``prio,seq,usec,flags;message``); its sequence numbers restart at boot, so
the cursor is (boot_id, seq). Reading /dev/kmsg needs root, as slurmd's hooks are. Under the fake NVML the records
come from the fixture's ``kmsg`` list instead, so a lab node's XID is injected in the same JSON as its GPU state.

Only the drivers' own records count (issue 32 item 1). The kernel log holds text any user chooses: a segfault
record ends with the faulting program's mapped file name, verbatim ("python3[7]: segfault at 0 ip ... error 4 in
NVRM: Xid (PCI:0000:ee:00): 79, x[...]"), and a file name may hold spaces, colons and parentheses; its first
15 bytes can be the task's comm, which a user sets (PR_SET_NAME). So:

- each pattern must match at the start of the record's message, whole: the text a driver's format string
  starts with (``NVRM: Xid (PCI:...): <code>, ``; ``nvidia-nvswitch<N>: SXid (PCI:...): <code>, Fatal``; the
  ``mce: `` and ``Memory failure: `` pr_fmt prefixes), never a search inside it. A comm is 15 bytes and is
  followed by ``[pid]``, so no prefix of a user's choosing can complete a pattern;
- the record's facility (the /dev/kmsg prefix's prio >> 3) must be 0, the kernel's own: a line written to
  /dev/kmsg (root only, mode 0644) is stored with LOG_USER unless the writer names a non-zero facility, never 0
  (Documentation/ABI/testing/dev-kmsg; kernel/printk/printk.c devkmsg_write keeps LOG_USER for a prefix
  without a facility, so that kernel records and injected ones can always be told apart);
- only the message before the first newline is read: /dev/kmsg escapes a newline inside a message as ``\\x0a``
  (msg_add_ext_text), and what follows the real one is the record's dictionary (`` SUBSYSTEM=...``).

An XID whose bus id is none of the node's GPUs is judged by the xid check (checks.eval_xid): a WARN naming the
bus id, never a drain.

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
from typing import Any, NamedTuple

# The drivers' own formats, each matched at the start of the record's message (re.match, never search):
# NVIDIA open-gpu-kernel-modules 595.45.04 src/nvidia/src/kernel/gpu/rc/kernel_rc.c XID_PRINT_WITH_ATTR:
#   "NVRM: Xid (" attr "): %d, pid=%s, name=%s, %s%s\n" (or "NVRM: Xid (" attr "): %d, %s%s\n" without a process),
#   attr "PCI:%04x:%02x:%02x", with " GPU-I:%02u" and " GPU-CI:%02u" when a MIG instance is attributed, e.g.
#   NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
#   NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
# kernel-open/nvidia/os-interface.c nv_printf prints it with KERN_CONT: /dev/kmsg shows the flag 'c' on the
# driver's own records, so the flag says nothing about who wrote the text.
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F])?"
                     r"(?: GPU-I:\d+(?: GPU-CI:\d+)?)?\): (\d+), ")
# NVSwitch errors (NVIDIA Fabric Manager user guide, "NVSwitch errors"/SXid): the nvidia-nvswitch driver logs
# nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 30 LTSSM Fault Up
# nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 28 egress non-posted PRIV error (First)
# (open-gpu-kernel-modules src/common/nvswitch/kernel/inc/common_nvswitch.h NVSWITCH_PRINT_SXID:
# "nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " _fmt, device name "nvswitch%d", NVLINK_PCI_DEV_FMT
# "%04x:%02x:%02x.%x"; intr_nvswitch.h's _fmt strings begin "Fatal, " or "Non-fatal, "; printed with KERN_ERR).
# A fatal SXid leaves the NVSwitch (and every GPU's NVLink through it) unusable until reset: sticky like a
# critical XID; a non-fatal one is a WARN.
_SXID_RE = re.compile(r"nvidia-nvswitch\d+: SXid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\): "
                      r"(\d+), (?i:(Non-fatal|Fatal))")
MAX_STICKY = 64  # a GPU spamming XIDs must not grow the state file without bound

# Host machine checks in the same kernel log (the hooks read it once, with one cursor). Linux x86
# arch/x86/kernel/cpu/mce/core.c (pr_fmt "mce: ", HW_ERR "[Hardware Error]: "): a corrected error the kernel
# logged prints "mce: [Hardware Error]: Machine check events logged" (mce_notify_irq, mce_log), an uncorrected
# memory error a task consumed "mce: Uncorrected hardware memory error in user-access at <addr>" (kill_me_maybe);
# mm/memory-failure.c prints "Memory failure: 0x<pfn>: recovery action for ..." (pr_fmt "Memory failure: ") when a
# page is poisoned and taken out. An EDAC driver (the edac check) counts memory errors where one is loaded; these
# lines are what a host without one still shows (LBNL NHC's check_hw_mcelog asks mcelog for the same events).
# Matched at the start of the message, like the driver lines above.
_MCE_CORRECTED_RE = re.compile(r"mce: \[Hardware Error\]: Machine check events logged\b")
# Only memory_failure()'s verdict on a poisoned page ("recovery action for <page type>: <result>", action_result)
# counts: soft-offlining, the kernel's answer to *corrected* errors, prints under the same prefix ("page migration
# failed", "page was already unpoisoned") and is no uncorrected error.
_MCE_UNCORRECTED_RE = re.compile(r"Memory failure: 0x[0-9a-f]+: recovery action for |"
                                 r"mce: Uncorrected hardware memory error in user-access at ")

LOG_KERN = 0  # the kernel's syslog facility: the only one its own printk records carry


class Record(NamedTuple):
    """One kernel-log record: its sequence number, its message (the text before the first newline) and its
    syslog facility (the /dev/kmsg prefix's prio >> 3; 0 is the kernel's own)."""

    seq: int
    msg: str
    facility: int = LOG_KERN


def kernels_own(rec: Record) -> bool:
    return rec.facility == LOG_KERN


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


def parse_record(seq: int, msg: str, facility: int = LOG_KERN) -> XidEvent | None:
    """The XID or SXid a driver's own record reports; None for every other record (see the module doc)."""
    if facility != LOG_KERN:
        return None
    m = _XID_RE.match(msg)
    if m:
        bus = norm_bus_id(f"{m.group(1)}:{m.group(2)}:{m.group(3)}")
        return XidEvent(seq=seq, xid=int(m.group(4)), bus_id=bus, text=msg.strip()[:200])
    m = _SXID_RE.match(msg)
    if m:
        bus = norm_bus_id(f"{m.group(1)}:{m.group(2)}:{m.group(3)}")
        return XidEvent(seq=seq, xid=int(m.group(4)), bus_id=bus, text=msg.strip()[:200], kind="sxid",
                        fatal=m.group(5).lower() == "fatal")
    return None


def _still_counts(sticky: dict[str, Any]) -> bool:
    """A sticky XID kept by a slurmkit that searched the whole message (before issue 32) is judged again by its
    text: one a user's segfault record forged starts with that record's comm, not with the driver's text, and is
    dropped, so a node it drained resumes without `--clear-xid`. An entry without its text is kept."""
    text = sticky.get("text")
    return not isinstance(text, str) or parse_record(0, text) is not None


def is_critical(e: XidEvent, fail_codes: frozenset[int]) -> bool:
    return e.fatal if e.kind == "sxid" else e.xid in fail_codes


def read_kmsg(path: str = "/dev/kmsg", after: int = -1, max_records: int = 200_000) -> list[Record]:
    """All records with seq > ``after`` still in the ring buffer. Non-blocking; EPIPE (overwritten) is skipped.

    The prefix is ``prio,seq,usec,flags[,more...];`` (Documentation/ABI/testing/dev-kmsg: readers ignore values
    they do not know, like CONFIG_PRINTK_CALLER's ``caller=T1``); prio is facility << 3 | level."""
    out: list[Record] = []
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
                prio, seq = int(parts[0]), int(parts[1])
            except (IndexError, ValueError):
                continue
            if seq > after:
                out.append(Record(seq, msg.split("\n", 1)[0], prio >> 3))
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


def scan(records: list[Record], state: XidState, boot_id: str, fail_codes: frozenset[int],
         source: str) -> XidScan:
    """Pure: apply new kernel-log records to the cursor state. Records of another facility than the kernel's move
    the cursor and count for nothing."""
    if state.boot_id != boot_id:
        state = XidState(boot_id=boot_id)  # reboot: sequence numbers restarted and a reboot clears GPU faults
    new = [e for r in records if r.seq > state.seq and (e := parse_record(*r)) is not None]
    last = max((r.seq for r in records), default=state.seq)
    sticky = [s for s in state.sticky if _still_counts(s)]
    known = {(s["seq"], s["xid"]) for s in sticky}
    for e in new:
        if is_critical(e, fail_codes) and (e.seq, e.xid) not in known:
            sticky.append(e.to_json())
    sticky = sticky[-MAX_STICKY:]
    mce = dict(state.mce)
    for r in records:
        if r.seq <= state.seq or not kernels_own(r):
            continue
        msg = r.msg
        for kind, rx in (("corrected", _MCE_CORRECTED_RE), ("uncorrected", _MCE_UNCORRECTED_RE)):
            if rx.match(msg):
                mce[kind] = int(mce.get(kind, 0)) + 1
                if kind == "uncorrected" or "last" not in mce:
                    mce["last"] = msg.strip()[:200]
    return XidScan(new=new, sticky=sticky, state=XidState(boot_id=boot_id, seq=max(last, state.seq), sticky=sticky,
                                                          mce=mce), source=source)
