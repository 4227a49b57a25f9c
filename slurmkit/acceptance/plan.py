"""What to measure next, given what was measured: the levels, the pair matchings and the bisection. Pure.

The plan is a generator: it yields a batch of ``Task`` s, receives ``{task key: peak busbw in GB/s or None}`` for
them, and returns the ``Finding`` s. It decides only from the numbers it is sent, so replaying it against stored
results (a resumed run) asks for exactly the same tasks again; the runner serves those from the report instead of
submitting jobs. Tasks of one batch may share nodes: the runner packs them into node-disjoint waves.

Per level (each judged on its own, because busbw at one group size is not comparable with another's on every
fabric):

* ``node``: one measurement per node (its GPUs). Slow nodes by the ``Rule`` over the level.
* ``pair``: a matching inside each leaf and one across leaves (every node in two pairs). A node whose *best* pair
  is slow (by the rule over every node's best pair) is a suspect; a slow pair of two nodes that are not suspects
  is a slow link. Each suspect is then measured with a healthy node, beside a control pair of two healthy nodes.
* ``hca``: ``ib_write_bw`` per HCA port (rail), over the pair level's two matchings: each port of each node against
  the same port of two partners. A port whose *best* partner is slow (by the rule over every port's best) is a bad
  port or cable, named with its node (``node3 mlx5_1:1``) and confirmed by its two partners; a slow rail between two
  ports that are fine elsewhere is a link suspect (the cable or switch path between them).
* ``leaf``: one measurement per leaf switch; a slow leaf is bisected.
* ``all``: one measurement over every node; bisected when it is below what the inventory expects.

Bisection: measure both halves of a slow group side by side; recurse into the slower one when it is slower by the
rule's tolerance, else the group as a whole is slow (a leaf uplink, a switch). A group of two is resolved by
measuring each member with a healthy node beside a control pair. One slow node among n costs 2·log2(n) jobs.

A node is *confirmed* when measurements of two different levels name it; one named by a single level is re-measured
beside a control, twice, one round after the other, and counts only when slower in both. Each level's findings are confirmed before the next level starts, and a
confirmed node is left out of the later levels.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

from slurmkit.acceptance.busbw import Rule

LEVELS = ("node", "pair", "hca", "leaf", "all")
HCA_KINDS = ("port", "rail")  # findings of the hca level: decided by it, not re-measured by _confirm

Results = dict[str, "float | None"]


@dataclass(frozen=True)
class Task:
    key: str  # unique in a run and the same on a replay: "<level>:<step>:<node+node...>"
    level: str  # node | pair | leaf | all
    step: str  # measure | half | resolve | control | confirm
    nodes: tuple[str, ...]
    why: str  # progress text: what this measurement decides
    hca: str = ""  # the hca level: the HCA port measured ("mlx5_0:1")

    @property
    def inter(self) -> bool:
        return len(self.nodes) > 1


def task(level: str, step: str, nodes: Sequence[str], why: str, hca: str = "") -> Task:
    return Task(f"{level}:{step}:{'+'.join(nodes)}" + (f":{hca}" if hca else ""), level, step, tuple(nodes), why, hca)


@dataclass
class Finding:
    kind: str  # node | pair | group
    nodes: tuple[str, ...]
    level: str
    evidence: list[str]  # task keys that name it
    detail: str
    switch: str | None = None
    confirmed: bool = False
    port: str | None = None  # hca level: the HCA port ("mlx5_1:1") of nodes[0] (a port) or of both (a rail)


@dataclass(frozen=True)
class Topo:
    """The nodes to test, in fabric order, and the leaf switch of each (``""``: none known)."""

    nodes: tuple[str, ...]
    leaf_of: dict[str, str] = field(default_factory=dict)

    def leaves(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            out.setdefault(self.leaf_of.get(n, ""), []).append(n)
        return out


Plan = Generator[list[Task], Results, list[Finding]]


def plan(topo: Topo, levels: Sequence[str], rule: Rule, expected: dict[str, float | None] | None = None,
         all_pairs: bool = False, judged: list[dict[str, object]] | None = None, hcas: Sequence[str] = ()) -> Plan:
    """The whole run: each asked level in LEVELS order, then the confirmations. ``judged`` (when given) receives
    one record per application of the rule over a level (what was judged, median, log-MAD, threshold, the lowest
    value and its margin), so that the report can explain every verdict, a passing one too."""
    expected = expected or {}
    judged = judged if judged is not None else []
    findings: list[Finding] = []
    out: set[str] = set()
    for level in LEVELS:
        if level not in levels:
            continue
        # a node confirmed bad by an earlier level stays out of the later ones: it would only slow every group it
        # joins again and hide what else is wrong
        sub = Topo(tuple(n for n in topo.nodes if n not in out), topo.leaf_of)
        if level == "node":
            new = yield from _node_level(sub, rule, judged)
        elif level == "pair":
            new = yield from (_all_pairs(sub, rule, judged) if all_pairs else _pair_level(sub, rule, judged))
        elif level == "hca":
            new = yield from _hca_level(sub, hcas, rule, judged)
        elif level == "leaf":
            new = yield from _leaf_level(sub, rule, judged)
        else:
            new = yield from _all_level(sub, rule, expected.get("all"))
        new = _merge(new)
        yield from _confirm(sub, rule, new)
        findings += new
        out |= {f.nodes[0] for f in new if f.kind == "node" and f.confirmed}
    return _merge(findings)


# --- levels ------------------------------------------------------------------------------------------------------

def _judge(rule: Rule, level: str, over: str, values: dict[str, float | None],
           judged: list[dict[str, object]]) -> tuple[list[str], float, float, float]:
    """``rule.slow`` over ``values``, recorded in ``judged``: the threshold and how far the lowest value is from it
    (margin = lowest / threshold: below 1 is slow)."""
    slow, ref, d, thr = rule.slow(values)
    good = {k: v for k, v in values.items() if v is not None}
    low = min(good, key=lambda k: good[k]) if good else None
    judged.append({"level": level, "over": over, "n": len(good), "median": ref, "log_mad": d, "threshold": thr,
                   "lowest": low, "lowest_busbw": good[low] if low else None,
                   "margin": round(good[low] / thr, 3) if low and thr > 0 else None, "slow": slow})
    return slow, ref, d, thr


def _node_level(topo: Topo, rule: Rule, judged: list[dict[str, object]]
                ) -> Generator[list[Task], Results, list[Finding]]:
    tasks = [task("node", "measure", [n], f"node {n}: its GPUs together") for n in topo.nodes]
    res = yield tasks
    values = {t.nodes[0]: res.get(t.key) for t in tasks}
    slow, ref, d, thr = _judge(rule, "node", "each node", values, judged)
    return [Finding("node", (n,), "node", [f"node:measure:{n}"],
                    f"node level: {n} {values[n]:.3g} GB/s < {thr:.3g} (median {ref:.3g}, log-MAD {d:.2g})")
            for n in slow]


def intra_pairs(topo: Topo) -> list[tuple[str, str]]:
    """Consecutive nodes of each leaf; an odd node out of a leaf is paired with the next leaf's odd one."""
    out, spare = [], []
    for members in topo.leaves().values():
        for i in range(0, len(members) - 1, 2):
            out.append((members[i], members[i + 1]))
        if len(members) % 2:
            spare.append(members[-1])
    out += [(spare[i], spare[i + 1]) for i in range(0, len(spare) - 1, 2)]
    return out


def cross_pairs(topo: Topo) -> list[tuple[str, str]]:
    """Node i with node i + n/2 in fabric order: across leaves whenever the leaves are of equal size."""
    order, h = list(topo.nodes), len(topo.nodes) // 2
    return [(order[i], order[i + h]) for i in range(h)]


def matchings(topo: Topo) -> list[tuple[str, str]]:
    """The intra-leaf and the cross-leaf matching without repeats; a node left out of both (an odd count: node3 of
    node[1-3] is nobody's partner in either) is paired with a node of another leaf, else with any other node, so
    every node is measured."""
    seen: set[frozenset[str]] = set()
    pairs = []
    for p in intra_pairs(topo) + cross_pairs(topo):
        if frozenset(p) not in seen:
            seen.add(frozenset(p))
            pairs.append(p)
    covered = {n for p in pairs for n in p}
    for n in topo.nodes:
        if n in covered or len(topo.nodes) < 2:
            continue
        mine = topo.leaf_of.get(n, "")
        others = [m for m in topo.nodes if m != n]
        partner = next((m for m in others if topo.leaf_of.get(m, "") != mine), others[0])
        pairs.append((partner, n))
        covered.add(n)
    return pairs


def _pair_level(topo: Topo, rule: Rule, judged: list[dict[str, object]]
                ) -> Generator[list[Task], Results, list[Finding]]:
    pairs = matchings(topo)
    if not pairs:
        return []
    tasks = {p: task("pair", "measure", p, f"pair {p[0]}+{p[1]}") for p in pairs}
    res = yield list(tasks.values())
    values = {t.key: res.get(t.key) for t in tasks.values()}
    pairs_of: dict[str, list[tuple[str, str]]] = {}
    for p in pairs:
        for n in p:
            pairs_of.setdefault(n, []).append(p)
    # each node's best pair: a slow node drags every pair it is in, a healthy node has at least one good pair. One
    # value per node keeps the slow node's share of the distribution at 1/n (each of its pairs would be 2/n)
    best: dict[str, float | None] = {}
    for n, ps in pairs_of.items():
        got = [v for v in (values[tasks[p].key] for p in ps) if v is not None]
        best[n] = max(got) if got else None
    slow_nodes, nref, nd, nthr = _judge(rule, "pair", "each node's best pair", best, judged)
    suspects = [n for n in topo.nodes if n in slow_nodes]
    healthy = [n for n in topo.nodes if n in best and n not in slow_nodes and best[n] is not None]
    found: list[Finding] = []
    named = yield from _resolve("pair", suspects, healthy, rule,
                                {n: [tasks[p].key for p in pairs_of[n]] for n in suspects},
                                lambda n: f"pair level: the best pair of {n} {best[n]:.3g} GB/s < {nthr:.3g} (median "
                                          f"{nref:.3g}, log-MAD {nd:.2g})")
    found += named
    # a slow pair of two nodes that are fine elsewhere: the link between them (cable, port, switch path)
    slow_keys, ref, d, thr = _judge(rule, "pair", "each pair (links)", values, judged)
    for p, t in tasks.items():
        if t.key in slow_keys and not set(p) & set(suspects):
            v = values[t.key]
            found.append(Finding("pair", p, "pair", [t.key],
                                 f"pair level: link {p[0]}-{p[1]} {v:.3g} GB/s < {thr:.3g} (median {ref:.3g}) while "
                                 "both nodes are fine with other partners"))
    return found


def _hca_level(topo: Topo, hcas: Sequence[str], rule: Rule, judged: list[dict[str, object]]
               ) -> Generator[list[Task], Results, list[Finding]]:
    """ib_write_bw of every HCA port over the pair level's two matchings. Values are GB/s (the runner converts
    perftest's Gb/s or MB/s). Each port's best partner decides whether the port is bad: a bad port or cable is slow
    with every partner; a healthy port has one good partner at least. Judged per HCA port across nodes (the rails may
    differ in speed: a storage rail at 200 Gb/s beside compute rails at 400)."""
    pairs = matchings(topo)
    if not pairs or not hcas:
        return []
    tasks = {(p, h): task("hca", "measure", p, f"ib_write_bw {h} {p[0]}<->{p[1]}", hca=h) for h in hcas for p in pairs}
    res = yield list(tasks.values())
    found: list[Finding] = []
    for h in hcas:
        values = {p: res.get(tasks[(p, h)].key) for p in pairs}
        partners: dict[str, list[tuple[str, str]]] = {}
        for p in pairs:
            for n in p:
                partners.setdefault(n, []).append(p)
        best: dict[str, float | None] = {}
        for n, ps in partners.items():
            got = [v for v in (values[p] for p in ps) if v is not None]
            best[n] = max(got) if got else None
        slow, ref, d, thr = _judge(rule, "hca", f"{h}: each node's best partner", best, judged)
        for n in topo.nodes:
            if n not in slow:
                continue
            ps = partners[n]
            bw = best[n] or 0.0
            others = ", ".join(f"{q[1] if q[0] == n else q[0]} {values[q]:.3g}" for q in ps if values[q] is not None)
            found.append(Finding(
                "port", (n,), "hca", [tasks[(p, h)].key for p in ps],
                f"hca level: {n} port {h} (bad port or cable): best partner {bw * 8:.4g} Gb/s < {thr * 8:.4g} (median "
                f"{ref * 8:.4g} Gb/s over the nodes' {h}); GB/s with each partner: {others}",
                # slow with two different partners, measured apart: confirmed; with one partner only: a suspect
                confirmed=len([q for q in ps if values[q] is not None]) >= 2, port=h))
        slow_pairs, pref, _, pthr = _judge(rule, "hca", f"{h}: each pair (rails)",
                                           {"+".join(p): v for p, v in values.items()}, judged)
        for p in pairs:
            v = values[p]
            if "+".join(p) in slow_pairs and not set(p) & set(slow) and v is not None:
                found.append(Finding("rail", p, "hca", [tasks[(p, h)].key],
                                     f"hca level: rail {h} between {p[0]} and {p[1]} {v * 8:.4g} Gb/s < {pthr * 8:.4g} "
                                     f"(median {pref * 8:.4g}) while both ports are fine with other partners: the cable "
                                     "or switch path between them", port=h))
    return found


def _all_pairs(topo: Topo, rule: Rule, judged: list[dict[str, object]]
               ) -> Generator[list[Task], Results, list[Finding]]:
    """Every pair (the baseline the bench compares with): a node is named when its median pair is an outlier."""
    nodes = topo.nodes
    tasks = [task("pair", "measure", (a, b), f"pair {a}+{b}") for i, a in enumerate(nodes) for b in nodes[i + 1:]]
    res = yield tasks
    per_node: dict[str, float | None] = {}
    for n in nodes:
        vals = [res.get(t.key) for t in tasks if n in t.nodes]
        good = [v for v in vals if v is not None]
        per_node[n] = sorted(good)[len(good) // 2] if good else None
    slow, ref, d, thr = _judge(rule, "pair", "each node's median pair", per_node, judged)
    return [Finding("node", (n,), "pair", [t.key for t in tasks if n in t.nodes],
                    f"all pairs: median pair of {n} {per_node[n]:.3g} GB/s < {thr:.3g} (median {ref:.3g})") for n in slow]


def _leaf_level(topo: Topo, rule: Rule, judged: list[dict[str, object]]
                ) -> Generator[list[Task], Results, list[Finding]]:
    leaves = {leaf: m for leaf, m in topo.leaves().items() if len(m) >= 2}
    if not leaves:
        return []
    tasks = {leaf: task("leaf", "measure", m, f"leaf {leaf or '(all)'}: its {len(m)} nodes") for leaf, m in leaves.items()}
    res = yield list(tasks.values())
    values = {leaf: res.get(t.key) for leaf, t in tasks.items()}
    slow, ref, d, thr = _judge(rule, "leaf", "each leaf", values, judged)
    healthy = [n for leaf, m in leaves.items() if leaf not in slow and values[leaf] is not None for n in m]
    found: list[Finding] = []
    for leaf in slow:
        why = f"leaf level: {leaf} {values[leaf]:.3g} GB/s < {thr:.3g} (reference {ref:.3g})"
        found += yield from _bisect("leaf", leaves[leaf], healthy, rule, [tasks[leaf].key], why, leaf)
    return found


def _all_level(topo: Topo, rule: Rule, expected: float | None) -> Generator[list[Task], Results, list[Finding]]:
    if len(topo.nodes) < 2:
        return []
    t = task("all", "measure", topo.nodes, f"all {len(topo.nodes)} nodes")
    res = yield [t]
    v = res.get(t.key)
    if v is None or expected is None or v >= expected * (1 - rule.tol):
        return []  # no reference to judge one number against (the inventory does not say), or as expected
    why = f"all level: {v:.3g} GB/s < {expected * (1 - rule.tol):.3g} ({1 - rule.tol:.0%} of the expected {expected:.3g})"
    return (yield from _bisect("all", list(topo.nodes), [], rule, [t.key], why, None))


# --- bisection and resolution ----------------------------------------------------------------------------------

def _pad(half: list[str], healthy: Sequence[str], avoid: set[str]) -> list[str]:
    """A half of one node cannot run an inter-node all-reduce: give it a healthy partner."""
    if len(half) > 1:
        return half
    partner = next((h for h in healthy if h not in avoid), None)
    return half + [partner] if partner else half


def _bisect(level: str, group: list[str], healthy: list[str], rule: Rule, evidence: list[str], why: str,
            switch: str | None) -> Generator[list[Task], Results, list[Finding]]:
    current, healthy, evidence = list(group), list(healthy), list(evidence)
    while len(current) > 2:
        mid = len(current) // 2
        h1, h2 = current[:mid], current[mid:]
        avoid = set(current)
        t1 = task(level, "half", _pad(h1, healthy, avoid), f"{level} bisection: {'+'.join(h1)} vs {'+'.join(h2)}")
        t2 = task(level, "half", _pad(h2, healthy, avoid), t1.why)
        res = yield [t1, t2]
        v1, v2 = res.get(t1.key), res.get(t2.key)
        if v1 is None or v2 is None:
            return []  # a failed half: reported as an error measurement, nothing named from it
        if rule.slower(v1, v2):
            current, evidence = h1, evidence + [t1.key]
            healthy += h2
        elif rule.slower(v2, v1):
            current, evidence = h2, evidence + [t2.key]
            healthy += h1
        else:
            return [Finding("group", tuple(current), level, evidence + [t1.key, t2.key],
                            f"{why}; both halves ({v1:.3g} and {v2:.3g} GB/s) are alike: the group as a whole "
                            "(its switch or uplink) is slow", switch=switch)]
    return (yield from _resolve(level, current, healthy, rule, {n: evidence for n in current}, lambda n: why))


def _resolve(level: str, suspects: Sequence[str], healthy: Sequence[str], rule: Rule,
             evidence: dict[str, list[str]], why) -> Generator[list[Task], Results, list[Finding]]:  # type: ignore[no-untyped-def]
    """Each suspect with a healthy partner, beside a control pair of two healthy nodes: named when slower than the
    control by the rule's tolerance."""
    if not suspects:
        return []
    good = [h for h in healthy if h not in suspects]
    if not good:
        return [Finding("node", (s,), level, evidence[s], why(s) + " (no healthy node to confirm against)")
                for s in suspects]
    tasks = {s: task(level, "resolve", (s, good[i % len(good)]), f"{level}: is {s} the slow one?")
             for i, s in enumerate(suspects)}
    control = task(level, "control", good[-2:], "control pair") if len(good) >= 2 else None
    res = yield list(tasks.values()) + ([control] if control else [])
    ref = res.get(control.key) if control else None
    out = []
    for s, t in tasks.items():
        v = res.get(t.key)
        if v is None:
            continue
        if ref is not None and rule.slower(v, ref):
            out.append(Finding("node", (s,), level, evidence[s] + [t.key],
                               f"{why(s)}; with {t.nodes[1]} {v:.3g} GB/s vs control {ref:.3g}"))
    return out


# --- merging and confirmation ------------------------------------------------------------------------------------

def _merge(findings: list[Finding]) -> list[Finding]:
    """One finding per node (evidence joined across levels); pair/group findings kept as they are."""
    by_node: dict[str, Finding] = {}
    out: list[Finding] = []
    for f in findings:
        if f.kind != "node":
            out.append(f)
            continue
        n = f.nodes[0]
        if n in by_node:
            g = by_node[n]
            g.evidence = list(dict.fromkeys(g.evidence + f.evidence))
            g.detail += "; " + f.detail
            g.confirmed = g.confirmed or f.confirmed
        else:
            by_node[n] = Finding(f.kind, f.nodes, f.level, list(f.evidence), f.detail, f.switch, f.confirmed, f.port)
            out.append(by_node[n])
    return out


# the confirmation's rounds: (step of the re-measurement, step of its control). Two rounds, one after the other,
# each beside its own control: on a loaded 2-core lab a healthy pair measured slow once was slow again in the next
# batch (0.24, then 0.147 GB/s beside a control at 0.859) and was confirmed as a "link" by one round; a real fault
# is slow every time, so a second independent round costs a true finding 2 jobs and a noise one its confirmation
ROUNDS = (("confirm", "control"), ("reconfirm", "recontrol"))


def _confirm(topo: Topo, rule: Rule, findings: list[Finding]) -> Generator[list[Task], Results, None]:
    """A node named by measurements of two levels is confirmed. Anything else (a node named by one level, a slow link, a
    slow group) is measured again beside a control of as many healthy nodes, in two rounds one after the other (the
    second beside other healthy nodes where there are enough), and confirmed only when it is slower than the control
    by the rule's tolerance in both: one noisy measurement, or one noisy stretch of time, never drains a node."""
    findings = [f for f in findings if f.kind not in HCA_KINDS]  # the hca level decided its own
    for f in findings:
        # two measurements of one level run back to back (a pair and its resolve step) and share the same noise:
        # only evidence from two different levels confirms without a later re-measurement (seen on a loaded 24.11
        # lab: a noisy pair and its resolve named a healthy node beside the slow one)
        f.confirmed = f.kind == "node" and len({key.split(":", 1)[0] for key in f.evidence}) >= 2
    todo = [f for f in findings if not f.confirmed]
    bad = {n for f in findings for n in f.nodes}
    good = [n for n in topo.nodes if n not in bad]
    for rnd, (step, cstep) in enumerate(ROUNDS):
        checks: dict[int, tuple[Task, Task]] = {}
        for i, f in enumerate(todo):
            k = len(f.nodes)
            if len(good) < k:
                continue  # nothing healthy to compare with: stays a suspect
            start = (rnd * k) % len(good) if len(good) >= 2 * k else 0
            ctrl = (good[start:] + good[:start])[:k]
            level = "node" if k == 1 else f.level
            again = task(level, step, f.nodes, f"confirming {'+'.join(f.nodes)} ({rnd + 1}/{len(ROUNDS)})")
            control = task(level, cstep, ctrl, f"control for {'+'.join(f.nodes)} ({rnd + 1}/{len(ROUNDS)})")
            checks[i] = (again, control)
        if not checks:
            return
        batch = list({t.key: t for pair in checks.values() for t in pair}.values())
        res = yield batch
        still = []
        for i, (again, control) in checks.items():
            f = todo[i]
            v, ref = res.get(again.key), res.get(control.key)
            if v is not None and ref is not None and rule.slower(v, ref):
                f.evidence.append(again.key)
                f.detail += f"; re-measured {v:.3g} GB/s vs control {'+'.join(control.nodes)} {ref:.3g}"
                still.append(f)
            elif v is not None and ref is not None:
                f.detail += (f"; not confirmed: re-measured {v:.3g} GB/s vs control {'+'.join(control.nodes)} "
                             f"{ref:.3g} (limit {ref * (1 - rule.tol):.3g})")
        todo = still
    for f in todo:
        f.confirmed = True
