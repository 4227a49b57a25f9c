"""A site's Slurm files -> an inventory that holds the whole site (`slurmkit conf import`). Pure: files in, a YAML-ready
mapping out.

What the schema models becomes its fields (controllers, node groups with their geometry, memory, reserve, typed GPUs
and features, partitions, topology switches); everything else is carried as the site wrote it: global keys in
``slurm_conf``, per-node keys in a group's ``slurm``, per-partition keys in ``extra``, gres.conf records the GPU model
cannot hold in a group's (or the top level's) ``gres_conf``, cgroup.conf in ``cgroup_conf``, NodeSet lines in
``nodesets``; slurmdbd.conf, plugstack.conf, job_container.conf and acct_gather.conf into ``accounting`` and
``runtime`` with their pass-through keys (adopt/sidefiles.py). The inventory says ``adopted: true``: `conf generate`
then writes the site's files as they are (no slurmkit recommendation added), so `conf diff` of the import against the directory it came from is empty.

Nodes are grouped by identical node lines (after NodeName=DEFAULT is applied, as read_config.c does) whose hosts
also have identical gres.conf records. What cannot be carried is named, one line each with its file and line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmkit import hostlist
from slurmkit.generate import confparse as cp
from slurmkit.model.cluster import REPEATABLE_SLURM_KEYS

_GEOMETRY_KEYS = ("cpus", "procs", "boards", "socketsperboard", "sockets", "corespersocket", "threadspercore")
_WRITTEN_GEOMETRY = ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore")
_CONTROLLER_KEYS = {"slurmctldhost", "controlmachine", "controladdr", "backupcontroller", "backupaddr"}
_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_FEATURE_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")
_TIME_RE = re.compile(r"^(UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}(:\d{2})?)?)$", re.ASCII)
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# node names as Slurm takes them, '_' included (slurmkit.model.load._NODE_LABEL_RE)
_NODE_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_REPEATABLE = frozenset(k.lower() for k in REPEATABLE_SLURM_KEYS)
_GPU_MODEL_KEYS = {"name", "type", "file", "cores", "links", "autodetect"}


@dataclass
class Imported:
    inventory: dict[str, Any]
    lost: list[str] = field(default_factory=list)  # file:line: what the inventory cannot carry (exit non-zero)
    notes: list[str] = field(default_factory=list)  # how something was read (not a loss)


def _value_ok(v: str) -> bool:
    """What the inventory can carry and write back (model/load.py _kv_value)."""
    return not re.search(r'["\x00-\x08\x0a-\x1f\x7f]|[^\x00-\x7e]', v)


def _group_name(hosts: str, taken: set[str]) -> str:
    first = hostlist.expand(hosts)[0]
    base = re.sub(r"[^A-Za-z0-9_.-]", "", re.sub(r"\d+$", "", first)) or "nodes"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    return name


def _pairs_map(pairs: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k.lower() in _REPEATABLE and k in out:
            prev = out[k]
            out[k] = [*prev, v] if isinstance(prev, list) else [prev, v]
        else:
            out[k] = v
    return out


def import_site(files: Mapping[str, str], version: str, own: Mapping[str, Any] | None = None) -> Imported:
    """``files``: the site's files by the name Slurm resolves them under (adopt.read.read_site); ``own``: slurmkit's
    own sections (hooks, submit_policy, site, rollout) from the inventory copy of a directory slurmkit wrote."""
    res = Imported({})
    conf = cp.parse_slurm_conf(files.get("slurm.conf", ""), "slurm.conf", files, release=version)
    for p in conf.problems:
        res.lost.append(f"{p} (Slurm itself would not read this file)")
    inv: dict[str, Any] = {"cluster": "", "slurm_version": version, "adopted": True}
    res.inventory = inv
    _globals(conf, inv, res)
    groups = _nodes(conf, files, inv, res)
    _partitions(conf, inv, res)
    if conf.nodesets:
        inv["nodesets"] = {}
        for rec in conf.nodesets:
            pairs = list(rec.pairs[1:])
            if not _NAME_RE.fullmatch(rec.head) or not all(_KEY_RE.fullmatch(k) and _value_ok(v) for k, v in pairs):
                res.lost.append(f"{rec.where}: NodeSet={rec.head}: a name or value the inventory cannot hold")
                continue
            inv["nodesets"][rec.head] = _pairs_map(pairs)
    for rec in conf.downnodes:
        res.lost.append(f"{rec.where}: DownNodes={rec.head}: not carried (set the nodes down with scontrol instead)")
    if "cgroup.conf" in files:
        probs: list[str] = []
        cg = cp.parse_settings(files["cgroup.conf"], "cgroup.conf", files, probs, release=inv["slurm_version"])
        res.lost += [f"{p} (Slurm itself would not read this file)" for p in probs]
        pairs = []
        for _lk, (k, v, rec) in cg.items():
            if _KEY_RE.fullmatch(k) and _value_ok(v):
                pairs.append((k, v))
            else:
                res.lost.append(f"{rec.where}: {k}={v}: a key or value the inventory cannot hold")
        if pairs:
            inv["cgroup_conf"] = _pairs_map(pairs)
    _topology(files, inv, res, groups, conf)
    from slurmkit.adopt.sidefiles import import_side_files

    import_side_files(files, inv, conf, version, res.lost, res.notes)
    for k, v in (own or {}).items():
        inv[k] = v
        res.notes.append(f"{k}: carried from the slurmkit.yaml beside slurm.conf (slurmkit's own settings)")
    if "submit_policy" in (own or {}):
        for g in inv.get("node_groups", []):
            gres = next((v for k, v in g.get("slurm", {}).items() if k.lower() == "gres"), "")
            if "gpu" in gres:
                # job_submit.lua's per-partition GPU facts come from the gpus model (jobsubmit.partition_facts)
                res.lost.append(f"slurm.conf: NodeName={g['hosts']} Gres={gres}: GPUs carried as written, not "
                                "modelled (several types, MIG); submit_policy would treat these nodes as CPU-only")
    if "topology.yaml" in files:
        _topology_yaml(files["topology.yaml"], inv, res)
    return res


def _ordered_hosts(text: str) -> list[str]:
    """A topology.yaml ring's ``nodes``: a hostlist walked in the order written (ring_record.c hostlist_shift at
    slurm-26-05-3-1), so each comma item is expanded on its own and the order kept (NodeSet would sort)."""
    items = re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text)
    return [h for it in items if it.strip() for h in hostlist.expand(it.strip())]


def _topology_yaml(text: str, inv: dict[str, Any], res: Imported) -> None:
    """topology.yaml (topology.yaml(5), 25.05+; Slurm reads it instead of topology.conf): the cluster-default topology
    (tree, block, ring, torus3d, flat) becomes the inventory's topology; the generator writes it back as the one
    topology ``default``. More topologies, or another name (partitions may name it in Topology=), cannot be carried."""
    import yaml

    if "topology" in inv:
        res.lost.append("topology.yaml:1: topology.conf is imported too, but Slurm 25.05+ reads only topology.yaml: "
                        "remove one")
        return
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        res.lost.append(f"topology.yaml: not YAML ({getattr(exc, 'problem', exc)})")
        return
    if not isinstance(doc, list) or not doc or not all(isinstance(t, dict) for t in doc):
        res.lost.append("topology.yaml:1: expected a list of topologies (topology.yaml(5))")
        return
    chosen = next((t for t in doc if t.get("cluster_default") is True), doc[0])
    name = chosen.get("topology")
    for t in doc:
        if t is not chosen:
            res.lost.append(f"topology.yaml: topology {t.get('topology')!r}: only the cluster default "
                            f"({name!r}) is carried")
    if name != "default":
        res.lost.append(f"topology.yaml: topology {name!r} would be written back as 'default' (a partition's "
                        "Topology= naming it would break)")
    kinds = [k for k in ("tree", "block", "ring", "torus3d", "flat") if k in chosen]
    if len(kinds) != 1:
        res.lost.append(f"topology.yaml: topology {name!r}: expected exactly one of tree, block, ring, torus3d, flat")
        return
    kind, body = kinds[0], chosen[kinds[0]]
    try:
        if kind == "flat":
            return  # topology/flat: what Slurm does without topology.yaml (the generator writes none)
        if kind == "tree":
            sws = []
            for sw in body["switches"]:
                if "nodes" in sw:
                    sws.append({"name": str(sw["switch"]), "nodes": str(sw["nodes"])})
                else:
                    ch = sw["children"]
                    sws.append({"name": str(sw["switch"]), "switches": ",".join(ch) if isinstance(ch, list) else str(ch)})
            inv["topology"] = {"switches": sws}
        elif kind == "block":
            inv["topology"] = {"blocks": [{"name": str(b["block"]), "nodes": str(b["nodes"])} for b in body["blocks"]]}
            if body.get("block_sizes"):
                inv["topology"]["block_sizes"] = [int(x) for x in body["block_sizes"]]
        elif kind == "ring":
            inv["topology"] = {"rings": [{"name": str(r["ring"]), "nodes": _ordered_hosts(str(r["nodes"]))}
                                         for r in body["rings"]]}
        else:
            def xyz(d: Mapping[str, Any]) -> list[int]:
                return [int(d["x"]), int(d["y"]), int(d["z"])]

            inv["topology"] = {"toruses": [{"name": str(t["name"]), "dims": xyz(t["dims"]), "nodes": str(t["nodes"]),
                                            "placements": [xyz(p["dims"]) for p in t.get("placements") or []]}
                                           for t in body["toruses"]]}
    except (KeyError, TypeError, ValueError) as exc:
        inv.pop("topology", None)
        res.lost.append(f"topology.yaml: topology {name!r}: {kind} not as topology.yaml(5) has it ({type(exc).__name__}: "
                        f"{exc})")


def _globals(conf: cp.SlurmConf, inv: dict[str, Any], res: Imported) -> None:
    name = conf.value("ClusterName")
    if not re.fullmatch(r"[a-z0-9_-]+", name or ""):
        # slurm.conf(5) ClusterName: "The cluster name will be lowercased" (22.05, 24.11): slurmctld uses it so
        lowered = (name or "").lower()
        if lowered and re.fullmatch(r"[a-z0-9_-]+", lowered):
            res.notes.append(f"ClusterName={name}: written as {lowered} (Slurm lower-cases it)")
            name = lowered
        else:
            where = conf.settings["clustername"][2].where if "clustername" in conf.settings else "slurm.conf:1"
            res.lost.append(f"{where}: ClusterName={name!r}: the inventory needs a name of a-z, 0-9, _ and -")
            name = "cluster"
    inv["cluster"] = name
    ctl: dict[str, Any] = {}
    hosts, addrs = [], False
    controller_lines: list[str] = []
    if conf.controllers and "slurmctldhost" in conf.settings:
        controller_lines = [r.head for r in conf.records if r.kind == "slurmctldhost"]
    else:
        cm, ca = conf.value("ControlMachine"), conf.value("ControlAddr")
        bc, ba = conf.value("BackupController"), conf.value("BackupAddr")
        controller_lines = [f"{h}({a})" if a else h for h, a in ((cm, ca), (bc, ba)) if h]
    for line in controller_lines:
        m = re.fullmatch(r"([^()]+)(\((.*)\))?", line)
        host = m.group(1) if m else line
        addrs = addrs or bool(m and m.group(2))
        hosts.append(host)
    # an FQDN is a hostname the inventory holds (model/load.py _hostname: dot-separated RFC 1123 labels); an address
    # is not (slurmctld finds itself by name), nor a name outside RFC 1123: those stay SlurmctldHost lines
    bad = [h for h in hosts if not all(_HOST_RE.fullmatch(label) for label in h.split("."))
           or re.fullmatch(r"\d+(\.\d+){3}", h)]
    if hosts and not bad:
        ctl["hosts"] = hosts
    elif hosts:
        ctl["hosts"] = ["localhost"]
        addrs = True  # carried as SlurmctldHost lines in slurm_conf (which replace controller.hosts)
    port = conf.value("SlurmctldPort")
    # slurm.conf(5) SlurmctldPort "The default value is SLURMCTLD_PORT as established at system build time" -- 6817
    # (slurm/slurm.h.in, 22.05 and 24.11); StateSaveLocation "The default value is /var/spool" (22.05 and 24.11).
    # A range LOW-HIGH (read_config.c _validate_and_set_defaults: slurmctld_port_count = HIGH + 1 - LOW, HIGH > LOW,
    # 22.05-26.05; ParallelCluster writes 6820-6829) is the inventory's controller.port as written
    rng = re.fullmatch(r"(\d+)-(\d+)", port)
    if port.isdigit() and 0 < int(port) < 65536:
        ctl["port"] = int(port)
    elif rng and 0 < int(rng.group(1)) < int(rng.group(2)) < 65536:
        ctl["port"] = f"{int(rng.group(1))}-{int(rng.group(2))}"
    else:
        ctl["port"] = 6817
    ctl["state_dir"] = conf.value("StateSaveLocation") or "/var/spool"
    if not ctl["state_dir"].startswith("/") or not _value_ok(ctl["state_dir"]) or " " in ctl["state_dir"]:
        res.lost.append(f"{conf.settings['statesavelocation'][2].where}: StateSaveLocation: not an absolute path")
        ctl["state_dir"] = "/var/spool"
    inv["controller"] = ctl
    pairs: list[tuple[str, str]] = []
    if addrs:
        pairs += [("SlurmctldHost", line) for line in controller_lines]
    if port and str(ctl["port"]) != port:
        pairs.append(("SlurmctldPort", port))  # a port range (SlurmctldPort=6817-6818) is kept as written
    seen: dict[str, int] = {}
    for rec in conf.records:
        kind = rec.kind
        if not rec.pairs or rec.include or kind in ("nodename", "partitionname", "nodeset", "downnodes", "clustername",
                                                     "statesavelocation", "slurmctldport") or kind in _CONTROLLER_KEYS:
            continue
        k, v = rec.pairs[0]
        if rec.ops and rec.ops[0]:
            res.lost.append(f"{rec.where}: {k}{rec.ops[0]}={v}: an operator the inventory cannot hold")
            continue
        if not _KEY_RE.fullmatch(k) or not _value_ok(v):
            res.lost.append(f"{rec.where}: {k}={v}: a key or value the inventory cannot hold")
            continue
        if kind in seen and kind not in _REPEATABLE:
            pairs[seen[kind]] = (k, v)  # the last line wins (parse_config.c reads a key's latest value)
            continue
        seen.setdefault(kind, len(pairs))
        pairs.append((k, v))
    if pairs:
        inv["slurm_conf"] = _pairs_map(pairs)


def _gres_records(files: Mapping[str, str], nodes: list[str], inv: dict[str, Any], res: Imported) -> dict[str, list[tuple[tuple[str, str], ...]]]:
    """host -> its gres.conf records (original keys, no NodeName); records without Name (a global AutoDetect=)
    go to the top level's ``gres_conf``."""
    out: dict[str, list[tuple[tuple[str, str], ...]]] = {h: [] for h in nodes}
    if "gres.conf" not in files:
        return out
    probs: list[str] = []
    known = set(nodes)
    top: list[dict[str, Any]] = []
    for rec in cp.expand_includes(files["gres.conf"], "gres.conf", files, probs, line_keys=cp.GRES_LINE_KEYS,
                                  release=inv.get("slurm_version")):
        pairs = tuple((k, v) for k, v in rec.pairs if k.lower() != "nodename")
        if not all(_KEY_RE.fullmatch(k) and _value_ok(v) for k, v in pairs):
            res.lost.append(f"{rec.where}: a gres.conf key or value the inventory cannot hold")
            continue
        for k, v in pairs:
            if k.lower() in cp.FILE_KEYS:
                cp.expand_files(v, rec.where, k)  # UsageError naming the line: never carried, never written
        spec = rec.get("NodeName")
        if not any(k.lower() == "name" for k, _ in pairs):
            if spec is None:
                top.append(dict(pairs))
            else:
                res.lost.append(f"{rec.where}: NodeName={spec} without Name=: not carried")
            continue
        members = nodes if spec is None else hostlist.expand(spec, rec.where)
        stray = [h for h in members if h not in known]
        if stray:
            res.lost.append(f"{rec.where}: gres.conf names {hostlist.fold(stray)}, which slurm.conf does not define "
                            "(no slurmd reads this record for them)")
        for h in members:
            if h in known:
                out[h].append(pairs)
    res.lost += [f"{p} (Slurm itself would not read this file)" for p in probs]
    if top:
        inv["gres_conf"] = top
    return out


def _gpu_model(node_gres: str, recs: list[tuple[tuple[str, str], ...]]) -> dict[str, Any] | None:
    """The ``gpus`` entry when the node's GPUs are one type (gpu:T:N) described by File= records the model writes
    back (Name=gpu Type=T File= [Cores=] [Links=] [AutoDetect=]); else None (carried as the site wrote it)."""
    try:
        g = cp.parse_gres(node_gres)
    except ValueError:
        return None
    if len(g) != 1 or not recs:
        return None
    (name, gtype), count = next(iter(g.items()))
    if name != "gpu" or not gtype or not _NAME_RE.fullmatch(gtype) or node_gres.count(":") != 2:
        return None
    files: list[str] = []
    cores: list[str] = []
    links: list[str] = []
    auto: set[str] = set()
    for r in recs:
        d = {k.lower(): v for k, v in r}
        if set(d) - _GPU_MODEL_KEYS or d.get("name") != "gpu" or d.get("type") != gtype or "file" not in d:
            return None
        try:
            fl = cp.expand_files(d["file"])
        except ValueError:
            return None
        files += fl
        if "cores" in d:
            cores += [d["cores"]] * len(fl)
        if "links" in d:
            if len(fl) != 1:
                return None
            links.append(d["links"])
        auto.add(d.get("autodetect", "off").lower())
    if len(files) != count or len(set(files)) != count or (cores and len(cores) != count) or len(auto) != 1:
        return None
    if links and len(links) != count:
        return None
    if auto - {"off", "nvml", "nvidia"}:
        return None
    folded = hostlist.fold(files)
    if hostlist.expand(folded) != files:
        return None  # the device order is the site's (GPU index order): keep it as written
    out: dict[str, Any] = {"type": gtype, "count": count, "files": folded}
    if cores:
        out["cores"] = cores
    if links:
        try:
            out["links"] = [[int(x) for x in row.split(",")] for row in links]
        except ValueError:
            return None
        if any(len(r) != count or r[i] != -1 for i, r in enumerate(out["links"])):
            return None
    if auto != {"off"}:
        out["autodetect"] = auto.pop()
    return out


def _nodes(conf: cp.SlurmConf, files: Mapping[str, str], inv: dict[str, Any], res: Imported) -> list[str]:
    all_hosts: list[str] = []
    per_line: list[tuple[cp.Record, list[str]]] = []
    for rec in conf.nodes:
        try:
            hs = hostlist.expand(rec.head, rec.where)
        except ValueError as exc:
            res.lost.append(f"{rec.where}: NodeName={rec.head}: {exc}")
            continue
        per_line.append((rec, hs))
        all_hosts += hs
    gres = _gres_records(files, all_hosts, inv, res)
    # identical node lines whose hosts have identical gres.conf records form one group (per-host range keys --
    # NodeAddr=10.0.0.[1-4] -- tie a line's hosts to its values in order, so such lines are never merged)
    buckets: dict[tuple[Any, ...], list[tuple[cp.Record, list[str]]]] = {}
    order: list[tuple[Any, ...]] = []
    for rec, hs in per_line:
        line = tuple((k.lower(), v) for k, v in rec.pairs[1:])
        ranged = any(k in ("nodeaddr", "nodehostname") for k, _ in line)
        by_gres: dict[tuple[Any, ...], list[str]] = {}
        for h in hs:
            by_gres.setdefault(tuple(sorted(gres[h])), []).append(h)
        if ranged and len(by_gres) > 1:
            res.lost.append(f"{rec.where}: NodeName={rec.head}: its nodes differ in gres.conf and the line has "
                            "per-node NodeAddr/NodeHostname ranges; not carried")
            continue
        for gkey, hosts_ in by_gres.items():
            key = (line, gkey, rec.where if ranged else "")
            if key not in buckets:
                buckets[key] = []
                order.append(key)
            buckets[key].append((rec, hosts_))
    taken: set[str] = set()
    out_groups = []
    for key in order:
        members = buckets[key]
        rec = members[0][0]
        hosts = [h for _r, hs in members for h in hs]
        folded = hostlist.fold(hosts) if not key[2] else rec.head
        bad = [h for h in hosts if not all(_NODE_RE.fullmatch(label) for label in h.split("."))]
        if bad:
            res.lost.append(f"{rec.where}: node name {bad[0]!r} is not a hostname the inventory can hold")
            continue
        g = _group(rec, folded, list(gres[hosts[0]]), res)
        if g is None:
            continue
        g = {"name": _group_name(folded, taken), **g}
        out_groups.append(g)
    if out_groups:
        inv["node_groups"] = out_groups
    dynamic = _dynamic(conf, inv, len(all_hosts))
    if not per_line and not dynamic:
        res.lost.append("slurm.conf:1: no NodeName lines and no MaxNodeCount: the inventory needs node groups, or "
                        "MaxNodeCount for nodes that register themselves (slurmd -Z)")
    return all_hosts


def _dynamic(conf: cp.SlurmConf, inv: dict[str, Any], static: int) -> bool:
    """A MaxNodeCount above the site's NodeName nodes is room for dynamic nodes (``slurmd -Z``, dynamic_nodes.shtml
    22.05 and 24.11; slurm.conf(5) MaxNodeCount "will be ignored if less than the number of nodes found in the
    slurm.conf"): the inventory's ``dynamic_nodes``, not a passthrough key. Otherwise it stays in ``slurm_conf``."""
    v = conf.value("MaxNodeCount")
    if not v.isdigit() or int(v) <= static or int(v) > 0xFFFFFFFE:
        return False
    inv["dynamic_nodes"] = {"max_node_count": int(v)}
    sc = inv.get("slurm_conf", {})
    for k in [k for k in sc if k.lower() == "maxnodecount"]:
        del sc[k]
    if "slurm_conf" in inv and not sc:
        del inv["slurm_conf"]
    return True


def _group(rec: cp.Record, hosts: str, grecs: list[tuple[tuple[str, str], ...]], res: Imported) -> dict[str, Any] | None:
    pairs = list(rec.pairs[1:])
    d = {k.lower(): v for k, v in pairs}
    try:
        geo = cp.node_geometry(d)
    except ValueError:
        res.lost.append(f"{rec.where}: NodeName={rec.head}: a geometry that is not a number")
        return None
    g: dict[str, Any] = {"hosts": hosts,
                         "cpu": {"sockets": geo.sockets, "cores_per_socket": geo.cores_per_socket,
                                 "threads_per_core": geo.threads_per_core},
                         "memory_mb": geo.real_memory}
    written = {"cpus": str(geo.sockets * geo.cores_per_socket * geo.threads_per_core), "sockets": str(geo.sockets),
               "corespersocket": str(geo.cores_per_socket), "threadspercore": str(geo.threads_per_core)}
    slurm: list[tuple[str, str]] = []
    if cp.node_geometry(written) != cp.node_geometry({k: v for k, v in d.items() if k in _GEOMETRY_KEYS}):
        # what slurmctld makes of the site's keys differs from the model's four: keep the site's own
        for k in _WRITTEN_GEOMETRY:
            slurm.append((k, d.get(k.lower(), "")))
        slurm += [(k, v) for k, v in pairs if k.lower() in ("procs", "boards", "socketsperboard")]
    reserve: dict[str, int] = {}
    gpus = None
    for k, v in pairs:
        lk = k.lower()
        if lk in _GEOMETRY_KEYS or lk == "realmemory":
            continue
        if lk == "memspeclimit" and v.isdigit():
            reserve["memory_mb"] = int(v)
        elif lk == "corespeccount" and v.isdigit():
            reserve["cores"] = int(v)
        elif lk in ("feature", "features") and all(_FEATURE_RE.fullmatch(f) for f in v.split(",")) and v:
            g["features"] = v.split(",")
        elif lk == "weight" and v.isdigit():
            g["weight"] = int(v)
        elif lk == "gres" and (gpus := _gpu_model(v, grecs)) is not None:
            g["gpus"] = gpus
        elif not _KEY_RE.fullmatch(k) or not _value_ok(v):
            res.lost.append(f"{rec.where}: {k}={v}: a key or value the inventory cannot hold")
        else:
            slurm.append((k, v))
    if reserve:
        g["reserve"] = reserve
    if slurm:
        g["slurm"] = dict(slurm)
    if grecs and gpus is None:
        g["gres_conf"] = [dict(r) for r in grecs]
    return g


_EXCLUSIVITY = {"oversubscribe", "shared", "exclusiveuser", "exclusivetopo", "exclusive"}
_EXCLUSIVE_OF = {(("oversubscribe", "EXCLUSIVE"),): "node", (("exclusiveuser", "YES"),): "user",
                 (("exclusivetopo", "YES"), ("oversubscribe", "EXCLUSIVE")): "topo"}
_SPELLED = {"oversubscribe": "OverSubscribe", "exclusiveuser": "ExclusiveUser", "exclusivetopo": "ExclusiveTopo",
            "exclusive": "Exclusive"}


def _exclusivity(p: dict[str, Any], extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A 26.05 line's Exclusive= (with whatever older exclusivity keys share its line) as the partition's
    ``exclusive`` where one value says it all (the generator writes it back per release), else as the older keys
    that mean the same (slurmdefaults.partition_exclusivity); the inventory holds no Exclusive= in ``extra``."""
    from slurmkit.generate.slurmdefaults import partition_exclusivity

    mine = {k.lower(): v for k, v in extra if k.lower() in _EXCLUSIVITY}
    rest = [(k, v) for k, v in extra if k.lower() not in _EXCLUSIVITY]
    canon = partition_exclusivity(mine)
    if "exclusive" in canon:  # a value Slurm refuses: keep it where validate will name it
        return extra
    key = tuple(sorted((k, v.upper()) for k, v in canon.items()))
    if key in _EXCLUSIVE_OF:
        p["exclusive"] = _EXCLUSIVE_OF[key]
        return rest
    return rest + [(_SPELLED.get(k, k), v) for k, v in canon.items()]


def _partitions(conf: cp.SlurmConf, inv: dict[str, Any], res: Imported) -> None:
    parts = []
    for rec in conf.partitions:
        if not _NAME_RE.fullmatch(rec.head):
            res.lost.append(f"{rec.where}: PartitionName={rec.head}: a name the inventory cannot hold")
            continue
        p: dict[str, Any] = {"name": rec.head}
        extra: list[tuple[str, str]] = []
        for k, v in rec.pairs[1:]:
            lk = k.lower()
            if lk == "nodes":
                p["nodes"] = v
            elif lk == "default" and v.upper() in ("YES", "NO"):
                p["default"] = v.upper() == "YES"
            elif lk == "maxtime" and _TIME_RE.fullmatch(v):
                p["max_time"] = v
            elif lk == "defaulttime" and _TIME_RE.fullmatch(v):
                p["default_time"] = v
            elif lk == "prioritytier" and v.isdigit():
                p["priority_tier"] = int(v)
            elif lk == "qos" and _NAME_RE.fullmatch(v):
                p["qos"] = v
            elif lk in ("default", "maxtime", "defaulttime", "prioritytier", "qos"):
                res.lost.append(f"{rec.where}: PartitionName={rec.head} {k}={v}: a value the inventory cannot hold")
            elif not _KEY_RE.fullmatch(k) or not _value_ok(v):
                res.lost.append(f"{rec.where}: PartitionName={rec.head} {k}={v}: a key or value the inventory cannot hold")
            else:
                extra.append((k, v))
        if any(k.lower() == "exclusive" for k, _ in extra):
            extra = _exclusivity(p, extra)
        if not p.get("nodes"):
            res.lost.append(f"{rec.where}: PartitionName={rec.head} has no Nodes=: the inventory needs its nodes")
            continue
        if extra:
            p["extra"] = dict(extra)
        parts.append(p)
    if parts:
        inv["partitions"] = parts


def _topology(files: Mapping[str, str], inv: dict[str, Any], res: Imported, hosts: list[str],
              conf: cp.SlurmConf | None = None) -> None:
    if "topology.conf" not in files:
        return
    unread = cp.topology_conf_unread(conf, inv.get("slurm_version"), "topology.yaml" in files) if conf else ""
    if unread:
        # skipped as Slurm skips it (a typo inside is no loss); the file stays in DIR, apply leaves it there
        res.notes.append(f"topology.conf: not imported: the site's Slurm never reads it ({unread})")
        return
    switches = []
    blocks: list[dict[str, str]] = []
    sizes: list[int] = []
    for rec in cp.parse_records(files["topology.conf"], "topology.conf"):
        if rec.include:
            res.lost.append(f"{rec.where}: Include in topology.conf: not carried")
            continue
        d = rec.as_dict()
        if rec.kind == "blockname" and set(d) == {"nodes"}:
            blocks.append({"name": rec.head, "nodes": d["nodes"]})
            continue
        if rec.kind == "blocksizes" and all(x.isdigit() for x in rec.head.split(",")):
            sizes = [int(x) for x in rec.head.split(",")]
            continue
        speed = d.pop("linkspeed", None)
        if rec.kind != "switchname" or set(d) - {"nodes", "switches"} or len(d) != 1 or (
                speed is not None and not speed.isdigit()):
            res.lost.append(f"{rec.where}: {rec.render()}: only SwitchName with Nodes= or Switches= (and LinkSpeed=) "
                            "is carried")
            continue
        sw: dict[str, Any] = {"name": rec.head}
        sw.update(d)
        if speed is not None:
            # topology.conf(5) 22.05-26.05 LinkSpeed: "the units used are arbitrary and this information is currently
            # not used" (tree/switch_record.c reads it as S_P_UINT32); slurm-gcp marks placement nodesets with it
            sw["link_speed"] = int(speed)
        switches.append(sw)
    if switches:
        inv["topology"] = {"switches": switches}
    if blocks:
        inv["topology"] = {**inv.get("topology", {}), "blocks": blocks, **({"block_sizes": sizes} if sizes else {})}
    from slurmkit.release import features_for

    try:
        yaml_release = features_for(str(inv["slurm_version"])).topology_yaml
    except (KeyError, ValueError):
        yaml_release = False
    if "topology" in inv and yaml_release:
        # a 25.05+ site that keeps topology.conf: it stays in topology.conf (generate would write topology.yaml, the
        # release's own file, and the first apply would replace the site's file)
        inv["topology"]["file"] = "topology.conf"
