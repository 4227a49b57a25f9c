"""Validate a set of Slurm config files: the cross-file static checks (pure).

Static checks are what slurmctld does not refuse but nodes later trip over (anchors §4.1): GRES counts in
slurm.conf vs gres.conf, every GRES name in GresTypes, ConstrainDevices without File=, memory constraints
without CR_*_Memory, topology nodes unknown / in two leaves / not in any, empty trees, BlockSizes rules.

The real parse by a running slurmctld of the target release is an edge that runs Slurm:
``slurmkit/backend/realparse.py`` (its ``validate`` is these checks, then that parse).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from slurmkit import hostlist
from slurmkit.errors import UsageError
from slurmkit.generate import confparse as cp
from slurmkit.generate.versions import SlurmFeatures, features_for, version_key

# Keys any cgroup.conf of 22.05-25.11 may carry; anything else is fatal to slurmd ("Could not ... parse").
CGROUP_KEYS = frozenset(
    k.lower()
    for k in (
        "CgroupAutomount CgroupMountpoint CgroupPlugin CgroupReleaseAgentDir ConstrainCores ConstrainDevices "
        "ConstrainKmemSpace ConstrainRAMSpace ConstrainSwapSpace MaxKmemPercent MaxRAMPercent MaxSwapPercent "
        "MemorySwappiness MinKmemSpace MinRAMSpace AllowedKmemSpace AllowedRAMSpace AllowedSwapSpace "
        "IgnoreSystemd IgnoreSystemdOnFailure EnableControllers SignalChildrenProcesses SystemdTimeout "
        "CgroupSlice EnableExtraControllers"
    ).split()
)
# cgroup.conf's option table per release (the options[] of cgroup.c's conf parse: src/common/cgroup.c at
# slurm-22-05-8-1, src/interfaces/cgroup.c at slurm-23-11-10-1, slurm-24-11-5-1, slurm-25-05-0-1, slurm-25-11-0-1, slurm-26-05-3-1). From 23.11
# CgroupAutomount is read by _defunct_option(), which logs an error line and ignores it; the Kmem keys are gone
# (unrecognized key: fatal).
_CGROUP_2205 = (
    "CgroupAutomount CgroupMountpoint CgroupReleaseAgentDir ConstrainCores ConstrainRAMSpace AllowedRAMSpace "
    "MaxRAMPercent MinRAMSpace ConstrainSwapSpace ConstrainKmemSpace AllowedKmemSpace MaxKmemPercent MinKmemSpace "
    "AllowedSwapSpace MaxSwapPercent MemoryLimitEnforcement MemoryLimitThreshold ConstrainDevices AllowedDevicesFile "
    "MemorySwappiness CgroupPlugin IgnoreSystemd IgnoreSystemdOnFailure").split()
_CGROUP_DELTAS: dict[str, tuple[list[str], list[str]]] = {
    "23.11": (["EnableControllers", "SignalChildrenProcesses"],
              ["ConstrainKmemSpace", "AllowedKmemSpace", "MaxKmemPercent", "MinKmemSpace"]),
    "24.11": (["SystemdTimeout"], []),  # not in slurm-23-11-10-1's table (24.05 not re-read: 24.11 is the floor)
    "25.05": (["EnableExtraControllers"], []),
    # slurm-26-05-3-1 src/interfaces/cgroup.c options[]: {"CgroupJobIdPaths", S_P_BOOLEAN} (cgroup/v2 job
    # directories are named by SLUID unless it is yes); 25.11's table equals 25.05's
    "26.05": (["CgroupJobIdPaths"], []),
}


def cgroup_keys(version: str) -> tuple[frozenset[str], frozenset[str]]:
    """(lower-case cgroup.conf keys ``version`` reads, those it reads as defunct)."""
    keys = {k.lower() for k in _CGROUP_2205}
    for v, (added, removed) in _CGROUP_DELTAS.items():
        if version_key(v) <= version_key(version):
            keys |= {k.lower() for k in added}
            keys -= {k.lower() for k in removed}
    defunct = frozenset({"cgroupautomount"}) if version_key(version) >= (23, 11) else frozenset()
    return frozenset(keys), defunct


def _cgroup_key_history(key: str, version: str) -> str:
    """" (added in X)" / " (removed in X)" for a cgroup.conf key ``version`` does not read, from _CGROUP_DELTAS."""
    for v, (added, removed) in _CGROUP_DELTAS.items():
        if key in {k.lower() for k in added} and version_key(v) > version_key(version):
            return f" (added in {v})"
        if key in {k.lower() for k in removed} and version_key(v) <= version_key(version):
            return f" (removed in {v})"
    return ""


_MEM_SELECT = re.compile(r"CR_(Core|CPU|Socket|Board)?_?Memory", re.I)


def default_select_type(version: str | None) -> str:
    """src/common/read_config.h DEFAULT_SELECT_TYPE: select/linear through slurm-23-02-7-1, select/cons_tres from
    slurm-23-11-0-1 (non-Cray builds); unknown release: the newer default."""
    return "select/linear" if version and version_key(version) < (23, 11) else "select/cons_tres"


def memory_consumable(conf: cp.SlurmConf, version: str | None) -> bool:
    """Memory is a consumable resource: SelectTypeParameters names CR_*_Memory, or it is unset and the select
    plugin defaults to CR_Core_Memory: 22.05 src/plugins/select/cons_common/cons_common.c select_p_node_init()
    ("SelectTypeParameters not specified, using default value: CR_Core_Memory", cons_res and cons_tres);
    24.11 read_config.c _validate_and_set_defaults() (cons_tres: CR_CORE | CR_MEMORY) and slurm.conf(5)
    "By default SelectType=select/cons_tres uses CR_Core_Memory". select/linear defaults to no memory tracking."""
    params = conf.value("SelectTypeParameters")
    if params:
        return bool(_MEM_SELECT.search(params))
    select = (conf.value("SelectType") or default_select_type(version)).lower()
    return select.endswith(("/cons_tres", "/cons_res"))


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    real: str = "not run"  # what happened to the real slurmctld parse, in words
    real_ok: bool | None = None  # None = not run / skipped

    @property
    def ok(self) -> bool:
        return not self.errors and self.real_ok is not False


# --------------------------------------------------------------------------------------------------------------
# static checks


def _fold(hosts: list[str]) -> str:
    return hostlist.fold(hosts) if len(hosts) > 1 else (hosts[0] if hosts else "")


class _Hosts:
    """Expand each distinct hostlist string once (a 100k-node cluster repeats the same few strings)."""

    def __init__(self) -> None:
        self.cache: dict[str, list[str]] = {}
        self.sets: dict[str, frozenset[str]] = {}

    def __call__(self, spec: str, where: str) -> list[str]:
        if spec not in self.cache:
            self.cache[spec] = hostlist.expand(spec, where)
        return self.cache[spec]

    def set(self, spec: str, where: str) -> frozenset[str]:
        if spec not in self.sets:
            self.sets[spec] = frozenset(self(spec, where))
        return self.sets[spec]


def static_check(files: Mapping[str, str], version: str | None = None) -> Report:
    rep = Report()
    if "slurm.conf" not in files:
        rep.errors.append("slurm.conf is missing")
        return rep
    text = files["slurm.conf"]
    ver = version or cp.header_version(text)
    feats = features_for(ver) if ver else None
    try:
        conf = cp.parse_slurm_conf(text, files=files, release=ver)
    except Exception as exc:  # a hostlist error inside the parse is still one finding, not a crash
        rep.errors.append(f"slurm.conf: cannot parse: {exc}")
        return rep
    hosts = _Hosts()
    err = rep.errors.append
    rep.errors.extend(conf.problems)
    rep.warnings.extend(conf.notes)

    if not conf.controllers:
        # read_config.c _validate_and_set_defaults (22.05-25.11): neither SlurmctldHost nor ControlMachine is
        # "No SlurmctldHost defined." (fatal)
        err("slurm.conf: No SlurmctldHost defined (neither SlurmctldHost nor ControlMachine; fatal)")
    elif not any(k in conf.settings for k in ("slurmctldhost",)) and "," in conf.value("ControlMachine") \
            and not conf.value("ControlAddr"):
        err("slurm.conf: ControlMachine has multiple host names, so ControlAddr must be specified (fatal)")
    for i, name in enumerate(conf.controllers):
        # read_config.c (22.05-25.11): "Duplicate SlurmctldHost records" is fatal to every daemon
        if name.split("(")[0] in [c.split("(")[0] for c in conf.controllers[:i]]:
            err(f"slurm.conf: Duplicate SlurmctldHost records: {name} (fatal to slurmctld)")
    if feats:
        from slurmkit.generate.slurmkeys import slurm_conf_keys

        known = slurm_conf_keys(feats.version)
        # only a line's first key is looked up in slurm_conf_options[] (parse_config.c _parse_next_key); the rest of
        # a line is its handler's (NodeName, PartitionName ...) or a parse error (expand_includes)
        from slurmkit.generate.slurmkeys import defunct_keys, fatal_when_set, key_history, obsolete_note

        defunct = defunct_keys(feats.version)
        for rec in conf.records:
            for k, v in rec.pairs[:1]:
                if k.lower() in defunct:
                    rep.warnings.append(f"{rec.where}: {k} is defunct in Slurm {feats.version}: slurmctld logs 'The option "
                                        f"\"{k}\" is defunct' and ignores it (read_config.c _defunct_option)")
                elif k.lower() not in known:
                    why = key_history(k, feats.version)
                    err(f"{rec.where}: Slurm {feats.version} has no slurm.conf key {k}{f' ({why})' if why else ''} "
                        "(unrecognized key: fatal)")
                elif (fatal := fatal_when_set(k, v, feats.version)) is not None:
                    err(f"{rec.where}: {k}: {fatal}")
                elif (note := obsolete_note(k, v)) is not None:
                    rep.warnings.append(f"{rec.where}: {note}")
    if feats and "reconfigflags" in conf.settings:
        k, v, rec = conf.settings["reconfigflags"]
        _check_reconfig_flags(v, rec.where, feats.version, rep)
    if feats and "healthchecknodestate" in conf.settings:
        k, v, rec = conf.settings["healthchecknodestate"]
        _check_healthcheck_state(v, rec.where, feats, rep)
    if feats:
        from slurmkit.generate.slurmplugins import check as check_plugins

        removed_values = {(k.lower(), v.lower()) for k, v in feats.removed_slurm_values}
        for k, v in feats.removed_slurm_values:
            if conf.value(k).lower() == v.lower():
                err(f"{conf.settings[k.lower()][2].where}: {k}={v} is not available in Slurm {feats.version}")
        # plugin names against what the release ships: a typo in a plugin only slurmd or srun loads passes
        # slurmctld's parse and fails every job step (issue 19)
        for key, (k, v, rec) in conf.settings.items():
            if (key, v.lower()) not in removed_values:
                for problem in check_plugins(k, v, feats.version):
                    err(f"{rec.where}: {problem}")

    # nodes: shapes, geometry, duplicates
    shape_of: dict[str, int] = {}
    node_specs: list[str] = []  # the NodeName lines shape_of was made of (exact_cover compares leaves with them)
    shapes: list[dict] = []
    for rec in conf.nodes:
        try:
            names = hosts(rec.head, rec.where)
        except Exception as exc:
            err(f"{rec.where}: NodeName: {exc}")
            continue
        d = rec.as_dict()
        try:
            geo = cp.node_geometry(d)
            given = d.get("cpus", d.get("procs"))
            given_cpus = int(given) if given else None
            real = geo.real_memory
            spec_mem = int(d.get("memspeclimit", "0"))
            spec_cores = int(d.get("corespeccount", "0"))
            gres = cp.parse_gres(d.get("gres", ""))
        except ValueError as exc:
            err(f"{rec.where}: NodeName={rec.head}: bad number or Gres: {exc}")
            continue
        cores = geo.cores
        # read_config.c _parse_nodename (22.05, 24.11): "CPUs=%d match no Sockets, Sockets*CoresPerSocket or
        # Sockets*CoresPerSocket*ThreadsPerCore. Resetting CPUs."
        if given_cpus is not None and given_cpus not in (geo.sockets, cores, cores * geo.threads_per_core):
            err(f"{rec.where}: NodeName={rec.head}: CPUs={given_cpus} matches none of sockets ({geo.sockets}), cores "
                f"({cores}), threads ({cores * geo.threads_per_core}); slurmctld resets it")
        if spec_mem and spec_mem >= real:
            err(f"{rec.where}: NodeName={rec.head}: MemSpecLimit={spec_mem} leaves no memory of RealMemory={real}")
        if spec_cores and spec_cores >= cores:
            err(f"{rec.where}: NodeName={rec.head}: CoreSpecCount={spec_cores} leaves no cores of {cores}")
        shapes.append({"cores": cores, "cpus": geo.cpus, "gres": gres, "rec": rec, "mem_spec": spec_mem})
        node_specs.append(rec.head)
        if shape_of.keys().isdisjoint(names):
            shape_of.update(dict.fromkeys(names, len(shapes) - 1))
            continue
        dup = [h for h in names if h in shape_of]
        err(f"{rec.where}: nodes {_fold(dup)} are already defined on an earlier NodeName line")
        for h in names:
            shape_of.setdefault(h, len(shapes) - 1)

    # GresTypes vs every GRES name used: node_conf.c build_all_nodeline_info -> gres_name_filter (22.05
    # src/common/gres.c:795, 24.11 src/interfaces/gres.c:855) drops each Gres= entry whose name GresTypes lacks
    # ("Invalid GRES configured on node", silently when GresTypes is empty): the node has no such GRES
    gres_types = {t.strip() for t in conf.value("GresTypes").split(",") if t.strip()}
    for sh in shapes:
        rec = sh["rec"]
        for name in dict.fromkeys(n for n, _t in sh["gres"]):  # type: ignore[attr-defined]
            if name not in gres_types:
                err(f"{rec.where}: NodeName={rec.head}: Gres name {name!r} is not in GresTypes ({','.join(sorted(gres_types)) or 'empty'})")  # type: ignore[attr-defined]
    tres = conf.value("AccountingStorageTRES")
    for item in (t.strip() for t in tres.split(",") if t.strip()):
        if item.lower().startswith("gres/"):
            name = item[5:].split(":")[0]
            if name not in gres_types:
                # slurmctld only needs gres/ TRES to have a name (controller.c:1697 at 22.05, :2060 at 24.11,
                # "Gres type tres need to have a name"): accepted, it just never counts anything -- a warning
                rep.warnings.append(f"slurm.conf: AccountingStorageTRES {item} names GRES {name!r}, which is not in "
                                    "GresTypes (Slurm accepts it; it counts nothing)")

    # memory constraints need memory to be a consumable resource
    select_params = conf.value("SelectTypeParameters")
    cgroup = cp.parse_settings(files.get("cgroup.conf", ""), "cgroup.conf", files, rep.errors, release=ver)
    if not memory_consumable(conf, feats.version if feats else None):
        if cgroup.get("constrainramspace", ("", "no", None))[1].lower() == "yes":
            err(f"cgroup.conf: ConstrainRAMSpace=yes needs SelectTypeParameters=CR_*_Memory (have {select_params or 'none'})")
        if any(sh["mem_spec"] for sh in shapes):
            err(f"slurm.conf: MemSpecLimit needs SelectTypeParameters=CR_*_Memory (have {select_params or 'none'})")
    if feats and "cgroupplugin" in cgroup:
        from slurmkit.generate.slurmplugins import check as check_plugins

        k, v, rec = cgroup["cgroupplugin"]
        for problem in check_plugins(k, v, feats.version):
            err(f"{rec.where}: {problem}")
    table = cgroup_keys(feats.version) if feats else None
    for key, (k, _v, rec) in cgroup.items():
        if table is None:
            if key not in CGROUP_KEYS:
                err(f"{rec.where}: unknown cgroup.conf key {k}; slurmd refuses to start")
            continue
        keys, defunct = table
        if key == "cgroupreleaseagentdir":
            # 22.05 src/common/cgroup.c, 24.11 src/interfaces/cgroup.c: fatal("Support for CgroupReleaseAgentDir
            # option has been removed.")
            err(f"{rec.where}: CgroupReleaseAgentDir: Support for CgroupReleaseAgentDir option has been removed (fatal to slurmd)")
        elif key in defunct:
            rep.warnings.append(f"{rec.where}: {k} is defunct in Slurm {feats.version}: slurmd logs 'The option \"{k}\" is "  # type: ignore[union-attr]
                                "defunct' and ignores it (remove it)")
        elif key not in keys:
            removed = _cgroup_key_history(key, feats.version) if key in CGROUP_KEYS else ""  # type: ignore[union-attr]
            err(f"{rec.where}: Slurm {feats.version} has no cgroup.conf key {k}{removed}; slurmd refuses to start "  # type: ignore[union-attr]
                "(unrecognized key: fatal)")
    constrain_devices = cgroup.get("constraindevices", ("", "no", None))[1].lower() == "yes"

    _check_gres_conf(files.get("gres.conf"), shapes, shape_of, constrain_devices, hosts, rep, files, gres_types,
                     feats)
    _check_topology(files, conf, shape_of, feats, hosts, rep, node_specs)  # type: ignore[arg-type]
    _check_partitions(conf, shape_of, hosts, rep, feats)
    _check_dynamic(conf, len(shape_of), feats.version if feats else None, rep)
    return rep


def _check_dynamic(conf: cp.SlurmConf, static: int, version: str | None, rep: Report) -> None:
    """A dynamic-node site (MaxNodeCount above its NodeName nodes: room for ``slurmd -Z`` registrations), judged
    per release from dynamic_nodes.shtml and the source of that release."""
    v = conf.value("MaxNodeCount")
    if not v.isdigit() or int(v) <= static:
        return  # slurm.conf(5) MaxNodeCount "will be ignored if less than the number of nodes found in the slurm.conf"
    where = conf.settings["maxnodecount"][2].where
    ver = version or "22.05"
    select = conf.value("SelectType") or default_select_type(version)
    if "cons_tres" not in select:
        # src/slurmctld/node_mgr.c create_dynamic_reg_node(): error("Node creation only compatible with
        # select/cons_tres") and the registration is refused (slurm-22-05-8-1 :4727, slurm-24-11-5-1 :5297)
        rep.errors.append(f"{where}: MaxNodeCount={v} leaves room for dynamic nodes, but Slurm {ver} registers them "
                          f"only with select/cons_tres (SelectType is {select}; node_mgr.c \"Node creation only "
                          "compatible with select/cons_tres\")")
    topo = conf.value("TopologyPlugin", "topology/none").lower()
    if version_key(ver) < (23, 11) and conf.value("TreeWidth") != "65533":
        # dynamic_nodes.shtml of slurm-22-05-8-1 and slurm-23-02-7-1: "TreeWidth must be disabled (i.e. set to
        # 65533) for dynamic environments" (gone from slurm-23-11-10-1's, which fans out to dynamic nodes)
        rep.warnings.append(f"{where}: dynamic nodes on Slurm {ver} need TreeWidth=65533 (dynamic_nodes.shtml: "
                            "\"Fanning out of controller pings and application launches through slurmds are not "
                            "supported with dynamic nodes\")")
    if version_key(ver) < (23, 2):
        # slurm-22-05-8-1 dynamic_nodes.shtml, Limitations: "The following are not supported with dynamic nodes:
        # Topology Plugins"
        if topo.split("/")[-1] not in ("none", "default", "flat"):
            rep.warnings.append(f"{where}: {conf.value('TopologyPlugin')} with dynamic nodes: not supported on Slurm "
                                f"{ver} (dynamic_nodes.shtml, Limitations)")
    elif topo.split("/")[-1] not in ("none", "default", "flat"):
        # slurm-24-11-5-1 dynamic_nodes.shtml, Limitations: "Dynamic nodes must be added to topology.conf; The
        # slurmctld must be restarted or reconfigured"
        rep.warnings.append(f"{where}: {conf.value('TopologyPlugin')} with dynamic nodes: each must be added to "
                            "the topology and slurmctld reconfigured before jobs are placed by it (dynamic_nodes.shtml, "
                            "Limitations)")


def _check_gres_conf(text: str | None, shapes: list[dict], shape_of: dict[str, int], constrain_devices: bool,
                     hosts: _Hosts, rep: Report, files: Mapping[str, str] | None = None,
                     gres_types: set[str] | None = None, feats: SlurmFeatures | None = None) -> None:
    err = rep.errors.append
    wants_gres = any(sh["gres"] for sh in shapes)
    if text is None:
        if wants_gres:
            err("gres.conf is missing but slurm.conf nodes have Gres=")
        return
    global_auto = "off"
    # per node group, not per host (issue 20 item 8: 100,000 nodes): each record's count goes to its NodeName spec
    # (``None``: every node); the hosts are then cut into groups that have the same shape, the same specs and the
    # same autodetect, and each group is compared once. A host's GRES is the sum over the specs naming it, as before.
    contrib: dict[str | None, dict[tuple[str, str], int]] = {}
    members: dict[str | None, frozenset[str]] = {}
    auto_nodes: set[str] = set()
    all_nodes = list(shape_of)
    all_set = frozenset(shape_of)
    spec_shapes: dict[str | None, list[int]] = {}
    by_shape: dict[int, list[str]] = {}
    for h, sh in shape_of.items():
        by_shape.setdefault(sh, []).append(h)
    shape_sets = [frozenset(by_shape.get(sh, ())) for sh in range(len(shapes))]
    auto_off: set[str] = set()  # nodes whose node-local AutoDetect line turns detection off
    global_where = ""
    for rec in cp.expand_includes(text, "gres.conf", files, rep.errors, line_keys=cp.GRES_LINE_KEYS,
                                  release=feats.version if feats else None):
        d = {k.lower(): v for k, v in rec.pairs}
        if "autodetect" in d:
            mode, since = autodetect_mode(d["autodetect"], feats.version if feats else None)
            if mode is None:
                # gres.c _handle_autodetect_flags(): "unknown autodetect flag '%s'" and no flag set, so slurmd
                # detects nothing (22.05 src/common/gres.c:1173; 24.11 src/interfaces/gres.c:1281; 26.05 :1377)
                err(f"{rec.where}: AutoDetect={d['autodetect']}"
                    + (f" is a value from Slurm {since}" if since else " is no autodetect mode")
                    + f"; slurmd {feats.version if feats else ''} logs 'unknown autodetect flag' and detects nothing")
            d["autodetect"] = mode or "off"
        if feats and "env_uuid" in d.get("flags", "").lower() and not feats.gres_env_uuid:
            # gres_flags_parse() before 26.05 matches known words only
            rep.warnings.append(f"{rec.where}: Flags=env_uuid is a flag from Slurm 26.05; slurmd {feats.version} "
                                "ignores it (CUDA_VISIBLE_DEVICES stays indexes)")
        if rec.kind == "autodetect" and len(rec.pairs) == 1:
            global_auto = d["autodetect"]
            global_where = rec.where
            continue
        if "name" not in d:
            if "autodetect" in d and "nodename" in d:
                # a node-local AutoDetect overrides the global one for its nodes (gres.conf(5) AutoDetect)
                (auto_off if d["autodetect"] == "off" else auto_nodes).update(hosts(d["nodename"], rec.where))
                continue
            err(f"{rec.where}: gres.conf line without Name=")
            continue
        spec: str | None = d.get("nodename")
        try:
            nodes = hosts(spec, rec.where) if spec is not None else all_nodes
            nset = hosts.set(spec, rec.where) if spec is not None else all_set
        except Exception as exc:
            err(f"{rec.where}: NodeName: {exc}")
            continue
        if nset <= all_set:
            known = nodes
        else:
            unknown = [h for h in nodes if h not in shape_of]
            err(f"{rec.where}: gres.conf names nodes {_fold(unknown)} that slurm.conf does not define")
            known = [h for h in nodes if h in shape_of]
            nset = nset & all_set
        if d.get("autodetect", global_auto) != "off":
            auto_nodes.update(nodes)
        elif "autodetect" in d and spec is not None:
            auto_off.update(nodes)
        name, gtype = d["name"], d.get("type", "")
        try:
            for fk, fkey in (("file", "File"), ("files", "Files"), ("multiplefiles", "MultipleFiles")):
                if fk in d:
                    cp.expand_files(d[fk], rec.where, fkey)
            if "multiplefiles" in d:
                count = 1  # one device made of several files (MIG: GPU + two nvidia-caps)
            elif "file" in d:
                count = len(cp.expand_files(d["file"], rec.where))
                if "count" in d and cp.parse_count(d["count"]) != count and name != "shard":
                    err(f"{rec.where}: Count={d['count']} but File= names {count} files")
                if name == "shard" and "count" in d:
                    count = cp.parse_count(d["count"])
            elif "count" in d:
                count = cp.parse_count(d["count"])
            else:
                count = 1
        except UsageError as exc:  # a File= list that is none (confparse.expand_files): the line is named
            err(exc.one_line())
            continue
        except ValueError as exc:
            err(f"{rec.where}: bad Count/File: {exc}")
            continue
        has_file = "file" in d or "multiplefiles" in d
        if name == "gpu" and not has_file:
            if d.get("autodetect", global_auto) == "off":
                err(f"{rec.where}: GPU line without File= (Slurm drops a GPU it cannot bind to a device file)")
                # dropped: gres.c "Remove every GPU with an empty File" (22.05 src/common/gres.c:2381, 24.11
                # src/interfaces/gres.c:2831), so it provides nothing to compare with slurm.conf
                continue
            elif constrain_devices:
                err(f"{rec.where}: ConstrainDevices=yes needs File= on every GPU line")
        if spec not in spec_shapes:
            spec_shapes[spec] = [sh for sh, hs in enumerate(shape_sets) if not hs.isdisjoint(nset)]
        if "cores" in d:
            try:
                # bitfmt2int (src/common/bitstring.c, 22.05 and 24.11), which reads Cores= through bit_unfmt,
                # skips every character but digits, '-' and ',': Cores=[0-3] is Cores=0-3 (Slurm's own
                # testsuite/expect/test7.17_configs write it so)
                idx = cp.expand_ints(d["cores"].replace("[", "").replace("]", ""))
                top = max(idx)
            except ValueError:
                err(f"{rec.where}: Cores={d['cores']} is not a list of core indices")
            else:
                small = [sh for sh in spec_shapes[spec] if shapes[sh]["cores"] <= top]
                for s in small:
                    bad = [h for h in known if shape_of[h] == s]
                    err(f"{rec.where}: Cores={d['cores']} is outside the {shapes[s]['cores']} cores of {_fold(bad)} "
                        f"(Cores= are Slurm logical core indices 0-{shapes[s]['cores'] - 1}, not OS CPU ids)")
        if "links" in d:
            entries = d["links"].split(",")
            for s in spec_shapes[spec]:
                ngpu = cp.gres_totals(shapes[s]["gres"]).get("gpu", 0)
                if len(entries) != ngpu or entries.count("-1") != 1:
                    err(f"{rec.where}: Links={d['links']} needs {ngpu} entries with exactly one -1 (the GPU itself)")
        if not known:
            continue
        members.setdefault(spec, nset)  # (the known hosts of the spec: the same set every time)
        slot = contrib.setdefault(spec, {})
        slot[(name, gtype)] = slot.get((name, gtype), 0) + count
    # slurm.conf Gres= vs what gres.conf provides, per group of hosts alike (shape, specs naming them, autodetect).
    # A GRES name GresTypes lacks is dropped on both sides (slurm.conf: gres_name_filter; gres.conf: "Ignoring
    # gres.conf record, invalid name", 22.05 src/common/gres.c, 24.11 src/interfaces/gres.c:1710) and is named above
    def managed(key: tuple[str, str]) -> bool:
        return gres_types is None or key[0] in gres_types

    cloud = [h for sh in shapes if (sh["rec"].get("State") or "").upper().startswith("CLOUD")
             for h in hosts(sh["rec"].head, sh["rec"].where)]
    if global_auto != "off" and cloud:
        # gres.conf(5) AutoDetect (22.05-26.05): "AutoDetect cannot be used with cloud nodes". slurmctld loads gres.conf
        # for its cloud nodes and tests the global AutoDetect there: 22.05 fatal("Cannot use AutoDetect on cloud node
        # \"%s\"") (src/common/gres.c:2336 gres_g_node_config_load); 24.11 and 26.05 error("Cannot use AutoDetect on
        # cloud/dynamic node \"%s\"") and ESLURM_UNSUPPORTED_GRES (src/interfaces/gres.c:2771, :2932): the node gets
        # no GRES from gres.conf. Magic Castle dropped its AutoDetect=nvml for this ("As of Slurm 22, NVML
        # autodetect is not compatible with cloud compute", puppet-magic_castle c2a540c2)
        ver = feats.version if feats else ""
        effect = ("fatal to slurmctld" if ver and version_key(ver) < (23, 11) else
                  "slurmctld refuses gres.conf for each (ESLURM_UNSUPPORTED_GRES), so they get no GRES from it")
        err(f"{global_where}: AutoDetect={global_auto} with State=CLOUD nodes {_fold(cloud)}: 'Cannot use AutoDetect "
            f"on cloud node' ({effect}{f' in Slurm {ver}' if ver else ''}); give their GPUs File= lines instead")
    if global_auto != "off":
        # a global AutoDetect line detects the GPUs of every node that has no node-local AutoDetect=off, with or
        # without a Name= line (gres.conf(5) AutoDetect, 22.05-26.05: "on a line by itself, in which case it will
        # globally apply"; "Node-specific AutoDetects will trump the global AutoDetect")
        auto_nodes.update(h for h in shape_of if h not in auto_off)
    findings: dict[str, list[str]] = {}
    for s, keys, auto, group in _gres_groups(shapes, shape_of, shape_sets, members, auto_nodes):
        want = {k: n for k, n in shapes[s]["gres"].items() if managed(k)}
        if not want and not keys:
            continue
        have: dict[tuple[str, str], int] = {}
        for k in keys:
            for nt, c in contrib[k].items():
                if managed(nt):
                    have[nt] = have.get(nt, 0) + c
        if auto and not have:
            continue  # detection provides the devices; nothing explicit to compare
        derived, problem = slurmd_derived(want, have, auto)
        if problem:
            findings.setdefault(problem, []).extend(group)
            continue
        msg = _gres_mismatch(want, derived)
        if msg:
            findings.setdefault(msg, []).extend(group)
    if findings:
        order = {h: i for i, h in enumerate(shape_of)}  # reported in node order, as slurm.conf defines them
        for msg, hs in sorted(findings.items(), key=lambda kv: min(order[h] for h in kv[1])):
            err(f"gres.conf vs slurm.conf for {_fold(sorted(hs, key=order.__getitem__))}: {msg}")


GROUPWISE_MAX = 4096  # specs x shapes up to which the hosts are cut by set operations (cost: specs x groups)


def _gres_groups(shapes: list[dict], shape_of: dict[str, int], shape_sets: list[frozenset[str]],
                 members: dict[str | None, frozenset[str]], auto_nodes: set[str],
                 ) -> list[tuple[int, tuple[str | None, ...], bool, list[str]]]:
    """The hosts cut into groups alike for the GRES comparison: (shape, the specs naming them, autodetect, hosts).
    Few specs (a generated gres.conf: one per node group): set operations per group. Many (a hand-written file with a
    line per host): one pass over the hosts, keyed the same way."""
    keys = list(members)
    if len(keys) * max(1, len(shapes)) <= GROUPWISE_MAX:
        cells: list[tuple[int, tuple[str | None, ...], frozenset[str]]] = [
            (sh, (), hs) for sh, hs in enumerate(shape_sets) if hs]
        for k in keys:
            m = members[k]
            nxt: list[tuple[int, tuple[str | None, ...], frozenset[str]]] = []
            for sh, ks, hs in cells:
                inter = hs & m
                if inter:
                    nxt.append((sh, (*ks, k), inter))
                    rest = hs - inter
                    if rest:
                        nxt.append((sh, ks, rest))
                else:
                    nxt.append((sh, ks, hs))
            cells = nxt
        out = []
        for sh, ks, hs in cells:
            auto = hs & auto_nodes
            if auto:
                out.append((sh, ks, True, list(auto)))
            if len(auto) != len(hs):
                out.append((sh, ks, False, list(hs - auto) if auto else list(hs)))
        return out
    per_host: dict[str, tuple[str | None, ...]] = {}
    for k in keys:
        for h in members[k]:
            per_host[h] = (*per_host.get(h, ()), k)
    groups: dict[tuple[int, tuple[str | None, ...], bool], list[str]] = {}
    for h, sh in shape_of.items():
        groups.setdefault((sh, per_host.get(h, ()), h in auto_nodes), []).append(h)
    return [(sh, ks, auto, hs) for (sh, ks, auto), hs in groups.items()]


# gres.conf AutoDetect values per release: _handle_autodetect_flags() tests them in this order with xstrcasestr (a
# substring, any case), "off" with xstrcasecmp; anything else is "unknown autodetect flag". 22.05 src/common/gres.c
# :1163-1173 (nvml, rsmi, oneapi); 23.11 src/interfaces/gres.c:1204 adds nrt; 24.11 src/interfaces/gres.c:1276 adds
# nvidia (not at slurm-24-05-8-1); 26.05 src/interfaces/gres.c:1362 tests full first.
_AUTODETECT = (("full", "26.05"), ("nvml", "22.05"), ("rsmi", "22.05"), ("oneapi", "22.05"), ("nrt", "23.11"),
               ("nvidia", "24.11"))
SHARED_GRES = ("shard", "mps")  # gres_c_s.c: the GRES shared out over the GPUs ("sharing": gpu)


def autodetect_mode(value: str, version: str | None) -> tuple[str | None, str]:
    """(the mode slurmd ``version`` reads ``AutoDetect=value`` as: a flag, "off", or None for unknown (it then
    detects nothing), the release a flag it lacks comes from). Unknown ``version``: the newest release's reading."""
    low = value.strip().lower()
    for flag, since in _AUTODETECT:
        if flag in low:
            if version and version_key(version) < version_key(since):
                continue  # this release does not test for it; a later flag in the order may still match
            return flag, ""
    if low == "off":
        return "off", ""
    since = next((s_ for f, s_ in _AUTODETECT if f in low), "")
    return None, since


def slurmd_derived(want: dict[tuple[str, str], int], have: dict[tuple[str, str], int],
                   auto: bool) -> tuple[dict[tuple[str, str], int], str]:
    """What slurmd of 22.05-26.05 registers for a node, from its slurm.conf Gres= (``want``) and its explicit
    gres.conf lines (``have``), with ``auto`` when a GPU AutoDetect mode is on there -> (counts, problem).

    - GPUs on an autodetecting node with no explicit gpu line: detected on the node, so slurm.conf's count is all
      this host can know (gpu_p_get_system_gpu_list of the mode's plugin, merged in gres.c _merge_system_gres_conf).
    - shard/mps given in slurm.conf with no gres.conf line of that name: gres.c _merge_gres2() adds slurm.conf's
      leftover count as one file-less record ("There are leftover GRES specified in this slurm.conf record",
      22.05 src/common/gres.c:1956, 24.11 src/interfaces/gres.c:2205, 26.05 :2371), and gres_c_s.c _merge_lists()
      spreads a file-less shared count evenly over the node's GPU records ("If gres/shared has Count, but no File
      specification, then evenly distribute", src/plugins/gres/common/gres_c_s.c:123-130 _distribute_count at
      slurm-22-05-8-1, slurm-24-11-5-1 and slurm-26-05-3-1; gres.shtml Sharding case 1 "No Shard configuration":
      Gres=gpu:2,shard:64 gives 32 per GPU). With no GPU at all it is "SHARED specified without any SHARING
      found" (gres_c_s.c _merge_lists) and the node has none."""
    derived = dict(have)
    names = {n for n, _t in have}
    gpus = sum(c for (n, _t), c in want.items() if n == "gpu") if auto and "gpu" not in names else 0
    if gpus:
        derived.update({k: c for k, c in want.items() if k[0] == "gpu"})
    ngpu = sum(c for (n, _t), c in derived.items() if n == "gpu")
    for (n, t), c in want.items():
        if n in SHARED_GRES and n not in names:
            if not ngpu and not auto:
                return derived, (f"{n}: slurm.conf says {c} but the node has no GPU to share them out (slurmd: "
                                 "'SHARED specified without any SHARING found', gres_c_s.c)")
            derived[(n, t)] = c
    return derived, ""


def _gres_mismatch(want: dict[tuple[str, str], int], have: dict[tuple[str, str], int]) -> str:
    wt, ht = cp.gres_totals(want), cp.gres_totals(have)
    probs = []
    for name in sorted(set(wt) | set(ht)):
        if wt.get(name, 0) != ht.get(name, 0):
            probs.append(f"{name}: slurm.conf says {wt.get(name, 0)}, gres.conf gives {ht.get(name, 0)}")
    for (name, t), n in sorted(want.items()):
        if t and have.get((name, t), 0) != n:
            probs.append(f"{name}:{t}: slurm.conf says {n}, gres.conf gives {have.get((name, t), 0)}")
    return "; ".join(probs)


def _topology_from_yaml(text: str) -> tuple[str, list[tuple[str, str, str]], list[int], str]:
    """-> (kind, [(name, nodes, children)], block_sizes, problem) of the cluster-default topology."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return "none", [], [], f"topology.yaml is not valid YAML: {exc}"
    if not isinstance(doc, list) or not doc:
        return "none", [], [], "topology.yaml must be a non-empty list of topologies"
    default = next((t for t in doc if isinstance(t, dict) and t.get("cluster_default")), doc[0])
    if not isinstance(default, dict):
        return "none", [], [], "topology.yaml entries must be mappings"
    if "tree" in default:
        sws = (default["tree"] or {}).get("switches") or []
        return "tree", [(str(s.get("switch")), str(s.get("nodes") or ""), str(s.get("children") or "")) for s in sws], [], ""
    if "block" in default:
        b = default["block"] or {}
        blocks = [(str(x.get("block")), str(x.get("nodes") or ""), "") for x in b.get("blocks") or []]
        return "block", blocks, [int(v) for v in b.get("block_sizes") or []], ""
    # 26.05 (topology.yaml(5) "Ring definitions", "Torus3d definitions"): nodes are hostlist strings
    if "ring" in default:
        rings = (default["ring"] or {}).get("rings") or []
        return "ring", [(str(r.get("ring")), str(r.get("nodes") or ""), "") for r in rings], [], ""
    if "torus3d" in default:
        tori = (default["torus3d"] or {}).get("toruses") or []
        return "torus3d", [(str(t.get("name")), str(t.get("nodes") or ""), "") for t in tori], [], ""
    return "flat", [], [], ""


def _check_rings(fname: str, kind: str, entries: list[tuple[str, str, str]], shape_of: dict[str, int],
                 hosts: _Hosts, rep: Report) -> None:
    """Rings and tori (26.05): every node known, none in two of them, a ring at most 16 nodes (ring_record.c at
    slurm-26-05-3-1: fatal "Ring (%s) is bigger than %d", MAX_RING_SIZE 16; torus3d_record.c: fatal "Torus3d (%s)
    and (%s) share nodes")."""
    err = rep.errors.append
    where: dict[str, str] = {}
    for name, nodes, _ in entries:
        try:
            members = hosts(nodes, f"{fname} {name}")
        except Exception as exc:
            err(f"{fname}: {name}: {exc}")
            continue
        unknown = [h for h in members if h not in shape_of]
        if unknown:
            err(f"{fname}: {name} names nodes {_fold(unknown)} that slurm.conf does not define")
        twice = [h for h in members if h in where]
        if twice:
            err(f"{fname}: nodes {_fold(twice)} are in both {where[twice[0]]} and {name}")
        for h in members:
            where.setdefault(h, name)
        if kind == "ring" and len(members) > 16:
            err(f"{fname}: ring {name} has {len(members)} nodes; topology/ring takes at most 16 (fatal to slurmctld)")


def _check_topology(files: Mapping[str, str], conf: cp.SlurmConf, shape_of: dict[str, int],
                    feats: SlurmFeatures | None, hosts: _Hosts, rep: Report, node_specs: list[str] | None = None) -> None:
    err = rep.errors.append
    plugin = conf.value("TopologyPlugin", "topology/none").lower()
    kind = plugin.split("/")[-1] if "/" in plugin else plugin
    entries: list[tuple[str, str, str]] = []
    sizes: list[int] = []
    levels: list[int] = []
    fname = ""
    if "topology.yaml" in files:
        fname = "topology.yaml"
        ykind, entries, sizes, problem = _topology_from_yaml(files[fname])
        if problem:
            err(problem)
            return
        if ykind in ("tree", "block", "ring", "torus3d"):
            kind = ykind
    elif "topology.conf" in files and (unread := cp.topology_conf_unread(conf, feats.version if feats else None)):
        # Slurm never reads it: a typo inside is no finding, the file itself is worth a word
        rep.warnings.append(f"topology.conf: not read by Slurm: {unread}")
    elif "topology.conf" in files:
        fname = "topology.conf"
        for rec in cp.parse_records(files[fname], fname):
            d = rec.as_dict()
            if rec.kind == "switchname":
                entries.append((rec.head, d.get("nodes", ""), d.get("switches", "")))
            elif rec.kind == "blockname":
                entries.append((rec.head, d.get("nodes", ""), ""))
            elif rec.kind == "blocksizes":
                try:
                    sizes = [int(x) for x in rec.head.split(",")]
                except ValueError:
                    err(f"{rec.where}: BlockSizes={rec.head} is not a list of integers")
            elif rec.kind == "blocklevels":
                try:
                    levels = cp.expand_ints(rec.head)
                except ValueError:
                    err(f"{rec.where}: BlockLevels={rec.head} is not a list of levels")
            else:
                err(f"{rec.where}: unknown topology.conf line {rec.pairs[0][0]}")
    if kind in ("ring", "torus3d"):
        _check_rings(fname, kind, entries, shape_of, hosts, rep)
        return
    if kind not in ("tree", "block"):
        return
    if not entries:
        # slurmctld with topology/tree and no switches breaks scheduling (aicr #1737); say so here
        err(f"TopologyPlugin=topology/{kind} but {fname or 'topology.conf'} defines no {'switches' if kind == 'tree' else 'blocks'}")
        return
    # issue 20 item 8 (3,125 leaves of a 100,000-node tree): a generated tree -- every leaf one range, the leaves
    # together exactly the NodeName lines -- is shown sound on its ranges (hostlist.exact_cover); anything else is
    # walked leaf by leaf with set operations, and per-host lists are made only for a leaf with a finding, so the
    # messages are what they were
    in_all = hostlist.exact_cover([n for _, n, _c in entries if n], node_specs) if node_specs is not None else None
    all_set = frozenset(shape_of) if in_all is None else frozenset()
    in_leaf: set[str] = set()
    leaf_of: dict[str, str] = {}  # filled only once a node is found twice (to name its first leaf)
    placed: list[tuple[str, list[str]]] = []
    for name, nodes, _children in entries if in_all is None else ():
        if not nodes:
            continue
        try:
            members = hosts(nodes, f"{fname} {name}")
        except Exception as exc:
            err(f"{fname}: {name}: {exc}")
            continue
        if not all_set.issuperset(members):
            unknown = [h for h in members if h not in shape_of]
            err(f"{fname}: {name} names nodes {_fold(unknown)} that slurm.conf does not define")
        before = len(in_leaf)
        in_leaf.update(members)
        if len(in_leaf) - before != len(members):  # some were in an earlier leaf
            if not leaf_of:
                for n_, ms_ in placed:
                    for h in ms_:
                        leaf_of.setdefault(h, n_)
            twice = [h for h in members if h in leaf_of]
            if twice:
                err(f"{fname}: nodes {_fold(twice)} are in both {leaf_of[twice[0]]} and {name}")
        if leaf_of:
            for h in members:
                leaf_of.setdefault(h, name)
        placed.append((name, members))
    missing = [h for h in shape_of if h not in in_leaf] if in_all is None and not all_set <= in_leaf else []
    if missing:
        # Slurm allows it and schedules them apart: a warning, not invalid (22.05 topology_tree.c:447
        # error("WARNING: switches lack access to %d nodes"), not fatal; 24.11 tree/switch_record.c:439 and
        # block/block_record.c:296 warning("... lack access to %d nodes"))
        rep.warnings.append(f"{fname}: nodes {_fold(missing)} are in no {'leaf switch' if kind == 'tree' else 'block'}; "
                            "Slurm will not place them with the rest")
    if kind == "tree":
        names = [e[0] for e in entries]
        if len(set(names)) != len(names):
            err(f"{fname}: duplicate switch names")
        parent: dict[str, str] = {}
        known = set(names)  # (a list here made this loop quadratic: 3,224 switches of a 100,000-node tree)
        for name, _nodes, children in entries:
            for c in hosts(children, fname) if children else []:
                if c not in known:
                    err(f"{fname}: switch {name} has unknown child switch {c}")
                elif c in parent:
                    err(f"{fname}: switch {c} has two parents ({parent[c]}, {name})")
                else:
                    parent[c] = name
        for start in names:  # a cycle never reaches a root
            seen, cur = {start}, start
            while cur in parent:
                cur = parent[cur]
                if cur in seen:
                    err(f"{fname}: switch {start} is in a cycle")
                    break
                seen.add(cur)
        roots = [n for n in names if n not in parent]
        if len(roots) > 1:
            rep.warnings.append(f"{fname}: {len(roots)} top-level switches ({_fold(roots)}): jobs cannot span them")
    else:
        names = [e[0] for e in entries]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            # topology_block.c 23.11 / block_record.c 24.05-25.11: "Block (%s) has already been defined" (fatal)
            err(f"{fname}: block {', '.join(dups)} has already been defined (fatal to slurmctld)")
        counts = [(n, len(hosts(nodes, fname)) if nodes else 0) for n, nodes, _ in entries]
        rule = feats.block_size_rule if feats else "none"
        base_count = sizes[0] if sizes else counts[0][1]
        if rule == "equal":
            odd = [n for n, c in counts if c != counts[0][1]]
            if odd:
                err(f"{fname}: blocks {_fold(odd)} differ in size from {counts[0][0]} ({counts[0][1]} nodes); Slurm "
                    f"{feats.version} needs equal blocks (children count no equal bblock_node_cnt: fatal)")  # type: ignore[union-attr]
        elif rule == "at_least_base":
            small = [n for n, c in counts if c < base_count]
            if small:
                err(f"{fname}: blocks {_fold(small)} have fewer nodes than the base block size {base_count}; fatal to "
                    f"slurmctld {feats.version} (children count lower than bblock_node_cnt; allowed from 25.05)")  # type: ignore[union-attr]
        if sizes:
            base = sizes[0]
            for s in sizes:
                q, r = divmod(s, base) if base > 0 else (0, 1)
                if r or q < 1 or q & (q - 1):
                    err(f"{fname}: BlockSizes {s} is not a power-of-two multiple of the base block size {base}")
            if sizes != sorted(set(sizes)):
                err(f"{fname}: BlockSizes must be strictly increasing, got {','.join(map(str, sizes))}")
            total = len(in_leaf) if in_all is None else in_all
            if sizes[-1] > total:
                err(f"{fname}: BlockSizes {sizes[-1]} is larger than all {total} nodes in blocks")
        for lv in levels:
            if not 0 <= lv <= 4:
                err(f"{fname}: BlockLevels {lv} is outside 0-4")


def _check_partitions(conf: cp.SlurmConf, shape_of: dict[str, int], hosts: _Hosts, rep: Report,
                      feats: SlurmFeatures | None = None) -> None:
    err = rep.errors.append
    if not conf.partitions and feats and not feats.no_partitions_ok:
        err(f"slurm.conf: no PartitionName line: slurmctld {feats.version} exits with 'No PartitionName information "
            "available!' (fatal until 23.02.6)")
    nodesets = {}
    for rec in conf.nodesets:
        nodes = rec.get("Nodes")
        if nodes:
            members = hosts(nodes, rec.where)
            unknown = [h for h in members if h not in shape_of]
            if unknown:
                err(f"{rec.where}: NodeSet={rec.head} names unknown nodes {_fold(unknown)}")
        nodesets[rec.head] = rec
    defaults = [p.head for p in conf.partitions if (p.get("Default") or "").upper() == "YES"]
    if len(defaults) > 1:
        # not an error: each later Default=YES replaces the earlier one, logged at info level ("_parse_part_spec:
        # changing default partition from %s to %s", src/slurmctld/read_config.c _build_single_partitionline_info,
        # :751 at slurm-22-05-8-1, :780 at slurm-24-11-5-1)
        rep.warnings.append(f"slurm.conf: more than one default partition ({', '.join(defaults)}): slurmctld makes the "
                            f"last one, {defaults[-1]}, the default")
    for rec in conf.partitions:
        if feats:
            _check_exclusivity(rec, feats, rep)
        nodes = rec.get("Nodes")
        if not nodes:
            err(f"{rec.where}: PartitionName={rec.head} has no Nodes=")
            continue
        for item in (x for x in hostlist.split_top(nodes) if x):
            if item in nodesets or item.upper() == "ALL":
                continue
            try:
                members = hosts(item, rec.where)
            except Exception as exc:
                err(f"{rec.where}: PartitionName={rec.head}: {exc}")
                continue
            unknown = [h for h in members if h not in shape_of]
            if unknown:
                err(f"{rec.where}: PartitionName={rec.head} names unknown nodes or nodesets {_fold(unknown)}")


_NEW_EXCLUSIVE = {("oversubscribe", "EXCLUSIVE"): "NODE", ("shared", "EXCLUSIVE"): "NODE",
                  ("exclusiveuser", "YES"): "USER", ("exclusivetopo", "YES"): "TOPO (which also allocates whole nodes)"}


def _check_exclusivity(rec: cp.Record, feats: SlurmFeatures, rep: Report) -> None:
    """Partition exclusivity per release (release.SlurmFeatures.partition_exclusive, .exclusive_topo): Exclusive=
    is a key from 26.05 and takes NO|NONE|NODE|USER|TOPO ("Bad value ... for Exclusive=" fails the line,
    read_config.c _parse_partitionname() at slurm-26-05-3-1); ExclusiveTopo from 24.05. From 26.05 the older
    spellings still load (the same function reads them) but slurm.conf(5) calls them deprecated: a warning."""
    for k, v in rec.pairs[1:]:
        lk = k.lower()
        if lk == "exclusive":
            if not feats.partition_exclusive:
                rep.errors.append(f"{rec.where}: PartitionName={rec.head}: Exclusive= is a partition key from Slurm "
                                  f"26.05; {feats.version} stops at it (unrecognized key): write "
                                  "OverSubscribe=EXCLUSIVE, ExclusiveUser=YES or ExclusiveTopo=YES")
            elif v.upper() not in ("NO", "NONE", "NODE", "USER", "TOPO"):
                rep.errors.append(f"{rec.where}: PartitionName={rec.head}: Exclusive={v}: Slurm {feats.version} "
                                  "takes NO, NODE, USER or TOPO (a bad value fails the partition line)")
        elif lk == "exclusivetopo" and not feats.exclusive_topo:
            rep.errors.append(f"{rec.where}: PartitionName={rec.head}: ExclusiveTopo is a partition key from Slurm "
                              f"24.05; {feats.version} stops at it (unrecognized key)")
        elif feats.partition_exclusive and (lk, v.upper()) in _NEW_EXCLUSIVE:
            rep.warnings.append(f"{rec.where}: PartitionName={rec.head}: {k}={v} is deprecated in Slurm "
                                f"{feats.version} (slurm.conf(5)); it still loads: Exclusive="
                                f"{_NEW_EXCLUSIVE[(lk, v.upper())]} says the same")


# ReconfigFlags words per release: read_config.c reconfig_str2flags() (22.05: KeepPartInfo, KeepPartState;
# KeepPowerSaveSettings from slurm-23-02-0-1; KeepNodeStateFuture in slurm-24-11-5-1 only, gone again at
# slurm-25-05-0-1, slurm-25-11-0-1 and slurm-26-05-3-1). Any other word: "Invalid ReconfigFlag", then "ReconfigFlags
# invalid" and SLURM_ERROR from _validate_and_set_defaults (read_config.c:4869 at slurm-22-05-8-1, :5088 at
# slurm-24-11-5-1), so "Unable to process configuration file" (fatal to every daemon, read_config.c:3524 at 22.05)
_RECONFIG_FLAGS: dict[str, tuple[str, ...]] = {
    "22.05": ("KeepPartInfo", "KeepPartState"),
    "23.02": ("KeepPartInfo", "KeepPartState", "KeepPowerSaveSettings"),
    "24.11": ("KeepPartInfo", "KeepPartState", "KeepPowerSaveSettings", "KeepNodeStateFuture"),
    "25.05": ("KeepPartInfo", "KeepPartState", "KeepPowerSaveSettings"),
}


def _check_reconfig_flags(value: str, where: str, version: str, rep: Report) -> None:
    known: tuple[str, ...] = ()
    for v, words in _RECONFIG_FLAGS.items():
        if version_key(v) <= version_key(version):
            known = words
    for tok in (t for t in value.split(",") if t):
        if tok.lower() not in {w.lower() for w in known}:
            since = next((f" (a value from Slurm {v})" for v, words in _RECONFIG_FLAGS.items()
                          if tok.lower() in {w.lower() for w in words} and version_key(v) > version_key(version)), "")
            rep.errors.append(f"{where}: ReconfigFlags {tok}{since}: Slurm {version} knows only {', '.join(known)} "
                              "('Invalid ReconfigFlag': the config is refused, fatal)")


def _check_healthcheck_state(value: str, where: str, feats: SlurmFeatures, rep: Report) -> None:
    """HealthCheckNodeState per release (release.SlurmFeatures.healthcheck_start_only / healthcheck_only_alone):
    read_config.c _health_node_state() logs "Invalid HealthCheckNodeState value %s ignored" for a token it does not
    know and runs on ANY when no state is left (START_ONLY before 25.11, REBOOT_ONLY before 26.05); from 26.05
    START_ONLY or REBOOT_ONLY beside any other token is fatal ("cannot be combined with other options")."""
    tokens = [t.strip().upper() for t in value.split(",") if t.strip()]
    known = {"ANY", "ALLOC", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE"}
    if feats.healthcheck_start_only:
        known.add("START_ONLY")
    if feats.healthcheck_only_alone:
        known.add("REBOOT_ONLY")
    for t in tokens:
        if t not in known:
            since = {"START_ONLY": " (a value from Slurm 25.11)", "REBOOT_ONLY": " (a value from Slurm 26.05)"}.get(t, "")
            rep.errors.append(f"{where}: HealthCheckNodeState {t}{since}: Slurm {feats.version} ignores it "
                              "('Invalid HealthCheckNodeState value'), so the check runs on nodes in any state")
    if feats.healthcheck_only_alone:
        for only in ("START_ONLY", "REBOOT_ONLY"):
            if only in tokens and len(tokens) > 1:
                rep.errors.append(f"{where}: HealthCheckNodeState={value}: {only} cannot be combined with other "
                                  f"options in Slurm {feats.version} (fatal)")
