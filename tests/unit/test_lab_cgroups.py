"""The lab's cgroup mode, the pure parts: what a host lacks is said exactly, and the nodes' shape fits the host
(24.11 wants gres.conf Cores= on whole sockets). The lab tests (tests/integration/test_cgroup_lab.py) run it."""

from __future__ import annotations

import pytest

from slurmkit.errors import LabError
from slurmkit.lab import Lab, LabSpec
from slurmkit.lab import cgroups as cg
from slurmkit.lab.inventory import lab_inventory

HYBRID = """tmpfs /sys/fs/cgroup tmpfs rw 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_a_hybrid_v1_host_has_everything():
    assert cg.problems(HYBRID, has_cgroupns=True) == []
    assert cg.v1_mounts(HYBRID)["memory"].as_posix() == "/sys/fs/cgroup/memory"


def test_a_v2_only_host_is_told_exactly_what_is_missing():
    got = cg.problems("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n", has_cgroupns=True)
    assert len(got) == 1 and "freezer, cpuset, memory, devices, cpuacct not mounted" in got[0]


def test_one_missing_controller_and_no_namespaces():
    got = cg.problems(HYBRID.replace("devices", "blkio"), has_cgroupns=False)
    assert "controller(s) devices not mounted" in got[0] and "no cgroup namespaces" in got[1]


def test_lab_up_refuses_before_starting_anything(monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cg, "problems", lambda *a, **k: ["cgroup v1 controller(s) devices not mounted"])
    monkeypatch.setattr("os.geteuid", lambda: 0)
    lab = Lab(LabSpec(dir=str(tmp_path / "lab"), cgroups=True, port_base=39000))
    with pytest.raises(LabError, match="--cgroups: this host cannot run the cgroup mode: cgroup v1 controller"):
        lab.preflight()
    assert not (tmp_path / "lab").exists()


@pytest.mark.parametrize(("cores", "shape", "bound"), [
    (2, (2, 1), ["0", "1"]),
    (8, (2, 4), ["0-3", "4-7"]),
    (3, (1, 3), ["0-2", "0-2"]),
    (1, (1, 1), ["0", "0"]),
])
def test_cgroup_nodes_take_the_host_cores_on_whole_sockets(cores: int, shape: tuple[int, int], bound: list[str]):
    g = lab_inventory(2, 2, cores=cores)["node_groups"][0]
    assert (g["cpu"]["sockets"], g["cpu"]["cores_per_socket"]) == shape
    assert g["gpus"]["cores"] == bound


def test_the_default_shape_is_unchanged():
    g = lab_inventory()["node_groups"][0]
    assert g["cpu"] == {"sockets": 2, "cores_per_socket": 4, "threads_per_core": 1}
    assert g["gpus"]["cores"] == ["0-3"] * 4 + ["4-7"] * 4
