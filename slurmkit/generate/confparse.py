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

# Slurm's whitespace: [[:space:]] in the C locale (isspace()), not Python's Unicode \s
_WS = " \t\n\r\f\v"
# src/common/parse_config.c keyvalue_pattern (identical at slurm-22-05-8-1 and slurm-24-11-5-1):
#   "^[[:space:]]*([[:alnum:]_.]+)[[:space:]]*([-*+/]?)=[[:space:]]*((\"([^\"]*)\")|([^[:space:]]+))([[:space:]]|$)"
# A quoted value keeps its spaces and loses its quotes; an unquoted value runs to the next whitespace (so
# ``A="a b"c`` reads A as ``"a``, as glibc's regexec does); ``Key = value`` is the same as ``Key=value``.
_KV = re.compile(
    rf'[{_WS}]*([A-Za-z0-9_.]+)[{_WS}]*([-*+/]?)=[{_WS}]*(?:"([^"]*)"(?=[{_WS}]|\Z)|([^{_WS}]+)(?=[{_WS}]|\Z))')


@dataclass(frozen=True)
class Record:
    """One logical line (comments, continuations and escapes resolved as Slurm does): ``pairs`` keep the original
    key spelling and order; ``quoted[i]`` says pair i was written in double quotes; ``leftover`` is what Slurm's
    key=value pattern could not read (non-empty: "Parse error in file F line N"); ``include`` marks an
    ``Include FILE`` directive (pairs then hold ``("Include", FILE)``)."""

    file: str
    lineno: int
    pairs: tuple[tuple[str, str], ...]
    quoted: tuple[bool, ...] = ()
    leftover: str = ""
    include: bool = False
    ops: tuple[str, ...] = ()  # "", "+", "-", "*", "/" per pair (``Key+=value``; parse_config.c S_P_OPERATOR_*)

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

    def render(self, pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]] | None = None) -> str:
        """The line as Slurm reads it back identically: quoted values stay quoted (parse_config.c takes a
        value with whitespace only in quotes), a value Slurm would read differently unquoted gets quotes."""
        if self.include:
            return f"Include {self.head}"
        quoted = dict(zip((k for k, _ in self.pairs), self.quoted, strict=False))
        return " ".join(f"{k}={quote(v, quoted.get(k, False))}" for k, v in (self.pairs if pairs is None else pairs))


def quote(value: str, quoted: bool = False) -> str:
    # escapes are read before quotes (_get_next_line strips comments, then escapes), so # and \ are escaped
    value = value.replace("\\", "\\\\").replace("#", "\\#")
    if quoted or value == "" or any(c in _WS for c in value):
        return f'"{value}"'
    return value


def _strip_comment(line: str) -> str:
    """parse_config.c _strip_comments(): everything from a ``#`` preceded by an even number of backslashes."""
    if "#" not in line:
        return line
    bs = 0
    for i, ch in enumerate(line):
        if ch == "#" and bs % 2 == 0:
            return line[:i]
        bs = bs + 1 if ch == "\\" else 0
    return line


def _continuation_cut(line: str) -> int | None:
    """parse_config.c _strip_continuation(): an odd run of backslashes at the end (trailing whitespace allowed
    after it) continues the line; -> index where the last backslash is cut, else None."""
    j, bs = len(line) - 1, 0
    while j >= 0:
        ch = line[j]
        if ch == "\\":
            bs += 1
        elif ch in _WS and bs == 0:
            pass
        else:
            break
        j -= 1
    return j + bs if bs % 2 == 1 else None


def _strip_escapes(line: str) -> str:
    """parse_config.c _strip_escapes(): a backslash escapes the next character (``\\#`` -> ``#``, ``\\\\`` -> ``\\``)."""
    if "\\" not in line:
        return line
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 1
            if i >= len(line):
                break
        out.append(line[i])
        i += 1
    return "".join(out)


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, logical line) as parse_config.c _get_next_line() builds them: comments
    stripped per physical line, continued lines joined, escapes removed; lines are split on ``\\n`` only (fgets)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    buf, start = "", 0
    for no, raw in enumerate(lines, 1):
        if not buf and not start:
            start = no
        s = _strip_comment(raw)
        cut = _continuation_cut(s)
        if cut is not None:
            buf += s[:cut]
            continue
        yield start, _strip_escapes(buf + s)
        buf, start = "", 0
    if start:
        yield start, _strip_escapes(buf)


def split_line(line: str) -> tuple[list[tuple[str, str]], list[bool], list[str], str]:
    """Every ``Key=value`` Slurm's pattern reads from the start of ``line``, as s_p_parse_line() loops over it:
    -> (pairs, quoted flags, operators, the unread rest)."""
    pairs: list[tuple[str, str]] = []
    quoted: list[bool] = []
    ops: list[str] = []
    pos = 0
    while True:
        m = _KV.match(line, pos)
        if not m:
            break
        pairs.append((m.group(1), m.group(3) if m.group(3) is not None else m.group(4)))
        quoted.append(m.group(3) is not None)
        ops.append(m.group(2))
        pos = m.end()
    return pairs, quoted, ops, line[pos:]


def _include_target(line: str) -> str | None:
    """parse_config.c _parse_include_directive(): the line itself (not left-stripped) starts with ``include`` in
    any case, then whitespace, then the file name up to the next whitespace."""
    if line[:7].lower() != "include" or len(line) < 8 or line[7] not in _WS:
        return None
    rest = line[7:].lstrip(_WS)
    name = rest
    for i, ch in enumerate(rest):
        if ch in _WS:
            name = rest[:i]
            break
    return name


def parse_records(text: str, file: str = "slurm.conf") -> list[Record]:
    """Every non-empty logical line of one file as a Record (Include directives are records, not followed)."""
    out = []
    for lineno, line in logical_lines(text):
        if not line.strip(_WS):
            continue
        target = _include_target(line)
        if target is not None:
            rest = line[7:].lstrip(_WS)[len(target):]
            out.append(Record(file, lineno, (("Include", target),), (False,), rest.strip(_WS), True, ("",)))
            continue
        pairs, quoted, ops, rest = split_line(line)
        out.append(Record(file, lineno, tuple(pairs), tuple(quoted), rest.strip(_WS), False, tuple(ops)))
    return out


# slurm.conf keys whose handler reads the rest of the line (src/common/read_config.c slurm_conf_options[],
# S_P_ARRAY with a line handler, 22.05-25.11): every other key is alone on its line, and anything after its value
# is "Parse error in file ... line N" (parse_config.c s_p_parse_file), fatal to slurm.conf's readers.
LINE_KEYS = frozenset({"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "slurmctldhost"})
# gres.conf: Name and NodeName read the rest of the line (src/interfaces/gres.c, 22.05 src/common/gres.c)
GRES_LINE_KEYS = frozenset({"name", "nodename"})


def include_beside_including_file(release: str | None) -> bool:
    """Where a relative ``Include`` name is looked for. Through 22.05 beside the file that holds the Include line:
    parse_config.c _parse_include_directive() calls _add_full_path(file_name, slurm_conf_path), which joins the name
    to the directory of ``slurm_conf_path``, and s_p_parse_file() passes the file it is reading (slurm-22-05-8-1).
    From 23.02 beside slurm.conf, wherever the Include line is: SchedMD commit d890058691 ("Use
    get_extra_conf_path() instead of _add_full_path()", first in slurm-23-02-0-0rc1) and read_config.c
    get_extra_conf_path() ("Replace file name on end of path" of $SLURM_CONF; absolute paths as is), unchanged at
    slurm-24-11-5-1 and slurm-26-05-3-1. The two differ only for an Include inside a file of another directory
    (``Include pcluster/a.conf`` whose a.conf says ``Include b.conf``: pcluster/b.conf on 22.05, b.conf later); the
    real scontrol of 22.05.8, 24.11.5 and 26.05.5 reads them so (tests/integration/test_conf_include_lab.py)."""
    if not release:
        return False
    m = re.search(r"(\d{2})\.(\d{2})", release)
    return m is not None and (int(m.group(1)), int(m.group(2))) < (23, 2)


def resolve_include(name: str, cluster_name: str = "", including: str = "slurm.conf", release: str | None = None) -> str:
    """The name an Include refers to in a config set: parse_config.c _parse_for_format() replaces ``%c`` by the
    lower-case ClusterName read so far; an absolute path is kept; a relative one is read beside slurm.conf (23.02+)
    or, through 22.05, beside ``including``, the file (by its name in the set) that holds the Include line
    (``include_beside_including_file``)."""
    name = name.replace("%c", cluster_name.lower())
    if name.startswith("/") or not include_beside_including_file(release) or "/" not in including:
        return name
    # _add_full_path(): the including file's path up to its last '/', then '/', then the name (no normalising)
    return including.rsplit("/", 1)[0] + "/" + name


def expand_includes(text: str, file: str, files: Mapping[str, str] | None = None,
                    problems: list[str] | None = None, cluster_name: str = "",
                    line_keys: frozenset[str] = LINE_KEYS, _depth: int = 0, release: str | None = None) -> list[Record]:
    """The records of ``text`` with every ``Include`` replaced by the included file's records (recursively), as
    s_p_parse_file() reads them. ``files`` maps the name as resolved (``resolve_include``: relative to slurm.conf's
    directory, through 22.05 to the including file's, or the absolute path) to its text. Problems Slurm reports (and
    fails the file for) are appended to ``problems``. ``release``: the site's (only 22.05's relative Include
    differs)."""
    probs = problems if problems is not None else []
    out: list[Record] = []
    for rec in parse_records(text, file):
        if rec.include:
            name = resolve_include(rec.head, cluster_name, file, release)
            if "%c" in rec.head and not cluster_name:
                probs.append(f"{rec.where}: Include {rec.head}: no ClusterName before it for %c (Include failed: fatal)")
            elif "*" in name:
                # no release reads a glob: through 23.02 the name is stat()ed as written (s_p_parse_file retries 60 s,
                # then the Include fails); from 23.11 parse_config.c _parse_include_directive() logs "Slurm does not
                # support glob parsing. %s from %s will be skipped over" and fails the Include (slurm-23-11-10-1,
                # slurm-24-11-5-1, slurm-26-05-3-1: fatal "Unable to process configuration file" from scontrol 24.11.5
                # and 26.05.5); DebugFlags=GLOB_SILENCE only quiets it in files other than slurm.conf's chain
                probs.append(f"{rec.where}: Include {rec.head}: Slurm does not support glob parsing (Include failed: fatal)")
            elif files is None or name not in files:
                probs.append(f"{rec.where}: Include {rec.head}: file not found (Include failed: fatal)")
            elif _depth > 16:
                probs.append(f"{rec.where}: Include {rec.head}: includes nested too deep")
            else:
                out.extend(expand_includes(files[name], name, files, probs, cluster_name, line_keys, _depth + 1,
                                           release))
            if rec.leftover:
                probs.append(f"{rec.where}: Parse error: \"{rec.leftover}\" after Include (fatal)")
            continue
        if rec.kind == "clustername":
            cluster_name = rec.head
        if rec.leftover:
            probs.append(f"{rec.where}: Parse error: cannot read \"{rec.leftover}\" (fatal)")
        elif len(rec.pairs) > 1 and rec.kind not in line_keys:
            rest = " ".join(f"{k}={v}" for k, v in rec.pairs[1:])
            probs.append(f"{rec.where}: Parse error: \"{rest}\" after {rec.pairs[0][0]}= (one key per line; fatal)")
        out.append(rec)
    return out


@dataclass
class SlurmConf:
    """slurm.conf split into global settings (lower-case key -> (Key, value, record)) and stanzas."""

    settings: dict[str, tuple[str, str, Record]] = field(default_factory=dict)
    controllers: list[str] = field(default_factory=list)  # SlurmctldHost values, else ControlMachine + BackupController
    nodes: list[Record] = field(default_factory=list)  # NodeName lines, DEFAULT values merged in
    nodesets: list[Record] = field(default_factory=list)
    partitions: list[Record] = field(default_factory=list)
    includes: list[Record] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)  # every record read, includes followed, in order
    problems: list[str] = field(default_factory=list)  # what Slurm's parse fails on (fatal)
    notes: list[str] = field(default_factory=list)  # error: lines Slurm logs and goes on
    repeated: dict[str, list[Record]] = field(default_factory=dict)  # S_P_ARRAY keys other than the line keys
    node_defaults: list[Record] = field(default_factory=list)
    partition_defaults: list[Record] = field(default_factory=list)
    downnodes: list[Record] = field(default_factory=list)

    def value(self, key: str, default: str = "") -> str:
        item = self.settings.get(key.lower())
        return item[1] if item else default


def parse_slurm_conf(text: str, file: str = "slurm.conf", files: Mapping[str, str] | None = None,
                     repeatable: frozenset[str] = frozenset({"prolog", "epilog", "prologslurmctld", "epilogslurmctld"}),
                     release: str | None = None) -> SlurmConf:
    """slurm.conf as src/common/read_config.c reads it (22.05-25.11): includes followed (``files``), one key per line
    except the line keys, ``NodeName=DEFAULT``/``PartitionName=DEFAULT`` applied to the lines after them (the
    handlers read the default table when they parse a line), SlurmctldHost or else ControlMachine/BackupController."""
    conf = SlurmConf()
    node_default: list[tuple[str, str]] = []
    part_default: list[tuple[str, str]] = []
    conf.records = expand_includes(text, file, files, conf.problems, release=release)
    for rec in parse_records(text, file):
        if rec.include:
            conf.includes.append(rec)
    for rec in conf.records:
        kind = rec.kind
        if kind in ("nodename", "partitionname", "nodeset", "downnodes"):
            given: dict[str, list] = {}
            for k, _v in rec.pairs[1:]:
                given.setdefault(k.lower(), [k, 0])[1] += 1
            for k, n in given.values():
                if n > 1:
                    # parse_config.c _handle_common (22.05:528, 24.11:536): "%s 1 specified more than once, latest
                    # value used" -- an error line, not fatal; Slurm keeps the last value
                    conf.notes.append(f"{rec.where}: {k} is given {n} times on one line; Slurm logs 'specified more "
                                      "than once, latest value used' and keeps the last")
        if kind == "nodename":
            if rec.head.upper() == "DEFAULT":
                node_default = _overlay(node_default, rec.pairs[1:])
                conf.node_defaults.append(rec)
                continue
            conf.nodes.append(Record(rec.file, rec.lineno, (rec.pairs[0], *_overlay(node_default, rec.pairs[1:])),
                                     _quoted_after(rec, node_default)))
        elif kind == "partitionname":
            if rec.head.upper() == "DEFAULT":
                part_default = _overlay(part_default, rec.pairs[1:])
                conf.partition_defaults.append(rec)
                continue
            conf.partitions.append(Record(rec.file, rec.lineno, (rec.pairs[0], *_overlay(part_default, rec.pairs[1:])),
                                          _quoted_after(rec, part_default)))
        elif kind == "nodeset":
            conf.nodesets.append(rec)
        elif kind == "downnodes":
            conf.downnodes.append(rec)
        elif kind == "slurmctldhost":
            conf.controllers.append(rec.head)
            conf.settings[kind] = (rec.pairs[0][0], rec.head, rec)
        elif rec.pairs:
            k, v = rec.pairs[0]
            if kind in repeatable:
                conf.repeated.setdefault(kind, []).append(rec)
            conf.settings[kind] = (k, v, rec)
    if conf.controllers:
        for old in ("ControlMachine", "ControlAddr", "BackupController", "BackupAddr"):
            if old.lower() in conf.settings:
                # read_config.c _validate_and_set_defaults (22.05, 24.11): logged, then ignored
                conf.notes.append(f"{conf.settings[old.lower()][2].where}: Ignoring {old} since SlurmctldHost is set")
    elif conf.value("ControlMachine"):
        # read_config.c: "Using old-style ControlMachine/BackupController entries" (22.05-25.11)
        conf.controllers.append(conf.value("ControlMachine"))
        if conf.value("BackupController"):
            conf.controllers.append(conf.value("BackupController"))
    return conf


def topology_conf_unread(conf: SlurmConf, release: str | None, has_yaml: bool = False) -> str:
    """Why the site's Slurm never reads its topology.conf ("" when it does). Only topology/tree and topology/block
    parse it (src/plugins/topology/tree/switch_record.c, block/block_record.c from 23.11; src/interfaces/topology.c
    hands them get_extra_conf_path("topology.conf")); an unset TopologyPlugin is read_config.h's
    DEFAULT_TOPOLOGY_PLUGIN, "topology/none" through 24.11 (slurm-22-05-8-1 :190, slurm-24-11-5-1 :157) and
    "topology/flat" from 25.05 (slurm-25-05-5-1 :156), neither of which reads a file; from 25.05 a topology.yaml,
    where it exists, is read instead (topology.c topology_g_init at slurm-25-05-5-1)."""
    m = re.search(r"(\d{2})\.(\d{2})", release or "")
    key = (int(m.group(1)), int(m.group(2))) if m else (22, 5)
    if key >= (25, 5) and has_yaml:
        return "topology.yaml exists and Slurm 25.05+ reads it instead"
    given = conf.value("TopologyPlugin")
    plugin = (given or ("topology/flat" if key >= (25, 5) else "topology/none")).lower()
    if plugin.split("/")[-1] in ("tree", "block"):
        return ""
    return (f"TopologyPlugin={given}" if given else f"no TopologyPlugin (Slurm {release or '22.05'}'s default is "
            f"{plugin})") + ", which reads no topology.conf"


@dataclass(frozen=True)
class Geometry:
    cpus: int
    boards: int
    sockets: int  # total over boards
    cores_per_socket: int
    threads_per_core: int
    real_memory: int

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


def node_geometry(d: Mapping[str, str]) -> Geometry:
    """What slurmctld makes of a NodeName line's (DEFAULT-merged, lower-case keys) geometry, as
    src/common/read_config.c _parse_nodename() does at slurm-22-05-8-1 and slurm-24-11-5-1: Procs= is the old
    CPUs=; Sockets= and SocketsPerBoard= together use SocketsPerBoard; without Sockets=, Sockets = Boards x
    SocketsPerBoard, else CPUs / (CoresPerSocket x ThreadsPerCore) when that divides, else Boards; without CPUs=,
    CPUs = Sockets x CoresPerSocket x ThreadsPerCore; a CPUs= that matches none of Sockets, Sockets x Cores,
    Sockets x Cores x Threads is reset to the last; Sockets < Boards resets Boards to 1; zeros become 1.
    Raises ValueError on a non-number."""
    def num(key: str) -> int | None:
        v = d.get(key)
        return None if v is None or v == "" else int(v)
    cpus = num("cpus")
    if cpus is None:
        cpus = num("procs")
    boards = num("boards") or 1
    cores = num("corespersocket") or 1
    threads = num("threadspercore") or 1
    spb = num("socketsperboard")
    sockets = num("sockets")
    if spb is not None and spb == 0:
        spb = 1
    if sockets is not None and sockets == 0:
        sockets = 1
    if cpus is not None and cpus == 0:
        cpus = 1
    if spb is not None and sockets is not None:
        sockets = None
    if sockets is None:
        if spb is not None:
            sockets = boards * spb
        elif cpus is not None and cpus // (cores * threads) and not cpus % (cores * threads):
            sockets = cpus // (cores * threads)
        else:
            sockets = boards
    if cpus is None:
        cpus = sockets * cores * threads
    if sockets < boards:
        boards = 1
    if cpus not in (sockets, sockets * cores, sockets * cores * threads):
        cpus = sockets * cores * threads
    return Geometry(cpus, boards, sockets, cores, threads, num("realmemory") or 1)


def _quoted_after(rec: Record, default: list[tuple[str, str]]) -> tuple[bool, ...]:
    q = dict(zip((k.lower() for k, _ in rec.pairs), rec.quoted, strict=False))
    merged = _overlay(default, rec.pairs[1:])
    return (q.get(rec.kind, False), *(q.get(k.lower(), False) for k, _ in merged))


def _overlay(base: list[tuple[str, str]] | tuple[tuple[str, str], ...], extra: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    d = {k.lower(): (k, v) for k, v in base}
    for k, v in extra:
        d[k.lower()] = (k, v)
    return list(d.values())


def parse_settings(text: str, file: str, files: Mapping[str, str] | None = None,
                   problems: list[str] | None = None, release: str | None = None) -> dict[str, tuple[str, str, Record]]:
    """cgroup.conf-style files (every key simple: one per line, as s_p_parse_file() reads them), last wins;
    includes followed; parse errors appended to ``problems``."""
    out: dict[str, tuple[str, str, Record]] = {}
    for rec in expand_includes(text, file, files, problems if problems is not None else [], line_keys=frozenset(),
                               release=release):
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


# gres.conf's File=, Files= and MultipleFiles= are hostlists of paths: gres.c _validate_file() of slurm-22-05-8-1 runs
# hostlist_create() on them (fatal "can't parse File=%s" only when that returns NULL). Slurm's hostlist parser does
# not refuse an unclosed bracket: it reads `/dev/nvidia[0-` as the one path `/dev/nvidia]` (src/common/hostlist.c,
# _next_tok/_hostlist_create_bracketed; `scontrol show hostnames '/dev/nvidia[0-'` prints `/dev/nvidia]` on 22.05.8),
# which slurmd then stats for 20 s and dies on (gres.c _my_stat(): fatal "can't stat gres.conf file %s"). So a File=
# list ClusterShell cannot parse is an error at its gres.conf line here, never passed on.
FILE_KEYS = ("file", "files", "multiplefiles")


def expand_files(spec: str, where: str = "gres.conf", key: str = "File") -> list[str]:
    """``/dev/nvidia[0-3],/dev/nvidia7`` -> paths (hostlist syntax, which gres.conf uses for File=). UsageError, one
    line naming ``where`` (``gres.conf:2``) and the key, for a list that is not one (an unclosed or backwards
    bracket: see FILE_KEYS)."""
    from slurmkit.errors import UsageError

    try:
        return hostlist.expand(spec, where)
    except UsageError:
        pass
    if spec.count("[") != spec.count("]"):
        why = "an unclosed bracket: Slurm's hostlist parser reads it as another path, which slurmd waits for and dies on"
    else:
        why = "a bracket that is not a range like [0-7]: slurmd dies on it, \"can't parse File=\""
    raise UsageError(f"{where}: {key}={spec}: not a list of device files ({why})")


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
    "Record", "SlurmConf", "Geometry", "node_geometry", "parse_records", "logical_lines", "split_line", "expand_includes", "LINE_KEYS", "parse_slurm_conf", "parse_settings", "parse_gres", "gres_totals",
    "parse_count", "expand_ints", "expand_files", "header_version", "node_names",
]
