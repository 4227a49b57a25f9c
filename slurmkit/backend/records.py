"""``scontrol -o`` records and Slurm state strings: pure, dependency-free (the prolog imports this on its hot path).

Shared by the backend parsers and the health hooks so that both read a node the same way.
"""

from __future__ import annotations

import re

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
# scontrol stamps a reason it shows with " [user@2026-11-30T01:37:00]"
_STAMP = re.compile(r"\s*\[[^\]\s]*@\d{4}-\d\d-\d\dT[\d:]+\]")
# Free-text fields whose value may itself contain " key=" (an admin's reason, ours: "recovery=reboot").
_FREE_TEXT = ("Reason",)


def parse_oneline(line: str) -> dict[str, str]:
    """One ``scontrol -o show node|job|partition`` record -> {Key: value}.

    Values may contain spaces, so a value runs until the next `` Key=`` token; a free-text field (Reason=) runs
    to the end of its ``[user@time]`` stamp (or, in a node record, where it is the last field, to the end of the
    line), whatever ``=`` it contains.
    """
    line = line.strip()
    out: dict[str, str] = {}
    for key in _FREE_TEXT:
        m = re.search(rf"(?:^|\s){key}=", line)
        if not m:
            continue
        rest = line[m.end():]
        stamp = _STAMP.search(rest)
        if stamp:
            end = stamp.end()
        elif line.startswith("NodeName="):  # a node's Reason is its record's last field
            end = len(rest)
        else:  # a job's Reason= is a single token (None, Resources, ...): the generic split below handles it
            continue
        out[key] = rest[:end].strip()
        line = (line[:m.start()] + " " + rest[end:]).strip()
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def strip_reason_stamp(reason: str) -> str:
    """Drop scontrol's trailing `` [user@time]`` to compare a reason with what was set."""
    return _STAMP.sub("", reason).strip() if _STAMP.search(reason) else reason.strip()


_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
                 "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "!": "POWER_DOWN", "^": "REBOOT_ISSUED", "-": "PLANNED"}
# sinfo's short and compound state names
_COMPOUND = {"DRAINED": ("IDLE", "DRAIN"), "DRAINING": ("ALLOCATED", "DRAIN"), "DRAIN": ("IDLE", "DRAIN"),
             "DRNG": ("ALLOCATED", "DRAIN"), "ALLOC": ("ALLOCATED", None), "MIX": ("MIXED", None),
             "COMP": ("COMPLETING", None), "MAINT": ("MAINT", None)}


def split_state(state: str) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` / ``DOWN*+DRAIN`` / ``idle*`` / ``drained`` / ``mix-`` -> (base, flags).

    sinfo/scontrol mark flags with a suffix on the base (``*`` not responding, ``~`` powered down, ...) and
    join further flags with ``+``; the suffix may sit on any part (``DOWN*+DRAIN``).
    """
    flags: set[str] = set()
    parts = []
    for part in state.strip().split("+"):
        while part and part[-1] in _SUFFIX_FLAGS:
            flags.add(_SUFFIX_FLAGS[part[-1]])
            part = part[:-1]
        if part:
            parts.append(part.upper())
    if not parts:
        return "unknown", frozenset(flags)
    base = parts[0]
    flags.update(parts[1:])
    if base in _COMPOUND:
        base, flag = _COMPOUND[base]
        if flag:
            flags.add(flag)
    return base.lower(), frozenset(flags)
