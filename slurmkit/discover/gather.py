"""I/O side of discover: read this machine into ``convert.Facts``. Every reader takes a root / module so
tests point it at a fake sysfs tree (tmp_path) and a fake NVML."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

from slurmkit.discover.convert import CpuInfo, Facts, GpuInfo, HcaPort, MigDevice, normalize_bus_id


def _read(p: Path) -> str:
    return p.read_text().strip()


def _cpu_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def read_cpus(root: Path = Path("/")) -> list[CpuInfo]:
    """Online CPUs with package/core ids from /sys/devices/system/cpu (what slurmd and hwloc read)."""
    base = root / "sys/devices/system/cpu"
    online = _cpu_list(_read(base / "online")) if (base / "online").exists() else None
    cpus = []
    for d in sorted(base.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        n = int(d.name[3:])
        if online is not None and n not in online:
            continue
        topo = d / "topology"
        if not topo.is_dir():
            continue
        cpus.append(CpuInfo(n, int(_read(topo / "physical_package_id")), int(_read(topo / "core_id"))))
    if not cpus:
        import psutil

        # no sysfs topology (containers): psutil's counts, one package
        logical = psutil.cpu_count(logical=True) or 1
        physical = psutil.cpu_count(logical=False) or logical
        tpc = max(1, logical // physical)
        cpus = [CpuInfo(i, 0, i // tpc) for i in range(logical)]
    return cpus


def read_memory_mb() -> int:
    import psutil

    return int(psutil.virtual_memory().total // (1024 * 1024))


def read_hcas(root: Path = Path("/")) -> list[HcaPort]:
    out: list[HcaPort] = []
    base = root / "sys/class/infiniband"
    if not base.is_dir():
        return out
    for hca in sorted(base.iterdir()):
        for port in sorted((hca / "ports").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            state = _read(port / "state") if (port / "state").exists() else "?"
            rate = _read(port / "rate") if (port / "rate").exists() else "0"
            m = re.match(r"\s*(\d+)", rate)
            layer = _read(port / "link_layer") if (port / "link_layer").exists() else "InfiniBand"
            out.append(HcaPort(hca.name, int(port.name), state.split(":")[-1].strip(), int(m.group(1)) if m else 0, layer))
    return out


def read_default_route(root: Path = Path("/")) -> str | None:
    """The interface of the IPv4 default route (/proc/net/route, destination 00000000)."""
    p = root / "proc/net/route"
    if not p.exists():
        return None
    for line in p.read_text().splitlines()[1:]:
        cols = line.split()
        if len(cols) > 2 and cols[1] == "00000000":
            return cols[0]
    return None


def _nvml_str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _affinity(nvml: ModuleType, h: Any, ncpus: int) -> tuple[int, ...]:
    words = max(1, (ncpus + 63) // 64)
    mask = nvml.nvmlDeviceGetCpuAffinity(h, words)
    return tuple(w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1)


def read_gpus(nvml: ModuleType, ncpus: int) -> list[GpuInfo]:
    """Every GPU NVML sees. NVML calls a GPU cannot answer (NOT_SUPPORTED) leave that fact empty."""
    err = nvml.NVMLError
    nvml.nvmlInit()  # outside the try: a failed init must not be followed by a shutdown
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _nvml_str(nvml.nvmlDeviceGetName(h))
            bus = normalize_bus_id(nvml.nvmlDeviceGetPciInfo(h).busId)
            minor = int(nvml.nvmlDeviceGetMinorNumber(h))
            mem = int(nvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024))
            try:
                aff = _affinity(nvml, h, ncpus)
            except err:
                aff = ()
            peers = []
            for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
                try:
                    if nvml.nvmlDeviceGetNvLinkState(h, link) != 1:
                        continue
                    peers.append(normalize_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
                except err:
                    break  # NOT_SUPPORTED / INVALID_ARGUMENT past the last link
            mig_on, migs = False, []
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(h)
                mig_on = current == 1
            except err:
                pass
            if mig_on:
                for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
                    try:
                        mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                    except err:
                        continue
                    m = re.search(r"(\d+g\.\d+gb(?:\+me)?)", _nvml_str(nvml.nvmlDeviceGetName(mh)))
                    if m:
                        migs.append(MigDevice(m.group(1), int(nvml.nvmlDeviceGetGpuInstanceId(mh)),
                                              int(nvml.nvmlDeviceGetComputeInstanceId(mh))))
            out.append(GpuInfo(name, bus, minor, mem, aff, tuple(peers), mig_on, tuple(migs)))
        return out
    finally:
        nvml.nvmlShutdown()


def gather(root: Path = Path("/"), nvml: ModuleType | None = None, hostname: str | None = None) -> Facts:
    cpus = read_cpus(root)
    facts = Facts(
        hostname=hostname or socket.gethostname().split(".")[0],
        cpus=cpus,
        memory_mb=read_memory_mb(),
        hcas=read_hcas(root),
        default_route_if=read_default_route(root),
    )
    if nvml is None:
        try:
            import pynvml as nvml_mod  # lazy: only discover and the health checks load NVML
        except ImportError as exc:
            facts.gpu_note = f"pynvml is not installed ({exc})"
            return facts
        nvml = nvml_mod
    try:
        facts.gpus = read_gpus(nvml, max(c.os_id for c in cpus) + 1)
    except nvml.NVMLError as exc:  # type: ignore[attr-defined]
        facts.gpu_note = f"NVML unavailable: {exc}"
        facts.gpus = None
    if facts.gpus == []:
        facts.gpu_note = "NVML reports no GPUs"
        facts.gpus = None
    return facts
