"""discover: gather from a fake sysfs tree and a fake NVML, convert purely; the fragment must load."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

from slurmkit.discover import convert, gather
from slurmkit.discover.convert import CpuInfo, Facts, GpuInfo
from slurmkit.model.load import load_cluster_dict


def make_sysfs(root: Path, sockets: int, cores: int, threads: int) -> None:
    """Linux numbering of a 2-socket SMT box: cpu0..N-1 are the first threads (socket 0 then 1), the
    hyperthread siblings follow (cpuN.. ). core_id repeats across sockets and may be sparse."""
    base = root / "sys/devices/system/cpu"
    n = sockets * cores * threads
    (base).mkdir(parents=True)
    (base / "online").write_text(f"0-{n - 1}\n")
    for cpu in range(n):
        t, rest = divmod(cpu, sockets * cores)
        pkg, core = divmod(rest, cores)
        d = base / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core * 2}\n")  # sparse ids, as on many Xeons
    ib = root / "sys/class/infiniband"
    for hca, layer, rate in (("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)"), ("mlx5_1", "Ethernet", "200 Gb/sec (4X HDR)")):
        p = ib / hca / "ports" / "1"
        p.mkdir(parents=True)
        (p / "state").write_text("4: ACTIVE\n")
        (p / "rate").write_text(rate + "\n")
        (p / "link_layer").write_text(layer + "\n")
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway\tFlags\n"
        "ens1\t0000A8C0\t00000000\t0001\n"
        "bond0\t00000000\t0101A8C0\t0003\n"
    )


class FakeNVML:
    """Enough of pynvml for gather.read_gpus: 8 GPUs on an NVSwitch, affinity by socket (OS ids incl. HT)."""

    class NVMLError(Exception):
        pass

    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, ncpu_per_socket_threads: list[list[int]], mig: bool = False, count: int = 8, fail_init: bool = False):
        self.aff = ncpu_per_socket_threads
        self.mig = mig
        self.count = count
        self.fail_init = fail_init
        self.inited = 0
        # deliberately enumerate out of PCI order: discover must sort by bus id
        self.bus = [f"00000000:{b:02X}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)][:count][::-1]

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.inited -= 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple[str, int]:
        return ("gpu", i)

    def nvmlDeviceGetName(self, h: tuple) -> bytes:
        if h[0] == "mig":
            return b"NVIDIA H100 80GB HBM3 MIG 3g.40gb" if h[2] == 0 else b"NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, h: tuple) -> SimpleNamespace:
        return SimpleNamespace(busId=self.bus[h[1]].encode())

    def nvmlDeviceGetMinorNumber(self, h: tuple) -> int:
        # minors follow PCI order here; index order is reversed
        return sorted(self.bus).index(self.bus[h[1]])

    def nvmlDeviceGetMemoryInfo(self, h: tuple) -> SimpleNamespace:
        return SimpleNamespace(total=81559 * 1024 * 1024)

    def nvmlDeviceGetCpuAffinity(self, h: tuple, words: int) -> list[int]:
        pci_rank = sorted(self.bus).index(self.bus[h[1]])
        cpus = self.aff[0 if pci_rank < self.count // 2 else 1]
        mask = [0] * words
        for c in cpus:
            mask[c // 64] |= 1 << (c % 64)
        return mask

    def nvmlDeviceGetNvLinkState(self, h: tuple, link: int) -> int:
        if link >= 18:
            raise self.NVMLError("invalid argument")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: tuple, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0xE0 + link % 4:02X}:00.0")  # NVSwitches, not GPUs

    def nvmlDeviceGetMigMode(self, h: tuple) -> tuple[int, int]:
        if not self.mig:
            raise self.NVMLError("Not Supported")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: tuple) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: tuple, j: int) -> tuple:
        if j > 1:
            raise self.NVMLError("Not Found")
        return ("mig", h[1], j)

    def nvmlDeviceGetGpuInstanceId(self, mh: tuple) -> int:
        return 1 if mh[2] == 0 else 9

    def nvmlDeviceGetComputeInstanceId(self, mh: tuple) -> int:
        return 0


def _os_ids(sockets: int, cores: int, threads: int) -> list[list[int]]:
    """OS CPU ids (all hyperthreads) of each socket, for the numbering make_sysfs writes."""
    out: list[list[int]] = [[] for _ in range(sockets)]
    for cpu in range(sockets * cores * threads):
        _t, rest = divmod(cpu, sockets * cores)
        out[rest // cores].append(cpu)
    return out


def test_gather_and_convert_dgx_like_node(tmp_path: Path) -> None:
    make_sysfs(tmp_path, sockets=2, cores=56, threads=2)
    nvml = FakeNVML(_os_ids(2, 56, 2))
    facts = gather(root=tmp_path, nvml=nvml, hostname="dgx001")  # type: ignore[arg-type]
    assert nvml.inited == 0, "NVML must be shut down"
    frag = convert.fragment(facts, "dgx")
    assert frag["cpu"] == {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2}
    g = frag["gpus"]
    assert g["type"] == "h100" and g["count"] == 8 and g["files"] == "/dev/nvidia[0-7]"
    # OS ids 0-55 + 112-167 are socket 0 -> logical cores 0-55; hyperthreads do not widen the range
    assert g["cores"] == ["0-55"] * 4 + ["56-111"] * 4
    assert g["links"] == "nvlink"
    assert [n["kind"] for n in frag["nics"]] == ["ib", "roce"] and frag["nics"][0]["rate_gbps"] == 400
    assert facts.default_route_if == "bond0"
    text = convert.render_fragment(facts, "dgx")
    assert "nvidia_h100_80gb_hbm3" in text
    # the fragment is a valid node group
    inv = {"cluster": "t", "node_groups": yaml.safe_load(text)}
    c = load_cluster_dict(inv)
    assert c.node_groups[0].gpus is not None and c.node_groups[0].gpus.cores[4] == "56-111"


def test_mig_devices_become_mig_layout(tmp_path: Path) -> None:
    make_sysfs(tmp_path, sockets=2, cores=8, threads=1)
    facts = gather(root=tmp_path, nvml=FakeNVML(_os_ids(2, 8, 1), mig=True, count=2), hostname="n1")  # type: ignore[arg-type]
    frag = convert.fragment(facts)
    assert frag["gpus"]["mig"] == [["3g.40gb@1", "1g.10gb@9"], ["3g.40gb@1", "1g.10gb@9"]]
    c = load_cluster_dict({"cluster": "t", "node_groups": [frag]})
    assert c.node_groups[0].gpus.mig_layout[0][1].gi == 9  # type: ignore[union-attr]


def test_no_nvml_still_prints_cpu_memory_and_hcas(tmp_path: Path) -> None:
    make_sysfs(tmp_path, sockets=1, cores=4, threads=2)
    facts = gather(root=tmp_path, nvml=FakeNVML([[0]], fail_init=True), hostname="cpu1")  # type: ignore[arg-type]
    assert facts.gpus is None and "Shared Library" in facts.gpu_note
    text = convert.render_fragment(facts)
    assert "no GPUs listed" in text
    frag = yaml.safe_load(text)[0]
    assert "gpus" not in frag and frag["cpu"]["threads_per_core"] == 2 and frag["name"] == "cpu"


def test_logical_cores_ignore_os_numbering() -> None:
    # interleaved numbering: even OS ids on socket 0, odd on socket 1 (common on AMD/older BIOSes)
    cpus = [CpuInfo(i, i % 2, i // 2) for i in range(8)]
    m = convert.logical_cores(cpus)
    assert [m[i] for i in (0, 2, 4, 6)] == [0, 1, 2, 3]
    assert [m[i] for i in (1, 3, 5, 7)] == [4, 5, 6, 7]
    assert convert.ranges({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_direct_nvlink_pairs_give_a_matrix() -> None:
    cpus = [CpuInfo(i, 0, i) for i in range(4)]
    a, b = "0000:01:00.0", "0000:02:00.0"
    gpus = [GpuInfo("NVIDIA A100-PCIE-40GB", a, 0, 40000, (0, 1), (b,) * 12),
            GpuInfo("NVIDIA A100-PCIE-40GB", b, 1, 40000, (2, 3), (a,) * 12)]
    frag = convert.fragment(Facts("n", cpus, 1000, gpus))
    assert frag["gpus"]["links"] == [[-1, 12], [12, -1]]
    assert frag["gpus"]["type"] == "a100" and frag["gpus"]["cores"] == ["0-1", "2-3"]


def test_real_h200_recording() -> None:
    """What `slurmkit discover --group h200` printed on a real H200 VM (1 GPU, 16 cores, NVML 5xx)."""
    facts = Facts("vm", [CpuInfo(i, 0, i) for i in range(16)], 128887,
                  [GpuInfo("NVIDIA H200", "0000:00:06.0", 0, 143771, tuple(range(16)))])
    frag = convert.fragment(facts, "h200")
    assert frag["gpus"] == {"type": "h200", "count": 1, "memory_mb": 143771, "files": "/dev/nvidia0",
                            "cores": ["0-15"], "links": "none"}
    assert convert.short_type("NVIDIA L40S") == "l40s"
    assert convert.short_type("Tesla V100-PCIE-32GB") == "v100"
    assert convert.short_type("NVIDIA A100-SXM4-80GB") == "a100"
