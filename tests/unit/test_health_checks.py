"""Health checks against recorded device states served by the fake NVML: verdicts, scoping, XID cursor, budget."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slurmkit.errors import InventoryError
from slurmkit.health import xid
from slurmkit.health.checks import CHECKS
from slurmkit.health.expect import Expectations, NicExpect, expectations_from_cluster
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import CHECK_DEFAULTS, parse_policy
from slurmkit.health.result import Action, Status, drain_reason, worst_action
from slurmkit.health.runner import RunSpec, run_checks
from tests.unit.fakeproc import fake_daemon

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"
H100 = Expectations(node="node1", gpu_count=8, gpu_type="h100", nvlink=True, mig=(False,) * 8,
                    minors=tuple(range(8)))


def munged(proc: Path, pid: int = 333) -> None:
    """Slurm's auth daemon, which the daemons check requires on every node."""
    fake_daemon(proc, pid, "munged")


def host_tree(tmp: Path, *, ib: dict[str, tuple[str, str, str]] | None = None, governor: str | None = None) -> HostPaths:
    """A fake /sys and /proc: IB ports as {dev: (state, phys_state, rate)}."""
    sys_root, proc = tmp / "sys", tmp / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text("MemTotal:       32000000 kB\nMemFree: 1 kB\nMemAvailable:   30000000 kB\n")
    munged(proc)
    for dev, (st, phys, rate) in (ib or {}).items():
        p = sys_root / "class" / "infiniband" / dev / "ports" / "1"
        p.mkdir(parents=True, exist_ok=True)
        (p / "state").write_text(st + "\n")
        (p / "phys_state").write_text(phys + "\n")
        (p / "rate").write_text(rate + "\n")
        (p / "link_layer").write_text("InfiniBand\n")
    if governor:
        for c in range(4):
            g = sys_root / "devices" / "system" / "cpu" / f"cpu{c}" / "cpufreq"
            g.mkdir(parents=True, exist_ok=True)
            (g / "scaling_governor").write_text(governor + "\n")
    (tmp / "dev").mkdir(exist_ok=True)
    return HostPaths(sys_root=str(sys_root), proc_root=str(proc), kmsg=str(tmp / "kmsg"), dev_root=str(tmp / "dev"))


GOOD_IB = {"mlx5_0": ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")}


def run(tmp_path: Path, fixture: str | Path, *, hook: str = "health", expect: Expectations = H100,
        policy: dict | None = None, gpus: list[int] | None = None, paths: HostPaths | None = None,
        budget_from_now: float | None = None, state: bool = True):
    pol = parse_policy(policy or {})
    state_dir = tmp_path / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(
        hook=hook, node="node1", policy=pol, expect=expect, node_state_dir=str(state_dir) if state else None,
        fake_nvml=str(NVML / fixture) if not os.path.isabs(str(fixture)) else str(fixture),
        paths=paths or host_tree(tmp_path / "host", ib=GOOD_IB, governor="performance"),
        job_gres_indices=gpus, deadline=time.monotonic() + (budget_from_now or pol.budget_s),
    )
    out = run_checks(spec)
    return {r.name: r for r in out.results}, out


def edited(tmp: Path, name: str, edit) -> Path:
    d = json.loads((NVML / name).read_text())
    edit(d)
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / name
    p.write_text(json.dumps(d))
    return p


def bad(results: dict) -> dict:
    return {n: r for n, r in results.items() if r.status in (Status.FAIL, Status.WARN)}


# --- registry and policy ------------------------------------------------------------------------------------

def test_registry_and_policy_defaults_agree():
    assert list(CHECKS) == list(CHECK_DEFAULTS)


def test_policy_defaults_and_overrides():
    p = parse_policy({"temperature": {"max_c": 95, "action": "drain+reboot"}, "ib": False, "budget_s": 3,
                      "xid": {"codes": [79], "hooks": ["health"]}})
    assert p.budget_s == 3
    assert p.check("temperature").get("max_c") == 95 and p.check("temperature").action == Action.DRAIN_REBOOT
    assert not p.check("ib").enabled
    assert [c.name for c in p.enabled_for("prolog")].count("xid") == 0
    assert p.check("xid").get("codes") == (79,)
    assert p.check("clocks").action == Action.WARN  # drift warns, hardware drains
    assert p.check("ecc").action == Action.DRAIN


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"temperature": {"max_c": "hot"}}, "hooks.checks.temperature.max_c", "expected a number"),
        ({"temperature": {"max_cc": 90}}, "hooks.checks.temperature.max_cc", "did you mean 'max_c'"),
        ({"temprature": {}}, "hooks.checks.temprature", "did you mean 'temperature'"),
        ({"ecc": {"action": "reboot"}}, "hooks.checks.ecc.action", "warn, drain, drain+reboot"),
        ({"ecc": {"enabled": "yes"}}, "hooks.checks.ecc.enabled", "true or false"),
        ({"ecc": {"timeout_s": 9}}, "hooks.checks.ecc.timeout_s", "must not exceed budget_s"),
        ({"budget_s": 0}, "hooks.checks.budget_s", "must be > 0"),
        ({"resume_after_passes": 0}, "hooks.checks.resume_after_passes", ">= 1"),
        ({"clocks": {"reasons": ["hw_slowdwn"]}}, "hooks.checks.clocks.reasons[0]", "did you mean 'hw_slowdown'"),
        ({"xid": {"codes": [79, -1]}}, "hooks.checks.xid.codes[1]", ">= 0"),
        ({"disk_space": {"paths": ["tmp"]}}, "hooks.checks.disk_space.paths", "absolute paths"),
        ({"memory": {"min_available_pct": 150}}, "hooks.checks.memory.min_available_pct", "<= 100"),
        ({"temperature": {"warn_c": 95, "max_c": 90}}, "hooks.checks.temperature.warn_c", "must not exceed max_c"),
        ({"ib": {"hooks": ["prolog", "cron"]}}, "hooks.checks.ib.hooks", "prolog, epilog, health, check"),
        ({"scontrol_timeout_s": 5}, "hooks.checks.scontrol_timeout_s", "below budget_s"),
        ({"gpu_count": 8}, "hooks.checks.gpu_count", "mapping or true/false"),
    ],
)
def test_policy_errors_name_the_key_path(raw, path, words):
    with pytest.raises(InventoryError) as ei:
        parse_policy(raw, source="inv.yaml")
    assert ei.value.path == path
    assert words in str(ei.value)
    assert str(ei.value).startswith("inv.yaml: ")


def test_expectations_from_the_lab_inventory():
    import yaml

    from slurmkit.model import load_cluster_text

    inv = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "lab.yaml").read_text())
    inv["node_groups"][0]["nics"] = [{"name": "mlx5_0", "kind": "ib", "rate_gbps": 400},
                                     {"name": "eno1", "kind": "eth", "rate_gbps": 25}]  # only IB/RoCE are checked
    cluster = load_cluster_text(yaml.safe_dump(inv))
    e = expectations_from_cluster(cluster, "node3")
    assert (e.gpu_count, e.gpu_type, e.nvlink, e.minors) == (8, "h100", True, tuple(range(8)))
    assert e.nics == (NicExpect("mlx5_0", "ib", 400),)
    assert e.job_minors([1, 3]) == frozenset({1, 3})
    assert Expectations.from_json(json.loads(json.dumps(e.to_json()))) == e
    assert expectations_from_cluster(cluster, "ghost").gpu_count is None


# --- recorded device states ---------------------------------------------------------------------------------

def test_healthy_h100_node_passes_everything(tmp_path):
    res, out = run(tmp_path, "healthy-h100x8.json")
    assert bad(res) == {}
    assert res["nvml"].status == Status.OK and "570.124.06" in res["nvml"].summary
    assert res["gpu_count"].summary == "8 GPU(s) of 8 expected"
    assert res["retired_pages"].status == Status.SKIP  # Hopper: NOT_SUPPORTED is SKIP, never FAIL
    assert res["gpu_procs"].status == Status.OK  # health: no process on any GPU
    assert worst_action(list(res.values())) == Action.NONE
    assert out.nvml_devices["devices"][5]["pci_bus_id"] == "00000000:AB:00.0"


H200 = Expectations(node="node1", gpu_count=1, gpu_type="h200", nvlink=False, mig=(False,), minors=(0,))


def test_real_h200_recording_replays_healthy_and_a_fault_in_it_drains(tmp_path):
    """healthy-h200x1.json is what real NVML answered on a lent H200 (bench/gpu_device_check.sh, driver 580.159.04):
    it must replay healthy, and the same recording with one SRAM uncorrectable error must drain."""
    res, _ = run(tmp_path / "ok", "healthy-h200x1.json", expect=H200)
    assert bad(res) == {}
    assert res["gpu_count"].summary == "1 GPU(s) of 1 expected"
    assert res["fabric"].status == Status.SKIP and res["retired_pages"].status == Status.SKIP  # NOT_SUPPORTED there
    assert res["ecc"].status == res["remapped_rows"].status == res["inforom"].status == Status.OK

    def sram_fault(d: dict) -> None:
        d["devices"][0]["ecc_sram"]["unc_volatile"] = 1

    res, _ = run(tmp_path / "bad", edited(tmp_path / "f", "healthy-h200x1.json", sram_fault), expect=H200)
    assert res["ecc"].status == Status.FAIL and worst_action(list(res.values())) == Action.DRAIN


def test_xid79_gpu_lost_drains_with_a_reason_that_names_the_gpu(tmp_path):
    res, _ = run(tmp_path, "xid79-gpu5.json")
    # a lost GPU no longer tells NVML its PCI address, so the XID is named by the kernel's bus id
    assert res["xid"].status == Status.FAIL and res["xid"].findings == ["pci0000:ab:00 xid79"]
    assert res["gpu_count"].status == Status.FAIL
    assert res["gpu_count"].findings == ["gpu_count 7/8", "gpu5 lost"]
    results = list(res.values())
    assert worst_action(results) == Action.DRAIN
    reason = drain_reason(results)
    assert reason == "slurmkit: gpu_count 7/8; gpu5 lost; pci0000:ab:00 xid79"
    assert len(reason) <= 120


def test_row_remap_pending_warns_failure_and_bank_limit_drain(tmp_path):
    """Issue 11 item 4: NVIDIA (A100 memory error management, row remapping): pending lets unaffected and new work
    run until a reset; only the failure flag (or AzNHC's 512 uncorrectable remaps) takes the GPU out. XID 63 (the
    row-remap recording event) follows the same rule: a WARN, not sticky."""
    res, _ = run(tmp_path, "remap-pending-gpu2.json")
    assert set(bad(res)) == {"remapped_rows", "xid"}
    assert res["remapped_rows"].status == Status.WARN and res["remapped_rows"].action == Action.WARN
    assert res["remapped_rows"].findings == ["nvidia2@3a:00.0 remap-pending (reset when idle)"]
    assert res["remapped_rows"].evidence["gpus"]["2"]["pending"] == 1
    assert "reset the GPU when it is idle" in res["remapped_rows"].evidence["gpus"]["2"]["todo"]
    assert res["xid"].status == Status.WARN and res["xid"].findings == ["nvidia2@3a:00.0 xid63"]
    assert res["xid"].evidence["sticky"] == []
    assert worst_action(list(res.values())) == Action.WARN  # the node keeps taking jobs

    def remap(pending: int, failure: int, unc: int):
        def edit(d):
            d["devices"][2]["remapped_rows"] = [0, unc, pending, failure]
            d["kmsg"] = []
        return edit
    for (pending, failure, unc), finding in (((0, 1, 3), "nvidia2@3a:00.0 remap-failed"),
                                             ((0, 0, 513), "nvidia2@3a:00.0 remaps-unc=513>512")):
        fx = edited(tmp_path / f"f{failure}{unc}", "remap-pending-gpu2.json", remap(pending, failure, unc))
        res, _ = run(tmp_path / f"r{failure}{unc}", fx)
        assert res["remapped_rows"].status == Status.FAIL and res["remapped_rows"].findings == [finding]


def test_uncorrectable_ecc(tmp_path):
    res, _ = run(tmp_path, "ecc-uncorrected-gpu1.json")
    assert res["ecc"].status == Status.FAIL and res["ecc"].findings == ["nvidia1@2a:00.0 ecc-unc=2"]
    assert res["xid"].findings == ["nvidia1@2a:00.0 xid48"] and res["xid"].status == Status.FAIL
    # a threshold raises the bar; xid48 is still a double-bit error
    res, _ = run(tmp_path / "b", "ecc-uncorrected-gpu1.json", policy={"ecc": {"max_volatile_uncorrected": 2}})
    assert res["ecc"].status == Status.OK


def test_gpu_fallen_off_the_bus(tmp_path):
    res, _ = run(tmp_path, "off-bus-gpu3.json")
    assert res["gpu_count"].status == Status.FAIL and res["gpu_count"].findings == ["gpu_count 7/8"]
    # NVML no longer knows PCI 0000:5d:00, so the XID is reported by bus id rather than silently dropped
    assert res["xid"].findings == ["pci0000:5d:00 xid79"]


@pytest.mark.parametrize("fixture,stalled_check", [("nvml-hang.json", "ecc"), ("nvml-hang-init.json", "nvml")])
def test_nvml_hang_fails_closed_within_the_budget(tmp_path, fixture, stalled_check):
    # a short budget keeps the test quick; what matters is that the run returns and says why
    policy = {"budget_s": 1.5, "nvml": {"timeout_s": 0.8}, "ecc": {"timeout_s": 0.5}}
    res, out = run(tmp_path, fixture, policy=policy, budget_from_now=1.2)
    assert out.gathered is not None and out.gathered.stalled in ("ecc", "init")
    r = res[stalled_check]
    assert r.status == Status.FAIL and r.action == Action.DRAIN
    assert "hung" in r.summary
    assert worst_action(list(res.values())) == Action.DRAIN
    if stalled_check == "ecc":
        assert res["gpu_count"].status == Status.OK  # what NVML answered before the hang still counts
        assert res["temperature"].status == Status.SKIP and "stalled in ecc" in res["temperature"].summary
    # the host checks still ran
    assert res["memory"].status == Status.OK


def test_nvml_missing_is_fail_when_gpus_are_expected_and_skip_when_not(tmp_path):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    state["init_error"] = "DriverNotLoaded"
    f = tmp_path / "nodriver.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res["nvml"].status == Status.FAIL and res["nvml"].findings == ["nvml down"]
    assert res["ecc"].status == Status.SKIP
    res, _ = run(tmp_path / "cpu", f, expect=Expectations(node="node1", gpu_count=0))
    assert res["nvml"].status == Status.SKIP
    # no inventory at all: /dev/nvidia0 existing is enough to expect GPUs
    paths = host_tree(tmp_path / "h2")
    (Path(paths.dev_root) / "nvidia0").write_text("")
    res, _ = run(tmp_path / "noinv", f, expect=Expectations(node="node1"), paths=paths)
    assert res["nvml"].status == Status.FAIL


def test_prolog_scopes_gpu_checks_to_the_jobs_gpus(tmp_path):
    res, _ = run(tmp_path, "ecc-uncorrected-gpu1.json", hook="prolog", gpus=[0, 1])
    assert res["ecc"].status == Status.FAIL
    res, _ = run(tmp_path / "b", "ecc-uncorrected-gpu1.json", hook="prolog", gpus=[2, 3])
    assert res["ecc"].status == Status.OK and set(res["ecc"].evidence["gpus"]) == {"2", "3"}
    assert res["xid"].status == Status.OK  # the XID 48 is on gpu1, not this job's GPU


def test_prolog_scope_follows_the_gres_file_order(tmp_path):
    # gres.conf File=/dev/nvidia[4-7],/dev/nvidia[0-3]: gres index 0 is minor 4
    exp = Expectations(node="node1", gpu_count=8, gpu_type="h100", nvlink=True, minors=(4, 5, 6, 7, 0, 1, 2, 3))
    res, _ = run(tmp_path, "ecc-uncorrected-gpu1.json", hook="prolog", gpus=[5], expect=exp)
    assert res["ecc"].status == Status.FAIL and set(res["ecc"].evidence["gpus"]) == {"1"}


def test_leftover_gpu_process_at_prolog(tmp_path):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    state["devices"][6]["compute_processes"] = [{"pid": 4242, "used_memory": 1 << 30}]
    f = tmp_path / "busy.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f, hook="prolog", gpus=[6, 7])
    assert res["gpu_procs"].status == Status.FAIL and res["gpu_procs"].findings == ["nvidia6@ba:00.0 busy pid 4242"]
    res, _ = run(tmp_path / "b", f, hook="prolog", gpus=[0])
    assert res["gpu_procs"].status == Status.OK


@pytest.mark.parametrize(
    ("edit", "check", "finding"),
    [
        (lambda d: d.update(temperature_c=93), "temperature", "nvidia0@18:00.0 temp 93C>=90C"),
        (lambda d: d.update(nvlink_state=[1] * 16 + [0, 0]), "nvlink", "nvidia0@18:00.0 nvlink 2/18 down"),
        (lambda d: d.update(pcie_width=[8, 16]), "pcie", "nvidia0@18:00.0 pcie x8/x16"),
        (lambda d: d.update(mig_mode=[1, 1]), "mig", "nvidia0@18:00.0 mig on"),
        (lambda d: d.update(mig_mode=[0, 1]), "mig", "nvidia0@18:00.0 mig change pending"),
        (lambda d: d.update(recovery_action=2), "recovery_action", "nvidia0@18:00.0 recovery=node_reboot"),
        (lambda d: d.update(remapped_rows=[3, 0, 0, 1]), "remapped_rows", "nvidia0@18:00.0 remap-failed"),
        (lambda d: d.update(ecc_mode=[0, 0]), "ecc", "nvidia0@18:00.0 ecc off"),
        (lambda d: d.update(retired_pages_pending=1), "retired_pages", "nvidia0@18:00.0 retire-pending"),
        (lambda d: d.update(ecc_volatile_uncorrected={"error": "GpuIsLost"}), "ecc", "nvidia0@18:00.0 gpuislost"),
    ],
)
def test_each_gpu_fault_drains(tmp_path, edit, check, finding):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    edit(state["devices"][0])
    f = tmp_path / "fault.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res[check].status == Status.FAIL, res[check]
    assert finding in res[check].findings
    assert res[check].action >= Action.DRAIN


@pytest.mark.parametrize(
    ("edit", "check"),
    [
        (lambda d: d.update(temperature_c=85), "temperature"),  # between warn_c and max_c
        (lambda d: d.update(persistence_mode=0), "persistence"),  # FAIL under action=warn -> WARN
        (lambda d: d.update(clocks_event_reasons=0x8 | 0x1), "clocks"),
        (lambda d: d.update(temperature_c={"error": "NoPermission"}), "temperature"),  # unknown != broken
    ],
)
def test_warnings_never_drain(tmp_path, edit, check):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    edit(state["devices"][0])
    f = tmp_path / "warn.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res[check].status == Status.WARN and res[check].action == Action.WARN
    assert worst_action(list(res.values())) == Action.WARN


def test_not_supported_everywhere_is_skip_not_fail(tmp_path):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    for d in state["devices"]:
        for k in ("ecc_mode", "ecc_volatile_uncorrected", "remapped_rows", "recovery_action", "nvlink_state",
                  "mig_mode"):
            d[k] = {"error": "NotSupported"}
    f = tmp_path / "consumer.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f, expect=Expectations(node="node1", gpu_count=8))
    for name in ("ecc", "remapped_rows", "recovery_action", "nvlink", "mig"):
        assert res[name].status == Status.SKIP, name
    # ...but NVLink that the inventory promises and the GPU lacks is a failure
    res, _ = run(tmp_path / "b", f)
    assert res["nvlink"].status == Status.FAIL


def test_driver_baseline(tmp_path):
    res, _ = run(tmp_path, "healthy-h100x8.json", policy={"driver": {"version": "550.54.15"}})
    assert res["driver"].status == Status.WARN and res["driver"].findings == ["driver 570.124.06!=550.54.15"]
    res, _ = run(tmp_path / "b", "healthy-h100x8.json",
                 policy={"driver": {"version": "550.54.15", "action": "drain"}})
    assert res["driver"].status == Status.FAIL and res["driver"].action == Action.DRAIN
    res, _ = run(tmp_path / "c", "healthy-h100x8.json", policy={"driver": {"version": "570.124.06"}})
    assert res["driver"].status == Status.OK


# --- XID cursor ---------------------------------------------------------------------------------------------

def test_xid_cursor_reports_once_and_critical_ones_stick_until_reboot(tmp_path):
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    state["kmsg"].append([2000, "NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python, Graphics Exception"])
    f = tmp_path / "n.json"
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res["xid"].status == Status.WARN and res["xid"].findings == ["nvidia0@18:00.0 xid13"]
    res, _ = run(tmp_path, f)  # same log, cursor moved: an old XID never counts twice
    assert res["xid"].status == Status.OK
    state["kmsg"].append([2100, "NVRM: Xid (PCI:0000:9a:00): 94, pid=1, name=python, Contained ECC error"])
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res["xid"].status == Status.FAIL and res["xid"].findings == ["nvidia4@9a:00.0 xid94"]
    res, _ = run(tmp_path, f)  # critical: still failing on the next run, so the health check cannot resume it
    assert res["xid"].status == Status.FAIL
    state["boot_id"] = "another-boot"
    state["kmsg"] = [[5, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"]]
    f.write_text(json.dumps(state))
    res, _ = run(tmp_path, f)
    assert res["xid"].status == Status.OK


def test_read_only_runs_do_not_move_the_cursor(tmp_path):
    res, _ = run(tmp_path, "remap-pending-gpu2.json", state=False)
    assert res["xid"].findings == ["nvidia2@3a:00.0 xid63"]
    res, _ = run(tmp_path, "remap-pending-gpu2.json", state=False)
    assert res["xid"].findings == ["nvidia2@3a:00.0 xid63"]


def test_kmsg_reader_and_parser(tmp_path):
    assert xid.norm_bus_id("00000000:AB:00.0") == xid.norm_bus_id("0000:ab:00") == "0000:ab:00"
    e = xid.parse_record(7, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off")
    assert e is not None and (e.xid, e.bus_id) == (79, "0000:18:00")
    assert xid.parse_record(8, "usb 1-1: new high-speed USB device") is None
    k = tmp_path / "kmsg"  # a regular file stands in for /dev/kmsg: one record per line
    k.write_text("6,10,100,-;hello\n4,11,200,-;NVRM: Xid (PCI:0000:18:00): 31, pid=2, name=x, MMU Fault\n")
    recs = xid.read_kmsg(str(k), after=10)
    # a regular file returns everything in one read; the reader keeps the first record of each read
    assert all(seq > 10 for seq, _ in recs)


# --- host checks --------------------------------------------------------------------------------------------

def test_ib_ports_against_the_inventory(tmp_path):
    exp = Expectations(node="node1", gpu_count=8, nvlink=True,
                       nics=(NicExpect("mlx5_0", "ib", 400), NicExpect("mlx5_1", "ib", 400)))
    ib = {"mlx5_0": ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"), "mlx5_1": ("1: DOWN", "3: Disabled", "")}
    res, _ = run(tmp_path, "healthy-h100x8.json", expect=exp, paths=host_tree(tmp_path / "h", ib=ib))
    assert res["ib"].status == Status.FAIL
    assert res["ib"].findings == ["ib mlx5_0/1 rate 200<400", "ib mlx5_1/1 down"]
    res, _ = run(tmp_path / "b", "healthy-h100x8.json", expect=exp, paths=host_tree(tmp_path / "h2", ib={}))
    assert res["ib"].findings == ["ib mlx5_0 missing", "ib mlx5_1 missing"]
    # no inventory: a down port is only a warning, and no HCAs at all is a skip
    res, _ = run(tmp_path / "c", "healthy-h100x8.json", expect=Expectations(node="n"),
                 paths=host_tree(tmp_path / "h3", ib=ib))
    assert res["ib"].status == Status.WARN
    res, _ = run(tmp_path / "d", "healthy-h100x8.json", expect=Expectations(node="n"),
                 paths=host_tree(tmp_path / "h4"))
    assert res["ib"].status == Status.SKIP


def test_cpu_governor_memory_disk(tmp_path):
    paths = host_tree(tmp_path / "h", ib=GOOD_IB, governor="powersave")
    Path(paths.proc_root, "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 10 kB\n")
    res, _ = run(tmp_path, "healthy-h100x8.json", paths=paths,
                 policy={"disk_space": {"paths": [str(tmp_path), "/nonexistent-slurmkit"], "min_free_pct": 0}})
    assert res["cpu_governor"].status == Status.WARN and res["cpu_governor"].findings == ["cpu governor powersave"]
    assert res["memory"].status == Status.WARN  # memory: default action warn (shared nodes use memory)
    assert res["disk_space"].status == Status.FAIL and res["disk_space"].findings == [
        "/nonexistent-slurmkit no such file or directory"]


def test_slurmd_oom_protection(tmp_path):
    paths = host_tree(tmp_path / "h", ib=GOOD_IB)
    for pid, argv, adj in ((300, ["/usr/sbin/slurmd", "-N", "node1"], "0"), (301, ["slurmd", "-N", "node2"], "-1000")):
        d = Path(paths.proc_root, str(pid))
        d.mkdir()
        (d / "comm").write_text("slurmd\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "oom_score_adj").write_text(adj + "\n")
    res, _ = run(tmp_path, "healthy-h100x8.json", paths=paths)
    assert res["slurmd_oom"].status == Status.WARN and res["slurmd_oom"].evidence["pid"] == 300
    assert res["slurmd_oom"].findings == ["slurmd oom_score_adj 0"]


def test_a_disabled_check_is_not_run(tmp_path):
    res, out = run(tmp_path, "xid79-gpu5.json", policy={"xid": False, "gpu_count": {"enabled": False}})
    assert "xid" not in res and "gpu_count" not in res
    assert set(out.gathered.data) >= {"init", "ecc"}


# --- issue 11 items 10-13: the checks added in the second pass ------------------------------------------------

def one_gpu(key: str, value, gpu: int = 3, kmsg=None):
    def edit(d):
        d["devices"][gpu][key] = value
        if kmsg is not None:
            d["kmsg"] = kmsg
    return edit


@pytest.mark.parametrize("key,value,finding", [
    ("ecc_sram", {"unc_volatile": 0, "unc_aggregate": 1, "cor_volatile": 0, "cor_aggregate": 0}, "nvidia3@5d:00.0 sram-unc=1"),
    ("ecc_sram", {"unc_volatile": 0, "unc_aggregate": 0, "cor_volatile": 10001, "cor_aggregate": 0},
     "nvidia3@5d:00.0 sram-cor=10001>10000"),
    ("ecc_dram", {"unc_volatile": 0, "unc_aggregate": 20000001, "cor_volatile": 0, "cor_aggregate": 0},
     "nvidia3@5d:00.0 dram-errors=20000001>20000000"),
])
def test_ecc_sram_and_dram_judged_apart(tmp_path, key, value, finding):
    res, _ = run(tmp_path, edited(tmp_path, "healthy-h100x8.json", one_gpu(key, value)))
    assert res["ecc"].status == Status.FAIL and res["ecc"].findings == [finding]
    assert res["ecc"].evidence["gpus"]["3"][key[4:]] == value


def test_ecc_thresholds_are_policy(tmp_path):
    fx = edited(tmp_path, "healthy-h100x8.json", one_gpu(
        "ecc_sram", {"unc_volatile": 0, "unc_aggregate": 0, "cor_volatile": 500, "cor_aggregate": 0}))
    res, _ = run(tmp_path, fx, policy={"ecc": {"max_sram_correctable": 100}})
    assert res["ecc"].findings == ["nvidia3@5d:00.0 sram-cor=500>100"]
    res, _ = run(tmp_path / "b", fx)
    assert res["ecc"].status == Status.OK


def test_nvlink_error_counters_are_judged_as_growth_since_the_last_run(tmp_path):
    base = json.loads((NVML / "healthy-h100x8.json").read_text())
    f = tmp_path / "n.json"
    f.write_text(json.dumps(base))
    res, _ = run(tmp_path, f)
    assert res["nvlink_errors"].status == Status.OK  # the first run records the baseline
    assert res["nvlink_errors"].evidence["gpus"]["0"]["baseline"] == "recorded"
    base["devices"][4]["nvlink_errors"] = {"crc_flit": 0, "crc_data": 7, "replay": 2, "recovery": 0}
    base["devices"][4]["pcie_replay"] = 10_000
    f.write_text(json.dumps(base))
    res, _ = run(tmp_path, f)
    assert res["nvlink_errors"].status == Status.WARN  # a FAIL under the default action warn
    assert res["nvlink_errors"].findings == ["nvidia4@9a:00.0 nvlink crc_data+7,replay+2"]
    assert res["pcie"].status == Status.WARN and res["pcie"].findings[0].startswith("nvidia4@9a:00.0 pcie replays ")
    res, _ = run(tmp_path, f)  # nothing new since: quiet again
    assert res["nvlink_errors"].status == Status.OK and res["pcie"].status == Status.OK
    snap = json.loads((tmp_path / "state" / "counters.json").read_text())
    assert snap["gpu"][base["devices"][4]["uuid"]]["nvlink"]["crc_data"] == 7
    # a reboot (new boot id) has no baseline: counters restart with the driver
    base["boot_id"] = "rebooted"
    base["devices"][4]["nvlink_errors"] = {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}
    f.write_text(json.dumps(base))
    res, _ = run(tmp_path, f)
    assert res["nvlink_errors"].status == Status.OK


@pytest.mark.parametrize("key,value,check,status,finding", [
    ("fabric", {"state": 1, "status": "Success", "clique_id": 0, "health_mask": 0}, "fabric", Status.FAIL,
     "nvidia3@5d:00.0 fabric not started"),
    ("fabric", {"state": 3, "status": "Unknown", "clique_id": 0, "health_mask": 0}, "fabric", Status.FAIL,
     "nvidia3@5d:00.0 fabric Unknown"),
    ("fabric", {"state": 3, "status": "Success", "clique_id": 0, "health_mask": 1}, "fabric", Status.WARN,
     "nvidia3@5d:00.0 fabric degraded bandwidth"),
    ("inforom_valid", {"error": "CorruptedInforom"}, "inforom", Status.FAIL, "nvidia3@5d:00.0 corruptedinforom"),
    ("power_limit_mw", [350000, 700000], "power", Status.WARN, "nvidia3@5d:00.0 power limit 350W<95% of 700W"),
    ("pcie_gen", [1, 4, 5], "pcie", Status.WARN, "nvidia3@5d:00.0 pcie gen4<gen5"),
])
def test_new_gpu_checks(tmp_path, key, value, check, status, finding):
    res, _ = run(tmp_path, edited(tmp_path, "healthy-h100x8.json", one_gpu(key, value)))
    assert res[check].status == status and res[check].findings == [finding], res[check]


def test_every_new_nvml_call_degrades_to_skip_on_not_supported(tmp_path):
    """A GPU (or driver) without these: SKIP, never FAIL (DESIGN house style 8)."""
    def edit(d):
        for dev in d["devices"]:
            for key in ("ecc_sram", "ecc_dram", "nvlink_errors", "pcie_replay", "pcie_gen", "fabric", "inforom_valid",
                        "power_limit_mw"):
                dev[key] = {"error": "NotSupported"}
    res, _ = run(tmp_path, edited(tmp_path, "healthy-h100x8.json", edit))
    for check in ("nvlink_errors", "fabric", "inforom", "power"):
        assert res[check].status == Status.SKIP, (check, res[check].summary)
    assert res["ecc"].status == Status.OK and res["pcie"].status == Status.OK  # the seed rules still judge
    # the fabric's own "not supported" state (no NVSwitch) is a SKIP too
    res, _ = run(tmp_path / "b", edited(tmp_path / "b", "healthy-h100x8.json", lambda d: [
        dev.update(fabric={"state": 0, "status": "Success", "clique_id": 0}) for dev in d["devices"]]))
    assert res["fabric"].status == Status.SKIP


def test_recovery_action_is_feature_detected_in_old_bindings(tmp_path, monkeypatch):
    """nvidia-ml-py < 12.570 has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: SKIP, not a crash (issue 11 item 13)."""
    import pynvml

    monkeypatch.delattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")
    res, _ = run(tmp_path, "healthy-h100x8.json")
    assert res["recovery_action"].status == Status.SKIP and res["ecc"].status == Status.OK


def test_persistence_off_fails_only_where_the_site_expects_it(tmp_path):
    fx = edited(tmp_path, "healthy-h100x8.json", one_gpu("persistence_mode", 0))
    res, _ = run(tmp_path, fx)
    assert res["persistence"].status == Status.WARN and res["persistence"].action == Action.WARN
    res, _ = run(tmp_path / "b", fx, policy={"persistence": {"expected": True}})
    assert res["persistence"].status == Status.FAIL and res["persistence"].action == Action.DRAIN
    res, _ = run(tmp_path / "c", fx, policy={"persistence": {"expected": False}})
    assert res["persistence"].status == Status.OK


@pytest.mark.parametrize("line,status,finding,sticky", [
    ("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 30 LTSSM Fault Up", Status.FAIL,
     "nvswitch0000:c1:00 sxid20034", True),
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 28 egress non-posted PRIV error (First)",
     Status.WARN, "nvswitch0000:05:00 sxid12028", False),
    ("NVRM: Xid (PCI:0000:18:00): 46, pid=1234, name=python, GPU stopped processing", Status.FAIL, "nvidia0@18:00.0 xid46", True),
])
def test_sxids_and_xid46(tmp_path, line, status, finding, sticky):
    fx = edited(tmp_path, "healthy-h100x8.json", lambda d: d.update(kmsg=[[10, line]]))
    res, _ = run(tmp_path, fx, hook="prolog", gpus=[1])  # an NVSwitch serves every job's GPUs
    if finding.startswith("nvidia0@18:00.0"):
        res, _ = run(tmp_path / "all", fx)
    assert res["xid"].status == status and res["xid"].findings == [finding]
    assert bool(res["xid"].evidence["sticky"]) == sticky


def test_ib_mtu_and_link_flaps(tmp_path):
    paths = host_tree(tmp_path / "h", ib=GOOD_IB, governor="performance")
    port = Path(paths.sys_root) / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir()
    for c, v in (("link_downed", 3), ("symbol_error", 0), ("link_error_recovery", 0)):
        (port / "counters" / c).write_text(f"{v}\n")
    net = Path(paths.sys_root) / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "ib0"
    net.mkdir(parents=True)
    (net / "mtu").write_text("2044\n")
    res, _ = run(tmp_path, "healthy-h100x8.json", paths=paths)
    assert res["ib"].status == Status.OK  # no MTU expectation, flap baseline recorded
    res, _ = run(tmp_path, "healthy-h100x8.json", paths=paths, policy={"ib": {"mtu": 65520}})
    assert res["ib"].status == Status.FAIL and res["ib"].findings == ["ib mlx5_0 ib0 mtu 2044!=65520"]
    (port / "counters" / "link_downed").write_text("5\n")  # the port went down twice since
    res, _ = run(tmp_path, "healthy-h100x8.json", paths=paths)
    assert res["ib"].status == Status.WARN and res["ib"].findings == ["ib mlx5_0/1 link_downed+2"]


def test_fabric_falls_back_to_the_v1_call_on_an_older_driver(tmp_path):
    """nvidia-ml-py newer than the driver: the V struct's version is unknown there (ARGUMENT_VERSION_MISMATCH); the
    worker asks the v1 call, and a binding/driver pair that can answer neither is a SKIP, never a FAIL."""
    from slurmkit.health import fakenvml

    def v1(self, h, ref):
        v = self._value(h, "nvmlDeviceGetGpuFabricInfo", "fabric")
        ref._obj.state, ref._obj.status = int(v["state"]), 0
        return 0

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(fakenvml.FakeNVML, "nvmlDeviceGetGpuFabricInfoV",
                   lambda self, h, ref: fakenvml._raise("ArgumentVersionMismatch"), raising=False)
        mp.setattr(fakenvml.FakeNVML, "nvmlDeviceGetGpuFabricInfo", v1, raising=False)
        fx = edited(tmp_path, "healthy-h100x8.json", one_gpu("fabric", {"state": 1, "status": "Success"}))
        res, _ = run(tmp_path, fx)
        assert res["fabric"].findings == ["nvidia3@5d:00.0 fabric not started"]  # answered by the v1 call
        mp.delattr(fakenvml.FakeNVML, "nvmlDeviceGetGpuFabricInfo")
        res, _ = run(tmp_path / "b", fx)
        assert res["fabric"].status == Status.SKIP
    finally:
        mp.undo()
