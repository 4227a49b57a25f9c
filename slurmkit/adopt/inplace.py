"""Apply a plan to an adopted site's own files as line edits, format-preserving (issue 33 item 1).

`conf apply` on an imported site used to write slurmkit's layout over the site's files: every comment, blank line
and Include split was gone. Here the plan (the files slurmkit would generate) is carried into the site's text
instead: a changed key has its value rewritten on the line (and Include file) that defines it; a removed key, node
or partition loses its line(s); a new key goes after the last global setting of slurm.conf, a new NodeName or
PartitionName line after the last line of its kind (in the file those lines live in, an Include target included),
a new gres.conf line after the last gres.conf record. A changed NodeName/PartitionName line keeps its keys in order,
with only the values that change rewritten and new keys appended. Everything else stays byte for byte.

The result is checked: Slurm's parse of the edited set (confparse, Include lines followed) must equal the plan's
(``rollout.semantic_diff`` finds nothing between them), else nothing is written and the one-line error names the
file and line and points to ``--rewrite`` (slurmkit's own layout). Pure: texts in, texts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmkit import hostlist
from slurmkit.errors import UsageError
from slurmkit.generate import confparse as cp
from slurmkit.generate import rollout as ro

_WS = " \t\n\r\f\v"
_HINT = "`slurmkit conf apply --rewrite` writes slurmkit's own layout instead"
# keys of slurm.conf records that are not one global setting (compared and edited as records, or refused)
_RECORD_KINDS = frozenset({"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "slurmctldhost"})


class CannotEdit(UsageError):
    """The plan cannot be carried as an edit of the site's files (one line: file, line, what; --rewrite)."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: cannot edit in place: {what}; {_HINT}")


def spans(text: str) -> dict[int, int]:
    """First physical line of each logical line -> its last physical line (continuations, as
    confparse.logical_lines joins them: parse_config.c _get_next_line)."""
    out: dict[int, int] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    start = 0
    for no, raw in enumerate(lines, 1):
        if not start:
            start = no
        if cp._continuation_cut(cp._strip_comment(raw)) is not None:
            continue
        out[start] = no
        start = 0
    if start:
        out[start] = len(lines)
    return out


@dataclass
class _File:
    """One file's pending line edits (1-based physical line numbers of the original text)."""

    name: str
    text: str
    lines: list[str] = field(default_factory=list)
    span: dict[int, int] = field(default_factory=dict)
    replaced: dict[int, str] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    after: dict[int, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lines = self.text.split("\n")
        self.span = spans(self.text)

    @property
    def changed(self) -> bool:
        return bool(self.replaced or self.deleted or self.after)

    def delete(self, lineno: int) -> None:
        for n in range(lineno, self.span.get(lineno, lineno) + 1):
            self.deleted.add(n)

    def insert_after(self, lineno: int, line: str) -> None:
        self.after.setdefault(self.span.get(lineno, lineno), []).append(line)

    def current(self, lineno: int) -> str:
        """The record's one physical line as edited so far; a continued record cannot be edited in place."""
        if self.span.get(lineno, lineno) != lineno:
            raise CannotEdit(f"{self.name}:{lineno}", "the line is continued with '\\' (only whole-line edits there)")
        return self.replaced.get(lineno, self.lines[lineno - 1])

    def render(self) -> str:
        out: list[str] = []
        head = self.after.get(0, [])
        body = self.lines
        trailing_nl = body and body[-1] == ""
        if trailing_nl:
            body = body[:-1]
        out.extend(head)
        for no, line in enumerate(body, 1):
            if no not in self.deleted:
                out.append(self.replaced.get(no, line))
            out.extend(self.after.get(no, []))
        return "\n".join(out) + ("\n" if trailing_nl or (not body and out) else "")


def _pairs_at(line: str, where: str) -> tuple[str, list[tuple[str, int, int, int, int, bool]]]:
    """The code part of a physical line (comment stripped) and its pairs: (key, pair start, value start, value end,
    pair end, quoted). A line with escapes is refused (its text is not what Slurm reads)."""
    code = cp._strip_comment(line)
    if "\\" in code:
        raise CannotEdit(where, "the line has '\\' escapes")
    out = []
    pos = 0
    while True:
        m = cp._KV.match(code, pos)
        if not m:
            break
        if m.group(3) is not None:
            out.append((m.group(1), m.start(), m.start(3) - 1, m.end(3) + 1, m.end(), True))
        else:
            out.append((m.group(1), m.start(), m.start(4), m.end(4), m.end(), False))
        pos = m.end()
    return code, out


def edit_pairs(line: str, where: str, set_: Mapping[str, str], drop: frozenset[str] = frozenset(),
               spell: Mapping[str, str] | None = None) -> str:
    """``line`` with the values of ``set_`` (lower-case key -> value) rewritten where the key is (the last time it
    is, as Slurm keeps the last), appended before any comment where it is not (spelled as ``spell`` says), and the
    pairs of ``drop`` removed; every other byte kept."""
    code, pairs = _pairs_at(line, where)
    rest = line[len(code):]
    edits: list[tuple[int, int, str]] = []
    last: dict[str, tuple[str, int, int, int, int, bool]] = {}
    for p in pairs:
        last[p[0].lower()] = p
    for k, p in last.items():
        if k in drop:
            edits.extend((q[1], q[4], "") for q in pairs if q[0].lower() == k)
        elif k in set_:
            edits.append((p[2], p[3], cp.quote(set_[k], p[5])))
    for start, end, new in sorted(edits, reverse=True):
        code = code[:start] + new + code[end:]
    tail = code[len(code.rstrip(_WS)):]
    code = code.rstrip(_WS)
    for k, v in set_.items():
        if k not in last:
            code += f" {(spell or {}).get(k, k)}={cp.quote(v)}"
    return code + tail + rest


def _node_norm(d: Mapping[str, str]) -> dict[str, str]:
    """A NodeName line's keys (DEFAULT merged) as rollout._node_table compares them, geometry aside."""
    out = dict(d)
    if "features" in out:
        out["feature"] = out.pop("features")
    for k, dv in ro.slurmdefaults.NODE_DEFAULTS.items():
        if out.get(k, dv) == dv:
            out.pop(k, None)
    state = out.pop("state", "").upper()
    if state in ("CLOUD", "FUTURE"):
        out["state"] = state
    return {k: v for k, v in out.items() if k not in ro._GEOMETRY}


def edit_site(site: Mapping[str, str], plan: Mapping[str, str], version: str) -> dict[str, str]:
    """The site's files (``site``: by the name Slurm resolves them, Include targets included) edited so that Slurm
    reads them as it reads ``plan`` (the generated set). -> every file of ``plan`` whose text is to be written: the
    edited site files (Include targets that change among them), and the plan's own text for a file the site lacks
    or one that is not a Key=Value file slurmkit edits (topology, hooks, slurmkit.yaml). Raises CannotEdit."""
    out = dict(plan)
    edits: dict[str, _File] = {}

    def ed(name: str) -> _File:
        if name not in edits:
            edits[name] = _File(name, site[name])
        return edits[name]

    if "slurm.conf" in site and "slurm.conf" in plan:
        _slurm_conf(site, plan, version, ed)
        out["slurm.conf"] = site["slurm.conf"]
    if "gres.conf" in plan and "gres.conf" in site:
        _gres_conf(site, plan, version, ed)
        out["gres.conf"] = site["gres.conf"]
    for name in ("cgroup.conf", *ro.SIDE_FILES):
        if name in plan and name in site and name != "plugstack.conf":
            _settings_file(name, site[name], plan[name], ed, site, version)
            out[name] = site[name]
    if "plugstack.conf" in plan and "plugstack.conf" in site:
        # the site's text with only the spank lines that change edited: its comments and blank lines kept
        out["plugstack.conf"] = _plugstack_edit(site["plugstack.conf"], plan["plugstack.conf"])
    if "topology.conf" in plan and "topology.conf" in site and ro._topology_set(ro._body(site["topology.conf"])) == \
            ro._topology_set(ro._body(plan["topology.conf"])):
        out["topology.conf"] = site["topology.conf"]
    gres_nodes = any(r.get("Gres") for r in cp.parse_slurm_conf(plan.get("slurm.conf", ""), "slurm.conf", plan).nodes)
    for name in ("cgroup.conf", "gres.conf"):
        # a file the site lacks and the plan has only slurmkit's header comments in: no line the plan needs (the
        # validator wants a gres.conf, even an empty one, beside nodes with Gres=: kept there)
        if name in out and name not in site and not any(r.pairs for r in cp.parse_records(out[name], name)) and not (
                name == "gres.conf" and gres_nodes):
            del out[name]
    for name in site:
        if name not in ro.MANAGED_FILES and "/" not in name:
            out.setdefault(name, site[name])  # the Include files, read with slurm.conf (unchanged ones not rewritten)
    for name, f in edits.items():
        if not f.changed:
            continue
        if "/" in name:
            line = min([*f.replaced, *f.deleted, *f.after]) or 1
            raise CannotEdit(f"{name}:{line}", "the change lands in an Include file outside the config directory")
        out[name] = f.render()
    _check(site, out, plan, version)
    return out


def _spank_lines(text: str) -> list[list[str]]:
    """plugstack.conf as spank(8) reads it (22.05, 24.11, 26.05): "Comments are preceded with '#' and extend to the
    end of the line"; each other line is whitespace-separated words, in order."""
    return [w for w in (ln.split("#", 1)[0].split() for ln in text.splitlines()) if w]


def _plugstack_edit(site_text: str, plan_text: str) -> str:
    """``site_text`` edited so that its spank lines are the plan's: the lines the two share stay byte for byte,
    a changed line is rewritten where it stands (its trailing comment kept), a removed one goes, a new one goes
    before the next kept line (or after the last spank line). spank(8): "The plugins will simply be called in
    order", so the order is the plan's. The alignment is difflib's (the standard library's sequence matcher)."""
    import difflib

    raw = site_text.splitlines()
    at = [i for i, ln in enumerate(raw) if ln.split("#", 1)[0].split()]
    a = [" ".join(raw[i].split("#", 1)[0].split()) for i in at]
    b = [" ".join(w) for w in _spank_lines(plan_text)]
    if a == b:
        return site_text
    new: dict[int, list[str]] = {}  # raw line -> what replaces it ([] deletes)
    before: dict[int, list[str]] = {}  # raw line -> lines inserted before it
    after: list[str] = []  # after the last spank line (the end of the file where there is none)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                line = raw[at[i1 + k]]
                comment = "  #" + line.split("#", 1)[1] if "#" in line else ""
                new[at[i1 + k]] = [b[j1 + k] + comment]
            continue
        for k in range(i1, i2):
            new[at[k]] = []
        if i2 < len(at):
            before.setdefault(at[i2], []).extend(b[j1:j2])
        else:
            after.extend(b[j1:j2])
    last = at[-1] if at else len(raw) - 1
    out: list[str] = after if last < 0 else []
    for i, ln in enumerate(raw):
        out += before.get(i, [])
        out += new.get(i, [ln])
        if i == last:
            out += after
    return "\n".join(out) + "\n"


def _check(site: Mapping[str, str], out: Mapping[str, str], plan: Mapping[str, str], version: str) -> None:
    """The edited set must read as the plan does; else one line naming what differs."""
    edited = {**site, **out}
    left = [c for c in ro.semantic_diff(edited, dict(plan), version) if not c.file.startswith("slurmkit")]
    if left:
        c = left[0]
        raise CannotEdit(c.file, f"the edited file would still differ from the plan ({c.subject}: "
                                 f"{c.old or '(absent)'} -> {c.new or '(absent)'})")


def _plan_line(plan_text: str, rec: cp.Record) -> str:
    """A generated record's line as slurmkit writes it."""
    lines = plan_text.split("\n")
    end = spans(plan_text).get(rec.lineno, rec.lineno)
    if end != rec.lineno:
        return rec.render()
    return lines[rec.lineno - 1]


def _slurm_conf(site: Mapping[str, str], plan: Mapping[str, str], version: str, ed) -> None:  # type: ignore[no-untyped-def]
    oc = cp.parse_slurm_conf(site["slurm.conf"], "slurm.conf", site)
    nc = cp.parse_slurm_conf(plan["slurm.conf"], "slurm.conf", plan)
    if oc.problems:
        raise CannotEdit(oc.problems[0].split(": ", 1)[0], "the site's files fail Slurm's parse")
    # global settings
    if ro._controllers(oc) != ro._controllers(nc):
        where = oc.settings.get("slurmctldhost", oc.settings.get("controlmachine", ("", "", None)))[2]
        raise CannotEdit(where.where if where else "slurm.conf", "the controllers change")
    for kind in oc.repeated.keys() | nc.repeated.keys():
        if [r.head for r in oc.repeated.get(kind, [])] != [r.head for r in nc.repeated.get(kind, [])]:
            raise CannotEdit(oc.repeated.get(kind, nc.repeated.get(kind, []))[0].where, f"{kind} lines change")
    simple = [r for r in oc.records if r.pairs and r.kind not in _RECORD_KINDS]
    last_setting = simple[-1] if simple else None
    for key in sorted(set(oc.settings) | set(nc.settings)):
        if key in ro._OLD_CONTROLLER_KEYS or key in oc.repeated or key in nc.repeated:
            continue
        a, b = oc.value(key), nc.value(key)
        if a == b or ro._setting(key, a, version) == ro._setting(key, b, version):
            continue
        if key in oc.settings:
            rec = oc.settings[key][2]
            f = ed(rec.file)
            if key not in nc.settings or b == "":
                for r in oc.records:  # every definition goes (an earlier one would otherwise be read)
                    if r.kind == key:
                        ed(r.file).delete(r.lineno)
            else:
                f.replaced[rec.lineno] = edit_pairs(f.current(rec.lineno), rec.where, {key: b})
        else:
            spelled = nc.settings[key][0]
            line = f"{spelled}={cp.quote(b, False)}"
            if last_setting is None:
                ed("slurm.conf").after.setdefault(0, []).append(line)
            else:
                ed(last_setting.file).insert_after(last_setting.lineno, line)
    _node_records(oc, nc, plan, version, ed)
    _partitions(oc, nc, plan, ed)
    # NodeSet lines as rollout.semantic_diff compares them (DownNodes are not carried by an inventory: left as they are)
    if {r.head: ro._stanza(r) for r in oc.nodesets} != {r.head: ro._stanza(r) for r in nc.nodesets}:
        raise CannotEdit((oc.nodesets or nc.nodesets)[0].where, "NodeSet lines change")


def _raw_record(oc: cp.SlurmConf, merged: cp.Record) -> cp.Record:
    """The record as written on its line (DEFAULT values not merged in)."""
    for r in oc.records:
        if r.file == merged.file and r.lineno == merged.lineno:
            return r
    return merged


def _node_records(oc: cp.SlurmConf, nc: cp.SlurmConf, plan: Mapping[str, str], version: str, ed) -> None:  # type: ignore[no-untyped-def]
    new_of: dict[str, cp.Record] = {}
    for rec in nc.nodes:
        for h in hostlist.expand(rec.head, rec.where):
            new_of.setdefault(h, rec)
    known: set[str] = {h for rec in oc.nodes for h in hostlist.expand(rec.head, rec.where)}
    # a planned line that keeps the nodes of exactly one site line and adds nodes: that line grows (its hostlist)
    olds_of: dict[int, int] = {}
    for rec in oc.nodes:
        for t in {id(new_of[h]) for h in hostlist.expand(rec.head) if h in new_of}:
            olds_of[t] = olds_of.get(t, 0) + 1
    placed: set[str] = set()
    for rec in oc.nodes:
        hosts = hostlist.expand(rec.head, rec.where)
        kept = [h for h in hosts if h in new_of]
        f = ed(rec.file)
        if not kept:
            f.delete(rec.lineno)
            continue
        old_d = rec.as_dict()
        targets = {id(new_of[h]) for h in kept}
        if len(targets) > 1:
            raise CannotEdit(rec.where, "the plan splits this NodeName line's nodes")
        new_d = new_of[kept[0]].as_dict()
        set_: dict[str, str] = {}
        spell = {k.lower(): k for k, _ in new_of[kept[0]].pairs}
        on, nn = _node_norm(old_d), _node_norm(new_d)
        for k in nn:
            if on.get(k) != nn[k]:
                set_[k] = new_d[k] if k in new_d else new_d.get("features", nn[k])
        drop = frozenset(k for k in on if k not in nn)
        if ro._geometry(old_d) != ro._geometry(new_d):
            set_.update({k: v for k, v in new_d.items() if k in ro._GEOMETRY and old_d.get(k) != v})
        raw = _raw_record(oc, rec)
        on_line = {k.lower() for k, _ in raw.pairs[1:]}
        if drop - on_line:
            raise CannotEdit(rec.where, f"{', '.join(sorted(drop - on_line))} comes from a NodeName=DEFAULT line")
        grow = [h for h in hostlist.expand(new_of[kept[0]].head) if h not in known] if olds_of[
            id(new_of[kept[0]])] == 1 else []
        if len(kept) != len(hosts) or grow:
            set_["nodename"] = hostlist.fold([*kept, *grow])
            placed.update(grow)
        if set_ or drop:
            f.replaced[rec.lineno] = edit_pairs(f.current(rec.lineno), rec.where, set_, drop, spell)
    added = [h for h in new_of if h not in known and h not in placed]
    if not added:
        return
    anchor = oc.nodes[-1] if oc.nodes else (oc.node_defaults[-1] if oc.node_defaults else None)
    lines: list[str] = []
    done: set[int] = set()
    for h in added:
        rec = new_of[h]
        if id(rec) in done:
            continue
        done.add(id(rec))
        hs = [x for x in hostlist.expand(rec.head) if x not in known and x not in placed]
        line = _plan_line(plan["slurm.conf"], rec)
        if len(hs) != len(hostlist.expand(rec.head)):
            line = edit_pairs(line, rec.where, {"nodename": hostlist.fold(hs)})
        lines.append(line)
    _place(ed, anchor, oc, lines, oc.node_defaults, [{k.lower() for k, _ in new_of[h].pairs} for h in added])


def _place(ed, anchor: cp.Record | None, oc: cp.SlurmConf, lines: list[str],  # type: ignore[no-untyped-def]
           defaults: list[cp.Record] = (), keys: list[set[str]] = ()) -> None:  # type: ignore[assignment]
    """New record lines after ``anchor`` (the last of their kind), else after the last record of slurm.conf. Where
    a ``NodeName=DEFAULT``/``PartitionName=DEFAULT`` line would give a new line keys it does not set (the handlers
    merge the defaults read so far into each later line), the new lines go just before the first DEFAULT line."""
    inherited = {k.lower() for d in defaults for k, _ in d.pairs[1:]}
    if defaults and any(inherited - ks for ks in keys):
        first = defaults[0]
        f = ed(first.file)
        f.after.setdefault(first.lineno - 1, []).extend(lines)
        return
    if anchor is None:
        main = [r for r in oc.records if r.file == "slurm.conf"]
        anchor = main[-1] if main else None
    if anchor is None:
        ed("slurm.conf").after.setdefault(0, []).extend(lines)
        return
    f = ed(anchor.file)
    for line in lines:
        f.insert_after(anchor.lineno, line)


def _partitions(oc: cp.SlurmConf, nc: cp.SlurmConf, plan: Mapping[str, str], ed) -> None:  # type: ignore[no-untyped-def]
    new = {r.head: r for r in nc.partitions}
    old = {r.head: r for r in oc.partitions}
    for name, rec in old.items():
        f = ed(rec.file)
        if name not in new:
            f.delete(rec.lineno)
            continue
        a, b = ro._stanza(rec), ro._stanza(new[name])
        if a == b:
            continue
        raw_new = {k.lower(): v for k, v in new[name].pairs[1:]}
        spell = {k.lower(): k for k, _ in new[name].pairs}
        set_ = {k: raw_new.get(k, v) for k, v in b.items() if a.get(k) != v}
        drop = frozenset(k for k in a if k not in b)
        on_line = {k.lower() for k, _ in _raw_record(oc, rec).pairs[1:]}
        if drop - on_line:
            raise CannotEdit(rec.where, f"{', '.join(sorted(drop - on_line))} comes from a PartitionName=DEFAULT line")
        f.replaced[rec.lineno] = edit_pairs(f.current(rec.lineno), rec.where, set_, drop, spell)
    added = [r for r in nc.partitions if r.head not in old]
    if added:
        anchor = oc.partitions[-1] if oc.partitions else (oc.partition_defaults[-1] if oc.partition_defaults else None)
        if anchor is None and oc.nodes:
            anchor = oc.nodes[-1]
        _place(ed, anchor, oc, [_plan_line(plan["slurm.conf"], r) for r in added],
               oc.partition_defaults, [{k.lower() for k, _ in r.pairs} for r in added])


def _gres_conf(site: Mapping[str, str], plan: Mapping[str, str], version: str, ed) -> None:  # type: ignore[no-untyped-def]
    """gres.conf: lines of removed nodes go (or lose those nodes from NodeName=), lines of new nodes come after the
    last record (only where the site's lines do not already give them the plan's GRES: a line without NodeName=
    applies to every node); a change of an existing node's GRES is refused."""
    oc = cp.parse_slurm_conf(site.get("slurm.conf", ""), "slurm.conf", site)
    nc = cp.parse_slurm_conf(plan.get("slurm.conf", ""), "slurm.conf", plan)
    on, nn = ro._node_table(oc), ro._node_table(nc)
    old_t = ro._gres_table(site["gres.conf"], on, site, version)  # Include lines followed, as slurmd reads them
    new_t = ro._gres_table(plan["gres.conf"], nn, plan, version)
    for h in on:
        if h in nn and old_t.get(h, ()) != new_t.get(h, ()):
            raise CannotEdit("gres.conf", f"node {h}'s gres.conf lines change")
    records = [r for r in cp.parse_records(site["gres.conf"], "gres.conf") if not r.include]
    if any(r.include for r in cp.parse_records(site["gres.conf"], "gres.conf")):
        if any(h not in on for h in nn) or any(h not in nn for h in on):
            raise CannotEdit("gres.conf", "gres.conf has Include lines")
    f = ed("gres.conf")
    for rec in records:
        spec = rec.get("NodeName")
        if spec is None:
            continue
        hosts = hostlist.expand(spec, rec.where)
        kept = [h for h in hosts if h in nn or h not in on]
        if not kept:
            f.delete(rec.lineno)
        elif len(kept) != len(hosts):
            f.replaced[rec.lineno] = edit_pairs(f.current(rec.lineno), rec.where, {"nodename": hostlist.fold(kept)})
    added = [h for h in nn if h not in on]
    need = [h for h in added if ro._gres_table(site["gres.conf"], [h], site, version).get(h, ()) != new_t.get(h, ())]
    if not need:
        return
    if any(ro._gres_table(site["gres.conf"], [h], site, version).get(h, ()) for h in need):
        raise CannotEdit("gres.conf", f"a gres.conf line without NodeName= gives new node {need[0]} other GRES")
    lines = []
    for rec in cp.parse_records(plan["gres.conf"], "gres.conf"):
        spec = rec.get("NodeName")
        if spec is None or not rec.pairs:
            continue
        hs = [h for h in hostlist.expand(spec) if h in need]
        if not hs:
            continue
        line = _plan_line(plan["gres.conf"], rec)
        if len(hs) != len(hostlist.expand(spec)):
            line = edit_pairs(line, rec.where, {"nodename": hostlist.fold(hs)})
        lines.append(line)
    for ln in lines:
        if records:
            f.insert_after(records[-1].lineno, ln)
        else:  # after the file's last line (comments only, or empty)
            f.after.setdefault(len(f.lines) - (1 if f.lines[-1] == "" else 0), []).append(ln)


def _settings_file(name: str, site_text: str, plan_text: str, ed,  # type: ignore[no-untyped-def]
                   site: Mapping[str, str] | None = None, version: str | None = None) -> None:
    """cgroup.conf-style files: a changed key's value rewritten on its line, a removed key's lines deleted, a new key
    after the last setting. The site's Include lines are followed (``site``): a key an included file sets is no
    new key (a ParallelCluster cgroup.conf includes slurm_parallelcluster_cgroup.conf)."""
    so = cp.parse_settings(site_text, name, site)
    sn = cp.parse_settings(ro._body(plan_text), name)
    f = ed(name)
    last = max((r.lineno for _k, _v, r in so.values() if r.file == name), default=0)
    for k in sorted(set(so) | set(sn)):
        a = so[k][1] if k in so else None
        b = sn[k][1] if k in sn else None
        if a == b:
            continue
        rec0 = (so.get(k) or sn[k])[2]
        if k in so and len(rec0.pairs) > 1:
            raise CannotEdit(rec0.where, f"{rec0.pairs[0][0]}= shares its line with other keys")
        if b is None:
            if rec0.file != name:
                raise CannotEdit(rec0.where, "the key is set in an Include file")
            for rec in cp.parse_records(site_text, name):
                if rec.kind == k:
                    f.delete(rec.lineno)
        elif a is None:
            line = f"{sn[k][0]}={cp.quote(b)}"
            if last:
                f.insert_after(last, line)
            else:
                f.after.setdefault(0, []).append(line)
        else:
            rec = so[k][2]
            if rec.file != name:
                raise CannotEdit(rec.where, "the key is set in an Include file")
            f.replaced[rec.lineno] = edit_pairs(f.current(rec.lineno), rec.where, {k: b})
    if f.changed:
        # a file the release cannot read as it stands (a line of junk): edited, it would still be refused, and apply
        # would have written it and said it was done; one line names the site's line instead, nothing written.
        # job_container.conf's NodeName and (23.02+) BasePath lines carry more keys (read_jcconf.c, as sidefiles)
        probs: list[str] = []
        cp.expand_includes(site_text, name, site, probs, release=version,
                           line_keys=frozenset({"nodename", "basepath"}) if name == "job_container.conf" else frozenset())
        if probs:
            where, _sep, what = probs[0].partition(": ")
            raise CannotEdit(where, f"{what} (Slurm does not read the file as it is: fix that line first)")
