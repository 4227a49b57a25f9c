"""ClusterFacts for a request: from the site inventory when there is one, else from sinfo/scontrol.

The inventory is what the admin wrote (GPU type and memory, interfaces, storage HCAs, run root); the live
partition record (MaxTime, its nodes) comes from ``scontrol -o show partition`` when a backend is given.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from slurmkit.errors import UsageError
from slurmkit.jobs.spec import ClusterFacts

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend
    from slurmkit.model.cluster import Cluster

def inventory_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The site inventory (slurmkit.siteinv.find_inventory: $SLURMKIT_INVENTORY, beside $SLURM_CONF, /etc/slurm)."""
    from slurmkit.siteinv import find_inventory

    return find_inventory(os.environ if environ is None else environ)


def from_cluster(cluster: Cluster, partition: str | None, source: str) -> ClusterFacts:
    """Facts from the inventory alone (no Slurm call): used by --dry-run and as the base for a submit."""
    site = cluster.site
    pname = partition or site.default_partition
    part = None
    if pname:
        try:
            part = cluster.partition(pname)
        except KeyError:
            part = None  # maybe defined only in the live Slurm: preflight decides
    else:
        part = cluster.default_partition
        pname = part.name if part else None
    node_gpus: list[tuple[str, int]] = []
    gpu_types: Counter[str] = Counter()
    mem = 0
    storage_hcas: list[str] = []
    groups = cluster.partition_groups(part) if part else list(cluster.node_groups)
    # the same per-GPU share the config generator writes as DefCpuPerGPU / DefMemPerGPU (NodeGroup.cpus_per_gpu)
    gpu_groups = [g for g in groups if g.gpu_count]
    cpg = min((g.cpus_per_gpu for g in gpu_groups), default=0)
    mpg = min((g.mem_per_gpu_mb for g in gpu_groups), default=0)
    shapes: list[tuple[str, int, int]] = []
    maps = {gpu_os_cpus(g) for g in gpu_groups}
    gpu_cpus = maps.pop() if len(maps) == 1 else ()
    for g in groups:
        for h in g.hostnames:
            node_gpus.append((h, g.gpu_count))
            shapes.append((h, max(0, g.usable_cpus), max(0, g.usable_memory_mb)))
        if g.gpus:
            gpu_types[g.gpus.type] += len(g.hostnames)
            mem = min(mem, g.gpus.memory_mb) if mem else g.gpus.memory_mb
        storage_hcas += [n.name for n in g.nics if n.role == "storage" and n.kind in ("ib", "roce")]
    excludes = tuple(dict.fromkeys([*site.nccl_ib_hca_exclude, *storage_hcas]))
    return ClusterFacts(
        partition=pname,
        gpus_per_node=_mode([n for _, n in node_gpus if n]) if node_gpus else None,
        gpu_type=gpu_types.most_common(1)[0][0] if gpu_types else None,
        gpu_memory_mb=mem,
        node_gpus=tuple(node_gpus),
        node_shapes=tuple(shapes),
        max_time=part.max_time if part else None,
        cpus_per_gpu=cpg,
        mem_per_gpu_mb=mpg,
        resources_source="inventory" if cpg or mpg else "",
        gpu_cpus=gpu_cpus,
        topo_model=cluster.topology,
        socket_ifname=site.socket_ifname,
        ib_hca_exclude=excludes,
        site_env=site.env,
        run_root=site.run_root,
        source=source,
        inventory_sha256=cluster.source_sha256,
    )


def gpu_os_cpus(group) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    """Each GPU's cores (gres.conf Cores=, Slurm's core indices: gres.conf(5) 22.05 and 24.11 "Cores ... Slurm's
    abstract core index") as OS CPU ids: core c's hardware threads are c, c + cores, c + 2*cores ... (Linux's
    enumeration on x86: the first thread of every core, then the second...). () when the inventory gives none."""
    from slurmkit import indexlist

    gp = group.gpus
    if gp is None or not gp.cores or len(gp.cores) != gp.count:
        return ()
    ncores, tpc = group.cpu.cores, max(1, group.cpu.threads_per_core)
    out = []
    for spec in gp.cores:
        cores = indexlist.expand_ints(spec)
        out.append(indexlist.fold_ints([c + k * ncores for c in cores for k in range(tpc)]))
    return tuple(out)


def load_inventory_facts(partition: str | None, path: str | None = None) -> ClusterFacts | None:
    path = path or inventory_path()
    if not path:
        return None
    hit, stamp = _cached_facts(path, partition)
    if hit is not None:
        return hit
    from slurmkit.model.cache import load_cluster_cached as load_cluster

    facts = from_cluster(load_cluster(path), partition, f"inventory:{path}")
    if stamp is not None:
        _cache_facts(path, partition, stamp, facts)
    return facts


# --- the facts cache: gpusub's hot path reads the same inventory on every call ------------------------------------
# One file per user, {(inventory path, partition): (stamp, facts)}; the stamp is the inventory's stat (size, mtime,
# ctime, inode: any write changes ctime) and that of the code that builds the facts, so an edited inventory or an
# upgraded slurmkit is read again. A hit skips the inventory model (its ~40 dataclasses), the file's sha256 and the
# topology's hostlist expansion. Only an optimisation: any problem falls back to reading the inventory.

def _facts_cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit", "gpusub-facts.pickle")


def _facts_stamp(path: str) -> tuple[object, ...] | None:
    from slurmkit import __version__
    from slurmkit.jobs import spec

    pkg = os.path.dirname(os.path.dirname(__file__))
    try:
        st = os.stat(path)
        code = tuple(os.stat(f).st_mtime_ns for f in (__file__, str(spec.__file__), *(
            os.path.join(pkg, *rel) for rel in (("model", "cluster.py"), ("model", "load.py"),
                                                ("placement", "topology.py")))))
    except (OSError, TypeError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, __version__, code)


def _read_facts_cache() -> dict[Any, Any]:
    import pickle

    try:
        with open(_facts_cache_file(), "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:  # only our own, unshared file
                return {}
            data = pickle.load(fh)  # noqa: S301 - written by this user, mode 0600 in a 0700 directory
    except (OSError, EOFError, ValueError, AttributeError, ImportError, TypeError, IndexError, KeyError,
            pickle.PickleError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached_facts(path: str, partition: str | None) -> tuple[ClusterFacts | None, tuple[object, ...] | None]:
    stamp = _facts_stamp(path)
    if stamp is None:
        return None, None
    entry = _read_facts_cache().get((os.path.abspath(path), partition))
    if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == stamp and isinstance(entry[1], ClusterFacts):
        return entry[1], stamp
    return None, stamp


def _cache_facts(path: str, partition: str | None, stamp: tuple[object, ...], facts: ClusterFacts) -> None:
    import pickle
    from dataclasses import replace

    topo = facts.topo_model
    if topo is not None and (topo.switches or topo.blocks):
        from slurmkit.placement.topology import PlacementTopology

        try:
            facts = replace(facts, topo_model=None, topo_placement=PlacementTopology.from_model(topo))
        except UsageError:
            return  # a topology the planner refuses: the uncached path reports it, every time
    elif topo is not None:
        facts = replace(facts, topo_model=None)
    data = _read_facts_cache()
    data[(os.path.abspath(path), partition)] = (stamp, facts)
    target = _facts_cache_file()
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(os.path.dirname(target))
        tmp = f"{target}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, target)
    except (OSError, pickle.PickleError):
        pass


def live_partition(backend: Backend, partition: str | None) -> dict[str, str]:
    """The ``scontrol -o show partition`` record of ``partition`` (or the default one); UsageError if missing."""
    return pick_partition(backend.partitions(), partition)


def from_slurm(backend: Backend, partition: str | None, base: ClusterFacts | None) -> ClusterFacts:
    """Merge the live partition (MaxTime, node list), the node states, the pending queue and the reservations
    (what placement decides on: jobs/liveplace.py) and, without an inventory, node GPUs and topology."""
    import time
    from dataclasses import replace

    # the partition records, one `scontrol show node`, the pending queue, the reservations and, without an
    # inventory, the topology: independent queries, asked side by side
    calls: list[Callable[[], Any]] = [backend.partitions, backend.nodes, _optional(backend, "pending"),
                                      _optional(backend, "reservations")]
    if base is None or not base.node_gpus:
        calls.append(backend.topology)
    now = time.time()
    results = concurrently(*calls)
    parts, all_nodes, pending, resvs = results[0], results[1], results[2], results[3]
    rec = pick_partition(parts, partition or (base.partition if base else None))
    pname = rec["PartitionName"]
    members = set(_expand(rec.get("Nodes", ""))) if rec.get("Nodes") not in (None, "", "(null)") else set()
    max_time = rec.get("MaxTime") or None
    default_time = rec.get("DefaultTime") if rec.get("DefaultTime") not in (None, "", "NONE", "(null)") else None
    nodes = [n for n in all_nodes if not members or n.name in members]
    live = tuple((n.name, n.state, n.flags, n.free_gpus, n.total_gpus) for n in nodes)
    # each pending job with the nodes it may take: its pin, else every node of its partitions
    everyone = frozenset(n.name for n in all_nodes)
    part_nodes: dict[str, frozenset[str]] = {}  # each partition expanded once, however many jobs wait in it
    queue = []
    for j in pending:
        if j.req_nodes:
            may = frozenset(j.req_nodes)
        else:
            for p in j.partitions:
                if p not in part_nodes:
                    spec = next((r.get("Nodes", "") for r in parts if r.get("PartitionName") == p), "")
                    part_nodes[p] = frozenset(_expand_or_empty(spec))
            may = frozenset().union(*(part_nodes[p] for p in j.partitions)) or everyone
        queue.append((j, may - frozenset(j.exc_nodes) if j.exc_nodes else may))
    extra = dict(pending=tuple(queue), reservations=tuple(resvs), default_time=default_time, live_at=now,
                 node_features=tuple((n.name, n.features) for n in nodes))
    if base is not None and base.node_gpus:
        node_gpus = tuple((n, g) for n, g in base.node_gpus if not members or n in members)
        shapes = tuple(x for x in base.node_shapes if not members or x[0] in members)
        return replace(base, partition=pname, max_time=max_time, node_gpus=node_gpus or base.node_gpus,
                       node_shapes=shapes or base.node_shapes, live_nodes=live, **extra)  # type: ignore[arg-type]
    node_gpus = tuple((n.name, n.total_gpus) for n in nodes)
    cpg, mpg = per_gpu_from_records(nodes)
    gtypes = Counter(_gres_type(n.gres) for n in nodes if _gres_type(n.gres))
    return ClusterFacts(
        partition=pname,
        gpus_per_node=_mode([g for _, g in node_gpus if g]) if node_gpus else None,
        gpu_type=gtypes.most_common(1)[0][0] if gtypes else None,
        gpu_memory_mb=0,
        node_gpus=node_gpus,
        node_shapes=tuple(node_shape(n) for n in nodes),
        max_time=max_time,
        topo_records=tuple(results[4]),
        live_nodes=live,
        cpus_per_gpu=cpg,
        mem_per_gpu_mb=mpg,
        resources_source="node records" if cpg or mpg else "",
        source="slurm",
        notes=("no site inventory: GPU memory unknown, NCCL interface left to NCCL",),
        **extra,  # type: ignore[arg-type]
    )


def _optional(backend: Backend, name: str) -> Callable[[], Any]:
    """A query only the CLI/pyslurm backends have (a test double may lack it): none asked, nothing known."""
    fn = getattr(backend, name, None)
    return fn if fn is not None else (lambda: [])


def _expand_or_empty(hosts: str) -> list[str]:
    return _expand(hosts) if hosts and hosts != "(null)" else []


def pick_partition(parts: list[dict[str, str]], partition: str | None) -> dict[str, str]:
    """The record of ``partition`` (or the default one) among ``scontrol -o show partition``'s; UsageError if
    missing."""
    if partition:
        for p in parts:
            if p.get("PartitionName") == partition:
                return p
        known = ", ".join(sorted(p.get("PartitionName", "?") for p in parts)) or "none"
        raise UsageError(f"--partition: {partition!r} does not exist (partitions: {known})")
    for p in parts:
        if p.get("Default") == "YES":
            return p
    if parts:
        return parts[0]
    raise UsageError("the cluster has no partitions")


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call in its own thread (they wait on slurmctld, not on the CPU); results in order, the first
    error raised after all have finished."""
    import threading

    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
            errors[i] = exc

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(1, len(calls))]
    for t in threads:
        t.start()
    one(0)
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def per_gpu_from_records(nodes) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(CPUs, MB) per GPU from ``scontrol show node`` records, the smallest over the GPU nodes: CPUTot minus the
    specialised cores (CoreSpecCount x ThreadsPerCore), RealMemory minus MemSpecLimit, divided by the node's GPUs
    (slurm.conf(5) 22.05: CoreSpecCount / MemSpecLimit are reserved for system use, not for jobs)."""
    from slurmkit.model.cluster import cpus_per_device

    cpg: list[int] = []
    mpg: list[int] = []
    for n in nodes:
        if not n.total_gpus:
            continue
        cpus = n.cpus - n.spec_cores * max(1, n.threads_per_core)
        if cpus > 0:
            cpg.append(cpus_per_device(cpus, n.threads_per_core, n.total_gpus))  # whole cores (model/cluster.py)
        mem = n.real_memory - n.mem_spec_mb
        if mem > 0:
            mpg.append(mem // n.total_gpus)
    return (min(cpg) if cpg else 0, min(mpg) if mpg else 0)


def node_shape(n) -> tuple[str, int, int]:  # type: ignore[no-untyped-def]
    """(name, usable CPUs, usable memory MB) of a ``scontrol show node`` record: what a job can get there
    (slurm.conf(5) 22.05: CoreSpecCount cores and MemSpecLimit memory are reserved for system use)."""
    return (n.name, max(0, n.cpus - n.spec_cores * max(1, n.threads_per_core)), max(0, n.real_memory - n.mem_spec_mb))


def _gres_type(gres: str) -> str | None:
    for item in gres.split(","):
        f = item.split("(", 1)[0].split(":")
        if f[0] == "gpu" and len(f) == 3:
            return f[1]
    return None


def _mode(values: list[int]) -> int | None:
    if not values:
        return None
    return Counter(values).most_common(1)[0][0]


def _expand(hosts: str) -> list[str]:
    from slurmkit import hostlist

    return hostlist.expand(hosts)
