"""Pure parsers for the Slurm config files slurmkit writes (and hand-written ones in the same syntax).

Only what validation, diff and drift need: ``Key=Value`` records with their line numbers, Slurm's
case-insensitive keys, ``NodeName=DEFAULT`` inheritance, GRES strings, core lists. No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from slurmkit import hostlist
from slurmkit.hostlist import expand_ints


@dataclass(frozen=True)
class Record:
    """One non-comment line: ``pairs`` keep the original key spelling and order."""

    file: str
    lineno: int
    pairs: tuple[tuple[str, str], ...]

    @property
    def kind(self) -> str:
        """The first key, lower case: ``nodename``, ``partitionname``, ``selecttype`` ..."""
        return self.pairs[0][0].lower() if self.pairs else ""

    @property
    def head(self) -> str:
        return self.pairs[0][1] if self.pairs else ""

    def get(self, key: str, default: str | None = None) -> str | None:
        k = key.lower()
        for kk, v in reversed(self.pairs):
            if kk.lower() == k:
                return v
        return default

    def as_dict(self) -> dict[str, str]:
        """Lower-case key -> value (last wins), without the first (naming) key."""
        return {k.lower(): v for k, v in self.pairs[1:]}

    @property
    def where(self) -> str:
        return f"{self.file}:{self.lineno}"


def _tokens(line: str) -> Iterator[str]:
    """Split on whitespace outside double quotes; quotes are removed (Slurm allows ``Key="a b"``)."""
    buf: list[str] = []
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
            continue
        if ch.isspace() and not quoted:
            if buf:
                yield "".join(buf)
                buf = []
            continue
        buf.append(ch)
    if buf:
        yield "".join(buf)


def parse_records(text: str, file: str = "slurm.conf") -> list[Record]:
    out = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = []
        for tok in _tokens(line):
            k, sep, v = tok.partition("=")
            pairs.append((k, v) if sep else (k, ""))
        out.append(Record(file, i, tuple(pairs)))
    return out


@dataclass
class SlurmConf:
    """slurm.conf split into global settings (lower-case key -> (Key, value, record)) and stanzas."""

    settings: dict[str, tuple[str, str, Record]] = field(default_factory=dict)
    controllers: list[str] = field(default_factory=list)
    nodes: list[Record] = field(default_factory=list)  # NodeName lines, DEFAULT values merged in
    nodesets: list[Record] = field(default_factory=list)
    partitions: list[Record] = field(default_factory=list)
    includes: list[Record] = field(default_factory=list)

    def value(self, key: str, default: str = "") -> str:
        item = self.settings.get(key.lower())
        return item[1] if item else default


def parse_slurm_conf(text: str, file: str = "slurm.conf") -> SlurmConf:
    conf = SlurmConf()
    node_default: list[tuple[str, str]] = []
    part_default: list[tuple[str, str]] = []
    for rec in parse_records(text, file):
        kind = rec.kind
        if kind == "nodename":
            if rec.head.upper() == "DEFAULT":
                node_default = _overlay(node_default, rec.pairs[1:])
                continue
            conf.nodes.append(Record(rec.file, rec.lineno, (rec.pairs[0], *_overlay(node_default, rec.pairs[1:]))))
        elif kind == "partitionname":
            if rec.head.upper() == "DEFAULT":
                part_default = _overlay(part_default, rec.pairs[1:])
                continue
            conf.partitions.append(Record(rec.file, rec.lineno, (rec.pairs[0], *_overlay(part_default, rec.pairs[1:]))))
        elif kind == "nodeset":
            conf.nodesets.append(rec)
        elif kind == "include":
            conf.includes.append(rec)
        elif kind == "slurmctldhost":
            conf.controllers.append(rec.head)
            conf.settings[kind] = (rec.pairs[0][0], rec.head, rec)
        else:
            for k, v in rec.pairs:
                conf.settings[k.lower()] = (k, v, rec)
    return conf


def _overlay(base: list[tuple[str, str]] | tuple[tuple[str, str], ...], extra: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    d = {k.lower(): (k, v) for k, v in base}
    for k, v in extra:
        d[k.lower()] = (k, v)
    return list(d.values())


def parse_settings(text: str, file: str) -> dict[str, tuple[str, str, Record]]:
    """cgroup.conf-style files: one or more ``Key=Value`` per line, last wins."""
    out: dict[str, tuple[str, str, Record]] = {}
    for rec in parse_records(text, file):
        for k, v in rec.pairs:
            out[k.lower()] = (k, v, rec)
    return out


_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def parse_count(text: str) -> int:
    """GRES counts accept K/M/G/T/P suffixes (powers of 1024)."""
    t = text.strip().lower()
    if t and t[-1] in _SUFFIX:
        return int(t[:-1]) * _SUFFIX[t[-1]]
    return int(t)


def parse_gres(spec: str) -> dict[tuple[str, str], int]:
    """``gpu:h100:8,shard:64`` -> ``{("gpu", "h100"): 8, ("shard", ""): 64}``; ``gpu`` alone counts 1.

    Flags (``:no_consume``) are ignored. Raises ValueError on a malformed entry.
    """
    out: dict[tuple[str, str], int] = {}
    if not spec or spec.lower() == "(null)":
        return out
    for item in spec.split(","):
        item = re.sub(r"\(.*\)$", "", item.strip())  # scontrol's gpu:h100:8(S:0-1)
        if not item:
            continue
        parts = [p for p in item.split(":") if p.lower() != "no_consume"]
        name = parts[0]
        gtype, count = "", 1
        if len(parts) == 2:
            if re.fullmatch(r"\d+[kKmMgGtTpP]?", parts[1]):
                count = parse_count(parts[1])
            else:
                gtype = parts[1]
        elif len(parts) >= 3:
            gtype, count = parts[1], parse_count(parts[2])
        out[(name, gtype)] = out.get((name, gtype), 0) + count
    return out


def gres_totals(gres: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Per GRES name, the total over types (an untyped ``gpu:8`` and typed lines compare on this)."""
    out: dict[str, int] = {}
    for (name, _t), n in gres.items():
        out[name] = out.get(name, 0) + n
    return out


def expand_files(spec: str) -> list[str]:
    """``/dev/nvidia[0-3],/dev/nvidia7`` -> paths (hostlist syntax, which gres.conf uses for File=)."""
    return hostlist.expand(spec, "File")


def header_version(text: str) -> str | None:
    """The target release slurmkit wrote into its header (``# target: Slurm 24.11``), if any."""
    m = re.search(r"^# target: Slurm (\d{2}\.\d{2})", text, re.M)
    return m.group(1) if m else None


def node_names(conf: SlurmConf) -> dict[str, Record]:
    """Every node name -> its NodeName record."""
    out: dict[str, Record] = {}
    for rec in conf.nodes:
        for h in hostlist.expand(rec.head, rec.where):
            out.setdefault(h, rec)
    return out


__all__ = [
    "Record", "SlurmConf", "parse_records", "parse_slurm_conf", "parse_settings", "parse_gres", "gres_totals",
    "parse_count", "expand_ints", "expand_files", "header_version", "node_names",
]
