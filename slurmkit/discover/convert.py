"""Pure conversion of gathered node facts into an inventory node-group fragment.

The subtle part is ``Cores=``: NVML and sysfs give a GPU's CPU affinity as OS CPU ids, but gres.conf wants
Slurm *logical core indices* (hwloc's Core L#: cores numbered socket by socket, each core once, whatever the
OS numbering of its hyperthreads). DeepOps wrote OS ids there and Slurm rejected them (deepops #1195).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from slurmkit import hostlist


@dataclass(frozen=True)
class CpuInfo:
    os_id: int  # /sys/devices/system/cpu/cpuN
    package: int  # topology/physical_package_id
    core: int  # topology/core_id (unique within a package only)


@dataclass(frozen=True)
class MigDevice:
    profile: str  # "3g.40gb"
    gi: int
    ci: int


@dataclass(frozen=True)
class GpuInfo:
    name: str  # NVML product name, "NVIDIA H100 80GB HBM3"
    bus_id: str  # normalised PCI bus id, "0000:18:00.0"
    minor: int  # /dev/nvidia<minor>
    memory_mb: int
    affinity: tuple[int, ...]  # OS CPU ids near the GPU
    nvlink_peers: tuple[str, ...] = ()  # remote bus id of each active NVLink (a GPU, or an NVSwitch)
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class HcaPort:
    hca: str  # mlx5_0
    port: int
    state: str  # ACTIVE, DOWN ...
    rate_gbps: int
    link_layer: str  # InfiniBand | Ethernet


@dataclass
class Facts:
    hostname: str
    cpus: list[CpuInfo]
    memory_mb: int
    gpus: list[GpuInfo] | None = None  # None: no NVML here
    gpu_note: str = ""  # why GPUs are missing
    hcas: list[HcaPort] = field(default_factory=list)
    default_route_if: str | None = None


def normalize_bus_id(bus: str | bytes) -> str:
    """NVML gives ``00000000:18:00.0`` (sometimes bytes, sometimes upper case); sysfs ``0000:18:00.0``."""
    text = bus.decode() if isinstance(bus, bytes) else str(bus)
    text = text.strip().lower()
    m = re.match(r"^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])$", text)
    if not m:
        return text
    return f"{int(m.group(1), 16):04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def logical_cores(cpus: list[CpuInfo]) -> dict[int, int]:
    """OS CPU id -> Slurm logical core index: cores ordered by package, then by their first OS CPU id
    (hwloc sorts siblings by cpuset), hyperthreads of one core share its index."""
    first: dict[tuple[int, int], int] = {}
    for c in cpus:
        key = (c.package, c.core)
        first[key] = min(first.get(key, c.os_id), c.os_id)
    order = sorted(first, key=lambda k: (k[0], first[k]))
    index = {k: i for i, k in enumerate(order)}
    return {c.os_id: index[(c.package, c.core)] for c in cpus}


def geometry(cpus: list[CpuInfo]) -> tuple[int, int, int]:
    """(sockets, cores_per_socket, threads_per_core) as slurmd -C would report them."""
    packages = {c.package for c in cpus}
    cores = {(c.package, c.core) for c in cpus}
    per_pkg = max(sum(1 for k in cores if k[0] == p) for p in packages)
    threads = max(sum(1 for c in cpus if (c.package, c.core) == k) for k in cores)
    return len(packages), per_pkg, threads


def ranges(values: list[int] | set[int]) -> str:
    """[0,1,2,3,8] -> '0-3,8' (slurmkit.indexlist.fold_ints)."""
    from slurmkit.indexlist import fold_ints

    return fold_ints(list(values))


_VENDOR = {"nvidia", "tesla", "geforce"}


def slurm_type_name(product: str) -> str:
    """What Slurm's NVML autodetection calls the GPU: the product name lower-cased, spaces -> '_'
    (``NVIDIA H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3``)."""
    return re.sub(r"\s+", "_", product.strip()).lower()


def short_type(product: str) -> str:
    """A short inventory type that is a substring of Slurm's name (so AutoDetect sanity checks match):
    ``nvidia_h100_80gb_hbm3`` -> ``h100``, ``nvidia_a100-sxm4-80gb`` -> ``a100``, ``nvidia_l40s`` -> ``l40s``."""
    tokens = [t for t in slurm_type_name(product).split("_") if t]
    while len(tokens) > 1 and tokens[0] in _VENDOR:
        tokens = tokens[1:]
    out = []
    for t in tokens:
        out.append(t.split("-")[0])
        if re.search(r"\d", t):
            break
    return "_".join(out) or "gpu"


def _links(gpus: list[GpuInfo]) -> str | list[list[int]]:
    """'nvlink' when every GPU reaches an NVSwitch (all-to-all), a count matrix for direct links, else 'none'."""
    if not any(g.nvlink_peers for g in gpus):
        return "none"
    idx = {g.bus_id: i for i, g in enumerate(gpus)}
    if all(g.nvlink_peers for g in gpus) and any(p not in idx for g in gpus for p in g.nvlink_peers):
        return "nvlink"  # links end on NVSwitches: every GPU pair is connected
    n = len(gpus)
    matrix = [[-1 if i == j else 0 for j in range(n)] for i in range(n)]
    for i, g in enumerate(gpus):
        for p in g.nvlink_peers:
            j = idx.get(p)
            if j is not None and j != i:
                matrix[i][j] += 1
    return matrix


def fragment(f: Facts, group: str | None = None) -> dict:
    """The node-group mapping for ``node_groups:`` (keys in the loader's order)."""
    sockets, cps, tpc = geometry(f.cpus)
    out: dict = {"name": group or "", "hosts": f.hostname,
                 "cpu": {"sockets": sockets, "cores_per_socket": cps, "threads_per_core": tpc},
                 "memory_mb": f.memory_mb}
    features: list[str] = []
    if f.gpus:
        gpus = sorted(f.gpus, key=lambda g: g.bus_id)  # Slurm indexes GPUs in PCI bus order
        logical = logical_cores(f.cpus)
        gtype = short_type(gpus[0].name)
        g: dict = {
            "type": gtype,
            "count": len(gpus),
            "memory_mb": min(x.memory_mb for x in gpus),
            "files": hostlist.fold(f"/dev/nvidia{x.minor}" for x in gpus) if len(gpus) > 1 else f"/dev/nvidia{gpus[0].minor}",
        }
        cores = []
        for x in gpus:
            lc = {logical[c] for c in x.affinity if c in logical}
            cores.append(ranges(lc) if lc else ranges(set(logical.values())))
        g["cores"] = cores
        links = _links(gpus)
        g["links"] = links
        if any(x.mig_devices for x in gpus):
            g["mig"] = [[f"{m.profile}@{m.gi}" if m.ci == 0 else {"profile": m.profile, "gi": m.gi, "ci": m.ci}
                         for m in sorted(x.mig_devices, key=lambda m: (m.gi, m.ci))] for x in gpus]
        out["gpus"] = g
        features.append(gtype)
        if links != "none":
            features.append("nvlink")
        if len({x.name for x in gpus}) > 1:
            out["_note_mixed"] = sorted({x.name for x in gpus})
    seen: set[str] = set()
    nics = []
    for p in f.hcas:
        if p.hca in seen:
            continue
        seen.add(p.hca)
        nics.append({"name": p.hca, "kind": "ib" if p.link_layer.lower() == "infiniband" else "roce",
                     "rate_gbps": p.rate_gbps, "role": "compute"})
    if nics:
        out["nics"] = nics
    if features:
        out["features"] = features
    if not out["name"]:
        out["name"] = features[0] if features else "cpu"
    return out


def render_fragment(f: Facts, group: str | None = None) -> str:
    """YAML for ``node_groups:`` plus comments with what the inventory has no key for."""
    frag = fragment(f, group)
    mixed = frag.pop("_note_mixed", None)
    lines = [f"# slurmkit discover on {f.hostname}: paste under node_groups: and widen 'hosts'"]
    lines.append("# add reserve: {memory_mb: ..., cores: ...} for the OS (-> MemSpecLimit / CoreSpecCount)")
    if f.gpus:
        gpus = sorted(f.gpus, key=lambda g: g.bus_id)
        lines.append(f"# NVML: {len(gpus)} x {gpus[0].name}; Slurm's autodetected type: {slurm_type_name(gpus[0].name)}")
        for i, g in enumerate(gpus):
            mig = "MIG on" if g.mig_enabled else "MIG off"
            lines.append(f"#   gpu{i}: /dev/nvidia{g.minor} bus {g.bus_id} {mig}, {len(g.nvlink_peers)} NVLinks")
        if mixed:
            lines.append(f"# WARNING: mixed GPU models {', '.join(mixed)}: split them into node groups by hand")
    else:
        lines.append(f"# no GPUs listed: {f.gpu_note or 'none found'}")
    for p in f.hcas:
        lines.append(f"# HCA {p.hca} port {p.port}: {p.state}, {p.rate_gbps} Gb/s, {p.link_layer}")
    if f.default_route_if:
        lines.append(f"# default route via {f.default_route_if} (site.socket_ifname for NCCL/Gloo bootstrap)")
    body = yaml.safe_dump([frag], sort_keys=False, default_flow_style=None, width=120)
    return "\n".join(lines) + "\n" + body
