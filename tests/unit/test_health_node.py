"""The NHC-style node checks (issue 23 item 5): filesystems, EDAC, daemons, CPU/memory against the inventory, D-state
processes, firmware against the fleet (and `slurmkit report firmware`), PCI/NUMA placement. Fake /proc and /sys trees;
each check runs through run_checks as the health hook runs it."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.errors import InventoryError
from slurmkit.health import host
from slurmkit.health.expect import Expectations
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import parse_policy
from slurmkit.health.result import Action, Status
from slurmkit.health.runner import RunSpec, run_checks
from tests.unit.fakeproc import fake_daemon

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"
NODE_CHECKS = ("filesystems", "edac", "mce", "daemons", "hardware", "dstate", "firmware", "topology", "bmc")
H100 = Expectations(node="node1", gpu_count=8, gpu_type="h100", nvlink=True, mig=(False,) * 8,
                    minors=tuple(range(8)), cpus=64, memory_mb=30000)


def stat_line(pid: int, comm: str, state: str = "S") -> str:
    return f"{pid} ({comm}) {state} 1 1 1 0 -1 0 " + " ".join(["0"] * 20) + "\n"


def tree(tmp: Path, *, procs: dict[int, tuple[str, str]] | None = None, mounts: str = "",
         edac: dict[str, tuple[int, int]] | None = None, cpus_online: str = "0-63",
         mem_kb: int = 31 * 1024 * 1024, gpus_numa: dict[str, int] | None = None,
         hcas_numa: dict[str, int] | None = None) -> HostPaths:
    sys_root, proc = tmp / "sys", tmp / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(f"MemTotal: {mem_kb} kB\nMemAvailable: {mem_kb // 2} kB\n")
    (proc / "self" / "mounts").write_text(mounts or "/dev/sda1 / ext4 rw 0 0\nproc /proc proc rw 0 0\n")
    for pid, (comm, state) in (procs if procs is not None else {333: ("munged", "S")}).items():
        fake_daemon(proc, pid, comm, state)
    for mc, (ce, ue) in (edac or {}).items():
        d = sys_root / "devices/system/edac/mc" / mc
        d.mkdir(parents=True, exist_ok=True)
        (d / "ce_count").write_text(f"{ce}\n")
        (d / "ue_count").write_text(f"{ue}\n")
    cpu = sys_root / "devices/system/cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    (cpu / "online").write_text(cpus_online + "\n")
    for bus, node in (gpus_numa or {}).items():
        d = sys_root / "bus/pci/devices" / bus
        d.mkdir(parents=True, exist_ok=True)
        (d / "vendor").write_text("0x10de\n")
        (d / "class").write_text("0x030200\n")
        (d / "numa_node").write_text(f"{node}\n")
    for name, node in (hcas_numa or {}).items():
        d = sys_root / "class/infiniband" / name / "device"
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{node}\n")
    (tmp / "dev").mkdir(exist_ok=True)
    return HostPaths(sys_root=str(sys_root), proc_root=str(proc), kmsg=str(tmp / "kmsg"), dev_root=str(tmp / "dev"))


def run(tmp: Path, paths: HostPaths, *, policy: dict | None = None, fixture: str = "healthy-h100x8.json",
        expect: Expectations = H100, simulated: bool = False, only: tuple[str, ...] = NODE_CHECKS,
        state: Path | None = None):
    """The node checks only (the rest disabled), as the health hook runs them. ``simulated``: keep the fake NVML's
    meaning (a lab node); otherwise the run is told it is a real node."""
    from slurmkit.health.policy import CHECK_DEFAULTS

    raw = {n: False for n in CHECK_DEFAULTS if n not in only and n != "nvml"}
    raw.update(policy or {})
    pol = parse_policy(raw)
    sdir = state or tmp / "state"
    sdir.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(hook="health", node="node1", policy=pol, expect=expect, node_state_dir=str(sdir),
                   fake_nvml=str(fixture if os.path.isabs(fixture) else NVML / fixture), paths=paths,
                   deadline=time.monotonic() + pol.budget_s)
    if not simulated:
        import slurmkit.health.runner as runner

        real = runner._node_facts

        def facts(spec_, gathered, jobs):  # a real node: same facts, only not simulated
            out = real(RunSpec(**{**spec_.__dict__, "fake_nvml": None}), gathered, jobs)
            out["simulated"] = False
            return out
        runner._node_facts = facts
        try:
            out = run_checks(spec)
        finally:
            runner._node_facts = real
    else:
        out = run_checks(spec)
    return {r.name: r for r in out.results}


def test_healthy_node_passes_every_node_check(tmp_path):
    res = run(tmp_path, tree(tmp_path), expect=Expectations(node="node1", cpus=64, memory_mb=30000))
    for name in NODE_CHECKS:
        assert res[name].status in (Status.OK, Status.SKIP), (name, res[name].summary)
    assert res["hardware"].status == Status.OK and res["daemons"].summary == "running: munged"


def test_filesystems_mounted_answering_and_stale(tmp_path, monkeypatch):
    home, scratch = tmp_path / "home", tmp_path / "scratch"
    home.mkdir()
    scratch.mkdir()
    mounts = f"/dev/sda1 / ext4 rw 0 0\nnfs1:/home {home} nfs4 rw 0 0\nmds@tcp:/lustre {scratch} lustre rw 0 0\n"
    p = tree(tmp_path, mounts=mounts)
    res = run(tmp_path, p, only=("filesystems",))
    assert res["filesystems"].status == Status.OK and res["filesystems"].summary.startswith("2 filesystem(s)")
    res = run(tmp_path, p, only=("filesystems",), policy={"filesystems": {"required": ["/gpfs/projects"]}})
    assert res["filesystems"].findings == ["fs /gpfs/projects not mounted"] and res["filesystems"].action == Action.DRAIN

    real = os.statvfs
    dead_server = threading.Event()  # set at the end: the abandoned thread must not outlive the test

    def statvfs(path):
        if str(path) == str(home):
            raise OSError(errno.ESTALE, "Stale file handle")
        if str(path) == str(scratch):
            dead_server.wait(20)  # a dead Lustre server: the thread is abandoned, the check answers in its budget
        return real(path)
    monkeypatch.setattr(os, "statvfs", statvfs)
    try:
        res = run(tmp_path, p, only=("filesystems",), policy={"filesystems": {"timeout_s": 1.0}})
    finally:
        dead_server.set()
    # "hung" (not ok after the wait) is the proof the run did not wait for the dead server
    assert res["filesystems"].findings == [f"fs {home} stale", f"fs {scratch} hung >0.8s"]
    for th in threading.enumerate():
        if th.name == f"statvfs {scratch}":
            th.join(5)  # a hook run in-process later in the session (exit_now) sees no stray thread


def test_machine_checks_in_the_kernel_log(tmp_path):
    """Issue 23 item 5, MCE beyond EDAC: the kernel's machine-check lines (x86 mce/core.c, mm/memory-failure.c), read
    in the XID pass with its cursor: counted once per boot across runs, a poisoned page fails, many corrected events
    warn, a reboot starts over. The xid check itself is off here: the shared gather still runs for mce."""
    from slurmkit.health import xid

    d = json.loads((NVML / "healthy-h100x8.json").read_text())
    d["boot_id"] = "boot-1"
    d["kmsg"] = [[10, "mce: [Hardware Error]: Machine check events logged"],
                 [11, "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"]]
    fx = tmp_path / "nvml.json"
    fx.write_text(json.dumps(d))
    p = tree(tmp_path)
    res = run(tmp_path, p, only=("mce",), fixture=str(fx))
    assert res["mce"].status == Status.OK and res["mce"].summary.endswith("(1 corrected)"), res["mce"].summary
    d["kmsg"] += [[12 + i, "mce: [Hardware Error]: Machine check events logged"] for i in range(3)]
    fx.write_text(json.dumps(d))
    res = run(tmp_path, p, only=("mce",), fixture=str(fx), policy={"mce": {"max_correctable": 2}})
    assert res["mce"].status == Status.WARN and res["mce"].findings == ["mce corrected=4>2"]  # 1 + 3, not 1 + 4
    # soft-offlining (the answer to corrected errors) prints under the same prefix: not an uncorrected error
    d["kmsg"].append([19, "Memory failure: 0x1234: page migration failed 1, type 0x2fffff(buddy)"])
    fx.write_text(json.dumps(d))
    assert run(tmp_path, p, only=("mce",), fixture=str(fx), policy={"mce": {"max_correctable": 2}})["mce"].findings \
        == ["mce corrected=4>2"]
    d["kmsg"].append([20, "Memory failure: 0x12a4f3: recovery action for dirty LRU page: Recovered"])
    fx.write_text(json.dumps(d))
    res = run(tmp_path, p, only=("mce",), fixture=str(fx))
    assert res["mce"].status == Status.FAIL and res["mce"].findings == ["mce uncorrected=1"]
    assert res["mce"].action == Action.DRAIN and "Memory failure: 0x12a4f3" in res["mce"].summary
    d["boot_id"], d["kmsg"] = "boot-2", [[1, "mce: [Hardware Error]: Machine check events logged"]]
    fx.write_text(json.dumps(d))
    res = run(tmp_path, p, only=("mce",), fixture=str(fx))
    assert res["mce"].status == Status.OK, res["mce"].summary  # a reboot (new boot id) starts the count again
    assert xid.XidState.load(str(tmp_path / "state" / "xid.json")).mce == {
        "corrected": 1, "last": "mce: [Hardware Error]: Machine check events logged"}


def test_edac_uncorrectable_drains_correctable_warns(tmp_path):
    res = run(tmp_path, tree(tmp_path, edac={"mc0": (5, 0), "mc1": (0, 2)}), only=("edac",))
    assert res["edac"].status == Status.FAIL and res["edac"].findings == ["mem mc1 ue=2"]
    res = run(tmp_path / "b", tree(tmp_path / "b", edac={"mc0": (5000, 0)}), only=("edac",))
    assert res["edac"].status == Status.WARN and res["edac"].findings == ["mem mc0 ce=5000>1000"]
    res = run(tmp_path / "c", tree(tmp_path / "c"), only=("edac",))
    assert res["edac"].status == Status.SKIP


def test_daemons_required_and_gpu_daemons_on_a_real_node(tmp_path):
    res = run(tmp_path, tree(tmp_path, procs={}), only=("daemons",), simulated=True)
    assert res["daemons"].findings == ["munged down"] and res["daemons"].action == Action.DRAIN
    # a real GPU node needs nvidia-persistenced (comm cut to 15 characters) and, with NVSwitch fabric, the manager
    procs = {333: ("munged", "S"), 400: ("nvidia-persiste", "S")}
    res = run(tmp_path / "b", tree(tmp_path / "b", procs=procs), only=("daemons", "fabric"))
    assert res["daemons"].findings == ["nv-fabricmanager down"], res["daemons"].summary
    procs[401] = ("nv-fabricmanage", "S")
    res = run(tmp_path / "c", tree(tmp_path / "c", procs=procs), only=("daemons", "fabric"),
              policy={"daemons": {"imex": True}})
    assert res["daemons"].findings == ["nvidia-imex down"]


def test_hardware_against_the_inventory(tmp_path):
    res = run(tmp_path, tree(tmp_path, cpus_online="0-31,64-95"), only=("hardware",))
    assert res["hardware"].status == Status.OK and res["hardware"].evidence["cpus"] == 64  # two ranges
    res = run(tmp_path, tree(tmp_path, cpus_online="0-31", mem_kb=20 * 1024 * 1024), only=("hardware",),
              expect=Expectations(node="node1", cpus=64, memory_mb=30000))
    assert res["hardware"].findings == ["cpus 32/64", "memory 20480<30000MB"]
    res = run(tmp_path, tree(tmp_path, cpus_online="0-31"), only=("hardware",), simulated=True)
    assert res["hardware"].status == Status.SKIP and "simulated" in res["hardware"].summary


def test_dstate_processes_warn(tmp_path):
    procs = {333: ("munged", "S"), 500: ("python", "D"), 501: ("ls", "D")}
    res = run(tmp_path, tree(tmp_path, procs=procs), only=("dstate",))
    assert res["dstate"].status == Status.WARN and res["dstate"].findings == ["2 procs in D state"]
    assert "python(500)" in res["dstate"].summary
    res = run(tmp_path, tree(tmp_path, procs=procs), only=("dstate",), policy={"dstate": {"max_count": 2}})
    assert res["dstate"].status == Status.OK


def firmware_fixture(tmp: Path, vbios: list[str], inforom: str = "G520.0200.00.05") -> str:
    d = json.loads((NVML / "healthy-h100x8.json").read_text())
    tmp.mkdir(parents=True, exist_ok=True)
    for dev, v in zip(d["devices"], vbios, strict=False):
        dev["vbios_version"], dev["inforom_image_version"] = v, inforom
    p = tmp / "fw.json"
    p.write_text(json.dumps(d))
    return str(p)


GOOD_VBIOS = "96.00.89.00.01"


def test_firmware_against_the_expected_set(tmp_path):
    fx = firmware_fixture(tmp_path, [GOOD_VBIOS] * 3 + ["96.00.61.00.01"] + [GOOD_VBIOS] * 4)
    res = run(tmp_path, tree(tmp_path), only=("firmware",), fixture=fx)
    assert res["firmware"].status == Status.OK and "no expected set" in res["firmware"].summary
    assert res["firmware"].evidence["gpus"]["3"] == {"vbios": "96.00.61.00.01", "inforom": "G520.0200.00.05"}
    res = run(tmp_path, tree(tmp_path), only=("firmware",), fixture=fx,
              policy={"firmware": {"vbios": [GOOD_VBIOS], "driver": "570.124.06"}})
    assert res["firmware"].status == Status.WARN and res["firmware"].action == Action.WARN
    assert res["firmware"].findings == ["nvidia3@5d:00.0 vbios 96.00.61.00.01"]
    with pytest.raises(InventoryError, match=r"hooks.checks.firmware.vbios: expected a version string"):
        parse_policy({"firmware": {"vbios": []}})


def test_report_firmware_names_the_odd_node_out(tmp_path):
    from slurmkit.cli.main import cli

    sdir = tmp_path / "state"
    for node, odd in (("node1", False), ("node2", True), ("node3", False)):
        fx = firmware_fixture(tmp_path / node, [GOOD_VBIOS] * 7 + (["96.00.61.00.01"] if odd else [GOOD_VBIOS]))
        res = run(tmp_path / node, tree(tmp_path / node), only=("firmware",), fixture=fx)
        rec = {"checks": [res["firmware"].to_json()]}
        (sdir / node).mkdir(parents=True)
        (sdir / node / "last-health.json").write_text(json.dumps(rec))
    (sdir / "node4").mkdir()  # a node without a record
    r = CliRunner().invoke(cli, ["report", "firmware", "--state-dir", str(sdir)])
    assert r.exit_code == 1, r.output
    assert "node2: vbios 96.00.61.00.01 (fleet: 96.00.89.00.01)" in r.output
    assert f"vbios    {GOOD_VBIOS:<24} {3:>5}  yes" in r.output
    r = CliRunner().invoke(cli, ["report", "firmware", "--state-dir", str(sdir), "--json"])
    assert json.loads(r.output)["fields"]["vbios"]["counts"] == {"96.00.61.00.01": 1, GOOD_VBIOS: 3}
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "report", "firmware", "--state-dir",
                        str(tmp_path / "empty")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().endswith("empty: no health records (<node>/last-health.json) to "
                                                           "report on"), p.stderr


def test_topology_numa_against_the_first_run_and_the_policy(tmp_path):
    gpus = {"0000:18:00.0": 0, "0000:9a:00.0": 1}
    state = tmp_path / "state"
    res = run(tmp_path, tree(tmp_path, gpus_numa=gpus, hcas_numa={"mlx5_0": 0}), only=("topology",), state=state)
    assert res["topology"].status == Status.OK and json.loads((state / "topology.json").read_text())["gpus"] == gpus
    moved = tmp_path / "b"
    res = run(moved, tree(moved, gpus_numa={**gpus, "0000:9a:00.0": 0}, hcas_numa={"mlx5_0": 1}), only=("topology",),
              state=state)
    assert res["topology"].findings == ["gpu@9a:00.0 numa 0!=1", "mlx5_0 numa 1!=0"]
    assert res["topology"].status == Status.WARN
    res = run(moved, tree(moved, gpus_numa=gpus), only=("topology",), state=tmp_path / "s2",
              policy={"topology": {"gpu_numa": {"18:00.0": 1}}})
    assert res["topology"].findings == ["gpu@18:00.0 numa 0!=1"]


def test_node_checks_do_not_run_in_the_prolog_by_default():
    pol = parse_policy({})
    assert not ({c.name for c in pol.enabled_for("prolog")} & set(NODE_CHECKS))
    assert set(NODE_CHECKS) <= {c.name for c in pol.enabled_for("health")}


def test_process_scan_reads_real_proc():
    scan = host.scan_processes(HostPaths())
    assert scan["count"] > 0 and any(n.startswith("python") for n in scan["names"]), scan["names"][:20]


def test_bmc_verdict_written_by_slurmkit_bmc_drains_on_a_failed_fan_only(tmp_path):
    """`slurmkit bmc --state-dir` on the management host writes STATE/<node>/bmc.json; the node's health check reads
    it: a failed fan FAILs (drain), a lost PSU redundancy or a hot inlet WARNs, a stale verdict or a BMC that did not
    answer WARNs, no verdict SKIPs. Readings: ipmi_sim's recorded sdr (tests/data/bmc)."""
    from slurmkit.monitor import bmc

    data = Path(__file__).resolve().parents[1] / "data" / "bmc"
    shared, p = tmp_path / "shared", tree(tmp_path)
    node = shared / "node1"

    def verdict(rep, **kw):
        bmc.write_verdict(str(shared), rep, **kw)
        return run(tmp_path, p, only=("bmc",), state=node)["bmc"]

    node.mkdir(parents=True)
    r = run(tmp_path, p, only=("bmc",), state=node)["bmc"]
    assert r.status == Status.SKIP and "no BMC verdict" in r.summary
    healthy = bmc.parse_ipmitool_sdr((data / "ipmitool_sdr_elist.txt").read_text())
    faults = bmc.parse_ipmitool_sdr((data / "ipmitool_sdr_elist_faults.txt").read_text())
    assert verdict(bmc.BmcReport("node1", "ipmi", healthy)).status == Status.OK
    r = verdict(bmc.BmcReport("node1", "ipmi", faults))
    assert (r.status, r.action) == (Status.FAIL, Action.DRAIN)
    # the findings are the drain reason: the failed fan alone; the warn-only findings stay in the summary
    assert r.findings == ["bmc fan_failed"]
    assert r.summary.startswith("BMC: fan_failed: Fan 1: stopped (critical) (also, not draining: psu_redundancy_lost: ")
    no_fan_fault = [x for x in faults if x.kind != "fan"]
    r = verdict(bmc.BmcReport("node1", "ipmi", no_fan_fault))
    assert r.status == Status.WARN and r.findings == ["bmc psu_redundancy_lost", "bmc inlet_over_limit"]
    r = verdict(bmc.BmcReport("node1", "ipmi", faults), now=time.time() - 3600)
    assert r.status == Status.WARN and r.findings == ["bmc verdict stale"]
    r = verdict(bmc.BmcReport("node1", "redfish", error="redfish https://node1-bmc: refused"))
    assert r.status == Status.WARN and r.summary == "BMC did not answer: redfish https://node1-bmc: refused"
    (node / "bmc.json").write_text("{half")
    assert run(tmp_path, p, only=("bmc",), state=node)["bmc"].findings == ["bmc verdict unreadable"]
    # malformed verdicts are unreadable (a WARN), never "no fault" or a drain that stays fresh for ever
    for doc in ({"time": time.time(), "findings": "oops"}, {"time": float("nan"), "findings": []},
                {"time": time.time(), "node": "node2", "findings": [{"check": "fan_failed", "state": "fail"}]}):
        (node / "bmc.json").write_text(json.dumps(doc))
        r = run(tmp_path, p, only=("bmc",), state=node)["bmc"]
        assert r.status == Status.WARN and r.findings == ["bmc verdict unreadable"], (doc, r.summary)
    # max_age_s is a setting of the check (was an AssertionError "no validator" wherever the inventory loaded)
    r = run(tmp_path, p, only=("bmc",), state=node, policy={"bmc": {"max_age_s": 600}})["bmc"]
    assert r.findings == ["bmc verdict unreadable"]
    with pytest.raises(InventoryError, match="hooks.checks.bmc.max_age_s"):
        parse_policy({"bmc": {"max_age_s": 0}})


def test_every_check_setting_has_a_validator():
    """CHECK_DEFAULTS and policy._setting must not drift apart: a documented setting that reached the AssertionError
    crashed every hook run (which fails closed: a drain) and every command that loads the inventory."""
    from slurmkit.health.policy import CHECK_DEFAULTS

    for name, d in CHECK_DEFAULTS.items():
        for key, value in d.settings.items():
            if value is not None:
                parse_policy({name: {key: value}})  # the default value itself must pass its validator



def test_daemons_count_only_their_users_and_root_controlled_files(tmp_path):
    """Issue 32 item 6: a process of the daemon's name counts only as one of its users (DAEMON_USERS, plus the
    policy's ``users``) running a root-controlled file of that name."""
    paths = tree(tmp_path, procs={})
    fake_daemon(Path(paths.proc_root), 333, "munged", uid=4242)
    res = run(tmp_path, paths, only=("daemons",), simulated=True)
    assert res["daemons"].findings == ["munged down"], res["daemons"].summary
    assert res["daemons"].evidence["impostors"]["munged"] == [{"pid": 333, "uid": 4242, "why": "not one of its users"}]
    res = run(tmp_path / "b", paths, only=("daemons",), simulated=True, policy={"daemons": {"users": {"munged": [4242]}}})
    assert res["daemons"].status == Status.OK, res["daemons"].summary
    # the same process, its file now writable by others: a file anyone could have replaced proves nothing
    (Path(paths.proc_root).parent / "bin" / "munged").chmod(0o777)
    res = run(tmp_path / "c", paths, only=("daemons",), simulated=True, policy={"daemons": {"users": {"munged": [4242]}}})
    assert res["daemons"].findings == ["munged down"], res["daemons"].summary
    assert "writable by group or others" in res["daemons"].evidence["impostors"]["munged"][0]["why"]
    with pytest.raises(InventoryError, match="daemon name -> list of users"):
        parse_policy({"daemons": {"users": {"munged": "munge"}}})


@pytest.mark.parametrize("skew_s", [-360, 360, -86400])
def test_a_failed_fan_drains_whatever_the_clocks_say_and_goes_stale_on_the_nodes_own_time(tmp_path, skew_s):
    """Issue 32 item 6: the management host stamps the verdict with its clock, the node judges its age with its own.
    Before: a stamp more than 300 s ahead of the node's clock (the node 6 minutes behind) made the verdict
    unreadable: a failed fan WARNed instead of draining. Now the age is the node's own time since it first saw that
    verdict (at least the stamped age less 10 minutes of allowed skew): a failed fan drains with the node's clock 6
    minutes behind or ahead, and a verdict stamped a day ahead (a writer's clock far off) still goes stale once the
    node has seen it unchanged for max_age_s."""
    fail = [{"check": "fan_failed", "state": "fail", "summary": "Fan 1: stopped (critical)"}]
    shared, p = tmp_path / "shared", tree(tmp_path)
    node = shared / "node1"
    node.mkdir(parents=True)
    (node / "bmc.json").write_text(json.dumps({"node": "node1", "time": time.time() - skew_s, "source": "ipmi",
                                               "error": "", "findings": fail}))
    r = run(tmp_path, p, only=("bmc",), state=node)["bmc"]
    assert (r.status, r.findings) == (Status.FAIL, ["bmc fan_failed"]), r.summary
    assert r.evidence["seen_s"] < 5 and r.evidence["age_s"] < 5, r.evidence
    seen = json.loads((node / "bmc-seen.json").read_text())
    # the same verdict, seen unchanged for longer than max_age_s (1800 s) of this node's time: stale, whatever its stamp
    (node / "bmc-seen.json").write_text(json.dumps({**seen, "first_seen": seen["first_seen"] - 2000}))
    r = run(tmp_path, p, only=("bmc",), state=node)["bmc"]
    assert (r.status, r.findings) == (Status.WARN, ["bmc verdict stale"]), r.summary
    # a new verdict (the writer runs again) is fresh again
    (node / "bmc.json").write_text(json.dumps({"node": "node1", "time": time.time() - skew_s + 60, "source": "ipmi",
                                               "error": "", "findings": fail}))
    assert run(tmp_path, p, only=("bmc",), state=node)["bmc"].status == Status.FAIL


def test_an_ordinary_users_fuse_mount_never_fails_the_filesystems_check(tmp_path, monkeypatch):
    """fusermount3 lets any user mount FUSE with a subtype of their choosing (fuse.sshfs is one of NETWORK_FS); the
    kernel records the mounting user as user_id=. A user's mount whose daemon is gone or never answers is theirs, not
    the node's: it is not probed and drains nothing, while root's own FUSE mounts (user_id=0) still count."""
    mine, roots = tmp_path / "games-m", tmp_path / "gluster"
    mine.mkdir()
    roots.mkdir()
    mounts = (f"/dev/sda1 / ext4 rw 0 0\n"
              f"gw:/data {mine} fuse.sshfs rw,nosuid,nodev,relatime,user_id=5,group_id=60,allow_other 0 0\n"
              f"gl1:/vol {roots} fuse.glusterfs rw,relatime,user_id=0,group_id=0,allow_other 0 0\n")
    p = tree(tmp_path, mounts=mounts)
    real = os.statvfs

    def statvfs(path):
        if str(path) in (str(mine), str(roots)):
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return real(path)
    monkeypatch.setattr(os, "statvfs", statvfs)
    res = run(tmp_path, p, only=("filesystems",))
    assert res["filesystems"].findings == [f"fs {roots} Transport endpoint is not connected"]
    assert str(mine) not in res["filesystems"].evidence["mounts"]
    assert res["filesystems"].evidence["users_fuse_mounts"] == 1
