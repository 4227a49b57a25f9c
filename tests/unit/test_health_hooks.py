"""Hook flows with a fake scontrol: drain before a failing prolog, conservative health drains/resumes, epilog cleanup,
outputs, the CLI edge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurmkit.backend.run import Result
from slurmkit.errors import SlurmTimeout
from slurmkit.health.cleanup import clean_shm
from slurmkit.health.decide import Verb, decide_fail, decide_health
from slurmkit.health.hooks import HookEnv, run_hook
from slurmkit.health.host import HostPaths
from slurmkit.health.result import Action, CheckResult, Status, drain_reason
from slurmkit.health.slurmctl import NodeState, parse_node
from tests.conftest import needs
from tests.unit.fakeproc import fake_daemon

ROOT = Path(__file__).resolve().parents[2]
NVML = ROOT / "tests" / "data" / "nvml"


class FakeSlurm:
    """scontrol/squeue for one node, recording every call."""

    def __init__(self, state: str = "IDLE", reason: str = "", jobs: list[str] | None = None, hang: bool = False,
                 frees_reason: bool = True):
        self.state, self.reason, self.jobs, self.hang = state, reason, jobs or [], hang
        # update_node sets a given reason, then NODE_RESUME frees it only for an IDLE node and only with accounting
        # storage on 24.11 (node_mgr.c, accounting_storage.c at slurm-24-11-5-1); frees_reason=False: 24.11 without
        self.frees_reason = frees_reason
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout=30.0, **kw):
        argv = list(argv)
        self.calls.append(argv)
        if self.hang:
            raise SlurmTimeout(argv, timeout)
        if argv[:4] == ["scontrol", "-o", "show", "node"]:
            reason = f"Reason={self.reason} [root@2026-11-30T01:00:00]" if self.reason else "Reason=(null)"
            out = (f"NodeName={argv[4]} Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 CPUTot=8 Gres=gpu:h100:8 "
                   f"NodeAddr=127.0.0.1 State={self.state} ThreadsPerCore=1 Partitions=gpu {reason} "
                   f"Comment=(null)\n")
            if not self.reason:
                out = out.replace(" Reason=(null)", "")
            return Result(tuple(argv), 0, out, "")
        if argv[:2] == ["scontrol", "update"]:
            kv = dict(a.split("=", 1) for a in argv[2:])
            if kv["state"] == "drain":
                self.reason = kv["reason"]
                if "DRAIN" not in self.state:
                    self.state += "+DRAIN"
            elif kv["state"] == "resume":
                if kv.get("reason"):
                    self.reason = kv["reason"]
                if self.frees_reason and self.state == "IDLE+DRAIN":
                    self.reason = ""
                self.state = self.state.replace("+DRAIN", "")
            return Result(tuple(argv), 0, "", "")
        if argv[:2] == ["scontrol", "reboot"]:
            return Result(tuple(argv), 0, "", "")
        if argv[0] == "squeue":
            return Result(tuple(argv), 0, "".join(f"{j}\n" for j in self.jobs), "")
        raise AssertionError(f"unexpected command {argv}")

    def verbs(self) -> list[str]:
        return [" ".join(c[:2]) if c[1] != "update" else f"update {c[3]}" for c in self.calls]


@pytest.fixture()
def inventory(tmp_path: Path) -> Path:
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["hooks"] = {"prolog": True, "epilog": True, "healthcheck_interval": 10,
                    "checks": {"ib": False, "resume_after_passes": 2, "slurmd_oom": False}}
    p = tmp_path / "etc" / "slurmkit.yaml"
    p.parent.mkdir()
    p.write_text(yaml.safe_dump(inv))
    return p


def host(tmp_path: Path) -> HostPaths:
    proc = tmp_path / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text("MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\n")
    (proc / "333").mkdir(exist_ok=True)  # munged: the daemons check requires Slurm's auth daemon
    fake_daemon(proc, 333, "munged")
    return HostPaths(sys_root=str(tmp_path / "sys"), proc_root=str(proc), kmsg=str(tmp_path / "kmsg"),
                     dev_root=str(tmp_path / "dev"))


def fixture(tmp_path: Path, name: str, edit=None) -> Path:
    d = json.loads((NVML / name).read_text())
    if edit:
        edit(d)
    p = tmp_path / "nvml" / "node1.json"  # the lab layout: a directory of <node>.json
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(d))
    return p.parent


def env(tmp_path, inventory, slurm, hook, nvml="healthy-h100x8.json", **kw) -> HookEnv:
    fake = kw.pop("fake_nvml", None) or str(fixture(tmp_path, nvml))
    return HookEnv(hook=hook, node="node1", state_dir=str(tmp_path / "state"), inventory=str(inventory),
                   fake_nvml=fake, paths=host(tmp_path), runner=slurm, **kw)


# --- pure decisions -----------------------------------------------------------------------------------------

IDLE = NodeState("node1", "idle", frozenset(), "")
OURS = NodeState("node1", "idle", frozenset({"DRAIN"}), "slurmkit: gpu3 xid79")
ADMIN = NodeState("node1", "idle", frozenset({"DRAIN"}), "rack 12 maintenance")
DOWN = NodeState("node1", "down", frozenset({"DRAIN"}), "slurmkit: gpu3 xid79")


def test_decide_fail():
    assert decide_fail(IDLE, Action.DRAIN, "slurmkit: x").verb == Verb.DRAIN
    assert decide_fail(IDLE, Action.DRAIN_REBOOT, "slurmkit: x").verb == Verb.DRAIN_REBOOT
    assert decide_fail(ADMIN, Action.DRAIN, "slurmkit: x").verb == Verb.NONE
    assert decide_fail(DOWN, Action.DRAIN, "slurmkit: x").verb == Verb.NONE
    assert decide_fail(OURS, Action.DRAIN, "slurmkit: gpu3 xid79").verb == Verb.NONE
    assert decide_fail(OURS, Action.DRAIN, "slurmkit: gpu1 ecc-unc=2").verb == Verb.UPDATE_REASON
    responding = NodeState("node1", "idle", frozenset({"NOT_RESPONDING"}), "")
    assert decide_fail(responding, Action.DRAIN, "slurmkit: x").verb == Verb.NONE


def test_decide_fail_drains_over_a_stale_reason():
    """Issue 23 item 1: a reason on a node that is neither draining nor drained outlived its drain (24.11 without
    accounting storage keeps it on resume). Before: 'foreign reason kept', the node was never drained again."""
    stale = NodeState("node1", "idle", frozenset(), "admin: cable swap")
    d = decide_fail(stale, Action.DRAIN, "slurmkit: gpu1 ecc-unc=2")
    assert d.verb == Verb.DRAIN and "stale" in d.why and "admin: cable swap" in d.why
    assert decide_fail(NodeState("node1", "mixed", frozenset(), "Prolog error"), Action.DRAIN_REBOOT,
                       "slurmkit: x").verb == Verb.DRAIN_REBOOT
    assert decide_health(stale, Action.DRAIN, "slurmkit: x", 0, 3).verb == Verb.DRAIN
    draining = NodeState("node1", "mixed", frozenset({"DRAIN"}), "admin: cable swap")
    assert decide_fail(draining, Action.DRAIN, "slurmkit: x").verb == Verb.NONE  # a live foreign drain stays


def test_decide_health_flap_damping_and_ownership():
    d = decide_health(OURS, Action.NONE, "", 0, 3)
    assert (d.verb, d.passes) == (Verb.NONE, 1)
    d = decide_health(OURS, Action.WARN, "", 2, 3)  # a warning is a pass
    assert (d.verb, d.passes) == (Verb.RESUME, 0)
    d = decide_health(OURS, Action.DRAIN, "slurmkit: gpu3 xid79", 2, 3)  # failing again resets the count
    assert d.passes == 0 and d.verb == Verb.NONE
    for passes in range(10):
        assert decide_health(ADMIN, Action.NONE, "", passes, 1).verb == Verb.NONE
        assert decide_health(DOWN, Action.NONE, "", passes, 1).verb == Verb.NONE
    assert decide_health(IDLE, Action.NONE, "", 5, 3) .passes == 0


def test_parse_node_reason_with_spaces_and_stamp():
    out = ("NodeName=node1 Arch=x86_64 State=MIXED+DRAIN ThreadsPerCore=1 "
           "Reason=slurmkit: gpu3 xid79; gpu3 lost [root@2026-11-30T01:00:00] Comment=(null)\n")
    n = parse_node(out)
    assert (n.base, n.flags, n.reason) == ("mixed", frozenset({"DRAIN"}), "slurmkit: gpu3 xid79; gpu3 lost")
    n = parse_node("NodeName=node2 State=DOWN*+DRAIN Reason=Not responding [slurm@2026-11-30T01:00:00]\n")
    assert n.base == "down" and {"DRAIN", "NOT_RESPONDING"} <= n.flags and n.reason == "Not responding"
    assert parse_node("NodeName=node3 State=IDLE ThreadsPerCore=1\n").reason == ""
    with pytest.raises(ValueError):
        parse_node("Node node9 not found\n")


def test_drain_reason_is_prefixed_ordered_and_bounded():
    rs = [CheckResult("temperature", Status.FAIL, "", [f"gpu{i} temp 95C>=90C" for i in range(8)],
                      action=Action.DRAIN),
          CheckResult("recovery_action", Status.FAIL, "", ["gpu2 recovery=node_reboot"], action=Action.DRAIN_REBOOT),
          CheckResult("clocks", Status.WARN, "", ["gpu1 clocks hw_slowdown"], action=Action.WARN)]
    r = drain_reason(rs)
    assert r.startswith("slurmkit: gpu2 recovery=node_reboot; gpu0 temp") and "clocks" not in r
    assert len(r) <= 120 and re.search(r"\+\d+ more$", r)


# --- prolog -------------------------------------------------------------------------------------------------

def test_hooks_never_write_the_hosts_node_exporter_directory(tmp_path, inventory, monkeypatch):
    """Issue 23 item 4: on a host with Debian's prometheus-node-exporter (/var/lib/prometheus/node-exporter exists) a
    test's (or bench's) fake node wrote its metrics there. The library no longer looks for the host's directory; the
    edge offers it only for a real node (no SLURMKIT_FAKE_NVML)."""
    from slurmkit.cli import hookrun
    from slurmkit.health import policy

    hostdir = tmp_path / "var-lib-prometheus-node-exporter"
    hostdir.mkdir()
    monkeypatch.setattr(policy, "DEFAULT_TEXTFILE_DIR", str(hostdir))
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", job_id="42", job_gpus=[0]))
    assert rep.exit_code == 0 and list(hostdir.iterdir()) == []
    assert (tmp_path / "state" / "node1" / "slurmkit_health_prolog.prom").exists()
    assert hookrun.host_textfile_dir(str(tmp_path / "nvml")) is None  # a fake node: never the host's
    assert hookrun.host_textfile_dir(None) == str(hostdir)  # a real node with node_exporter: its directory


def test_prolog_bench_writes_only_under_its_temporary_directory(tmp_path):
    """Issue 23 item 4: bench/prolog_bench.py's hooks wrote metrics to the host's node_exporter directory (with
    --real, over a real node's) and bytecode into the source tree."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prolog_bench", ROOT / "bench" / "prolog_bench.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    hooks = bench.hooks_section(tmp_path)
    assert Path(hooks["checks"]["textfile_dir"]).is_relative_to(tmp_path)
    env_ = bench.base_env(tmp_path, tmp_path / "bin", 8)
    for key in ("SLURMKIT_STATE_DIR", "PYTHONPYCACHEPREFIX"):
        assert Path(env_[key]).is_relative_to(tmp_path), key
    from slurmkit.health.policy import parse_policy

    assert parse_policy(hooks["checks"]).textfile_dir == hooks["checks"]["textfile_dir"]


def test_prolog_healthy_exits_0_without_touching_slurm_and_writes_outputs(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", job_id="42", job_gpus=[0, 1]))
    assert rep.exit_code == 0 and rep.action == Action.NONE and slurm.calls == []
    nd = tmp_path / "state" / "node1"
    rec = json.loads((nd / "last-prolog.json").read_text())
    assert rec["job_id"] == "42" and rec["status"] == "OK" and {c["check"] for c in rec["checks"]} >= {"ecc", "xid"}
    assert json.loads((nd / "history.jsonl").read_text().splitlines()[-1])["hook"] == "prolog"
    prom = (nd / "slurmkit_health_prolog.prom").read_text()
    assert 'slurmkit_health_check_status{node="node1",hook="prolog",check="ecc",state="ok"} 1' in prom
    assert 'slurmkit_health_check_status{node="node1",hook="prolog",check="ecc",state="fail"} 0' in prom
    for line in prom.splitlines():  # every sample line is `name{labels} value`
        assert line.startswith("#") or re.fullmatch(r"slurmkit_health_\w+\{[^}]*\} -?[\d.]+", line), line
    assert not list(nd.glob(".*.tmp"))  # atomic writes left nothing behind


def test_prolog_failure_sets_our_reason_then_exits_1(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="ecc-uncorrected-gpu1.json", job_gpus=[0, 1]))
    assert rep.exit_code == 1
    assert slurm.verbs() == ["scontrol -o", "update state=drain"]
    assert slurm.reason == "slurmkit: nvidia1@2a:00.0 ecc-unc=2; nvidia1@2a:00.0 xid48; after a GPU reset: slurmkit check --clear-xid" == rep.reason
    assert rep.slurm["done"] == "drain"


def test_prolog_on_other_gpus_passes(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="ecc-uncorrected-gpu1.json", job_gpus=[4, 5]))
    assert rep.exit_code == 0 and slurm.calls == []


def test_prolog_never_overwrites_a_foreign_reason(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED+DRAIN", reason="admin: replace PSU after this job")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="xid79-gpu5.json", job_gpus=list(range(8))))
    assert rep.exit_code == 1  # still refuse the job
    assert slurm.verbs() == ["scontrol -o"] and slurm.reason == "admin: replace PSU after this job"


def test_prolog_with_hung_nvml_returns_within_budget_and_fails_closed(tmp_path, inventory):
    inv = yaml.safe_load(inventory.read_text())
    inv["hooks"]["checks"].update(budget_s=2.0, scontrol_timeout_s=0.3, nvml={"timeout_s": 1.0})
    inventory.write_text(yaml.safe_dump(inv))
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="nvml-hang.json", job_gpus=[4]))
    assert rep.exit_code == 1
    res = {r.name: r for r in rep.results}
    assert res["ecc"].status == Status.FAIL and "hung" in res["ecc"].summary
    assert slurm.reason == "slurmkit: ecc nvml hung"
    assert rep.duration_s < 2.0  # the budget the hook was given, not a wall-clock benchmark


def test_prolog_when_scontrol_hangs_still_exits_1(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED", hang=True)
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="remap-failed-gpu2.json", job_gpus=[2]))
    assert rep.exit_code == 1 and "timed out" in rep.slurm["error"]


def test_broken_inventory_does_not_drain_a_healthy_node(tmp_path, inventory):
    inventory.write_text(inventory.read_text().replace("checks:", "checks:\n    temprature: {max_c: 80}"))
    slurm = FakeSlurm()
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", job_gpus=[0]))
    assert rep.exit_code == 0 and rep.results[0].name == "config" and rep.results[0].status == Status.WARN
    assert "did you mean 'temperature'" in rep.results[0].summary
    rep = run_hook(env(tmp_path / "b", inventory, slurm, "prolog", nvml="off-bus-gpu3.json", job_gpus=[0]))
    assert rep.exit_code == 1  # hardware faults still fail closed with the default policy


# --- health -------------------------------------------------------------------------------------------------

def test_health_drains_then_resumes_only_after_n_passes(tmp_path, inventory):
    slurm = FakeSlurm()
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert rep.exit_code == 1
    assert slurm.reason == "slurmkit: nvidia2@3a:00.0 remap-failed; nvidia2@3a:00.0 xid64; after a GPU reset: slurmkit check --clear-xid"
    # fault cleared (GPU reset + reboot: new boot id, clean log)
    def fixed(d):
        d["boot_id"] = "after-reset"
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="healthy-h100x8.json",
                       fake_nvml=str(fixture(tmp_path, "healthy-h100x8.json", fixed))))
    assert rep.exit_code == 0 and rep.slurm["passes"] == 1 and "DRAIN" in slurm.state
    rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=str(tmp_path / "nvml")))
    assert rep.slurm["decision"] == "resume" and slurm.state == "IDLE" and slurm.reason == ""
    assert json.loads((tmp_path / "state" / "node1" / "health.json").read_text())["passes"] == 0


def test_health_resume_leaves_no_fault_reason_and_drains_again(tmp_path, inventory):
    """Issue 23 item 1 on a Slurm that keeps a resumed node's reason (24.11 without accounting storage): our resume
    replaces the fault reason with a note, and the next fault drains the node again."""
    slurm = FakeSlurm(frees_reason=False)
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="ecc-uncorrected-gpu1.json"))
    assert rep.exit_code == 1 and slurm.reason.startswith("slurmkit: nvidia1@2a:00.0 ecc-unc=2") and "DRAIN" in slurm.state

    def healed(d):
        d["boot_id"] = "after-reset"
    healthy = str(fixture(tmp_path, "healthy-h100x8.json", healed))
    for _ in range(2):
        rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=healthy))
    assert rep.slurm["decision"] == "resume" and slurm.state == "IDLE"
    assert slurm.reason.startswith("resumed by slurmkit after 2 passing health checks (was: nvidia1@2a:00.0 ecc-unc=2")
    assert not slurm.reason.startswith("slurmkit:")
    # the fault comes back: the leftover note must not blind the health check
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="ecc-uncorrected-gpu1.json"))
    assert rep.slurm["decision"] == "drain" and "DRAIN" in slurm.state and slurm.reason.startswith("slurmkit: nvidia1@2a:00.0")
    assert "stale reason" in rep.slurm["why"]


def test_health_drains_over_an_admins_stale_reason(tmp_path, inventory):
    """An admin drained and resumed the node on 24.11 without accounting storage: IDLE with their reason."""
    slurm = FakeSlurm(state="IDLE", reason="admin: cable swap")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="ecc-uncorrected-gpu1.json"))
    assert rep.exit_code == 1 and rep.slurm["decision"] == "drain"
    assert "DRAIN" in slurm.state and slurm.reason.startswith("slurmkit: nvidia1@2a:00.0 ecc-unc=2")
    assert rep.slurm["before"]["reason"] == "admin: cable swap"


def test_reasons_name_the_part_and_a_missing_gpu_is_found_by_bus_id(tmp_path, inventory):
    """Issue 23 item 2. Before: 'gpu_count 7/8' with "lost": [] (which board?), and NVML indexes that shift once a
    GPU is gone: the GPU at /dev/nvidia4 (NVML index 3 after nvidia3 fell off the bus) was reported as 'gpu3'."""
    slurm = FakeSlurm()
    rep = run_hook(env(tmp_path, inventory, slurm, "health"))  # the first healthy run records the boards
    assert rep.exit_code == 0
    base = json.loads((tmp_path / "state" / "node1" / "gpus.json").read_text())["gpus"]
    assert base[3] == {"minor": 3, "pci_bus_id": "00000000:5D:00.0", "uuid": "GPU-5c1e7a3b-0d2f-4b7e-9a61-000000000003",
                       "serial": "1652322000003"}

    def hot(d):  # nvidia3 gone; the board at /dev/nvidia4 (now NVML index 3) runs hot
        d["devices"][3]["temperature_c"] = 95
    rep = run_hook(env(tmp_path, inventory, slurm, "health",
                       fake_nvml=str(fixture(tmp_path / "b", "off-bus-gpu3.json", hot))))
    res = {r.name: r for r in rep.results}
    assert res["gpu_count"].findings == ["gpu_count 7/8", "nvidia3@5d:00.0 missing"]
    assert res["gpu_count"].evidence["missing"] == [base[3]]
    assert res["temperature"].findings == ["nvidia4@9a:00.0 temp 95C>=90C"]
    assert res["xid"].findings == ["nvidia3@5d:00.0 xid79"]  # the XID of the board NVML no longer lists
    assert slurm.reason.startswith("slurmkit: gpu_count 7/8; nvidia3@5d:00.0 missing;"), slurm.reason
    rec = json.loads((tmp_path / "state" / "node1" / "last-health.json").read_text())
    row = next(g for g in rec["gpus"] if g["minor"] == 4)
    assert row == {"index": 3, "label": "nvidia4@9a:00.0", "minor": 4, "pci_bus_id": "00000000:9A:00.0",
                   "uuid": "GPU-5c1e7a3b-0d2f-4b7e-9a61-000000000004", "serial": "1652322000004",
                   "name": "NVIDIA H100 80GB HBM3"}
    # the baseline is not rewritten by the failing run
    assert json.loads((tmp_path / "state" / "node1" / "gpus.json").read_text())["gpus"] == base


def test_missing_gpu_from_the_inventorys_bus_ids_and_a_jobs_view(tmp_path, inventory):
    """Without a recorded healthy run the inventory's hooks.checks.gpu_count.bus_ids name the missing board; a job
    given /dev/nvidia4 hears about nvidia4, not about NVML's shifted index 3."""
    inv = yaml.safe_load(inventory.read_text())
    buses = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
             "0000:ba:00.0", "0000:db:00.0"]
    inv["hooks"]["checks"]["gpu_count"] = {"bus_ids": buses}
    inventory.write_text(yaml.safe_dump(inv))

    def hot(d):
        d["devices"][3]["temperature_c"] = 95
    fake = str(fixture(tmp_path, "off-bus-gpu3.json", hot))
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", fake_nvml=fake, job_gpus=[4]))
    res = {r.name: r for r in rep.results}
    assert res["gpu_count"].findings == ["gpu_count 7/8", "nvidia3@5d:00.0 missing"]
    assert res["gpu_count"].evidence["expected_from"] == "hooks.checks.gpu_count.bus_ids"
    assert res["temperature"].findings == ["nvidia4@9a:00.0 temp 95C>=90C"]
    inv["hooks"]["checks"]["gpu_count"] = {"bus_ids": ["18:00"]}
    inventory.write_text(yaml.safe_dump(inv))
    with pytest.raises(Exception, match=r"hooks.checks.gpu_count.bus_ids: expected a list of PCI bus ids"):
        run_hook(env(tmp_path, inventory, FakeSlurm(), "check", fake_nvml=fake))


def test_row_remap_pending_drains_an_idle_node_for_the_reset_never_a_busy_one(tmp_path, inventory):
    """Issue 23 item 6: a pending row remap needs a GPU reset nobody performed; the node kept taking jobs on a GPU
    whose remap never took effect. While a job runs: a WARN. Idle: drained 'reset pending' with the way out; after
    the reset (flag cleared) resumed after N passes."""
    busy = FakeSlurm(state="MIXED")
    rep = run_hook(env(tmp_path / "busy", inventory, busy, "health", nvml="remap-pending-gpu2.json"))
    assert rep.exit_code == 0 and busy.verbs() == ["scontrol -o"] and rep.action == Action.WARN
    slurm = FakeSlurm(state="IDLE")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-pending-gpu2.json"))
    assert rep.exit_code == 1 and rep.slurm["decision"] == "drain" and "escalated" in rep.slurm
    assert slurm.reason == ("slurmkit: nvidia2@3a:00.0 reset pending (row remap); "
                            "way out: reset the idle GPU (nvidia-smi -r) or reboot"), slurm.reason
    res = {r.name: r for r in rep.results}["remapped_rows"]
    assert res.status == Status.FAIL and res.action == Action.DRAIN
    rec = json.loads((tmp_path / "state" / "node1" / "last-health.json").read_text())
    assert rec["action"] == "drain" and rec["reason"] == slurm.reason
    fake = str(fixture(tmp_path, "remap-pending-gpu2.json", lambda d: d["devices"][2].update(remapped_rows=[0, 1, 0, 0])))
    for _ in range(2):  # the reset activated the remap: pending cleared
        rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=fake))
    assert rep.slurm["decision"] == "resume" and slurm.state == "IDLE"
    inv = yaml.safe_load(inventory.read_text())
    inv["hooks"]["checks"]["remapped_rows"] = {"drain_pending_when_idle": False}
    inventory.write_text(yaml.safe_dump(inv))
    rep = run_hook(env(tmp_path / "off", inventory, FakeSlurm(), "health", nvml="remap-pending-gpu2.json"))
    assert rep.exit_code == 0 and rep.action == Action.WARN


def test_nvlink_error_growth_escalates_from_warn_to_drain_after_n_intervals(tmp_path, inventory):
    """Issue 23 item 6: NVLink replay/CRC growth above the rate was a WARN forever. Now escalate_after (3) health
    runs in a row above it drain the node; a quiet interval ends the streak."""
    slurm = FakeSlurm()
    counts = {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}

    def run(replay: int):
        counts["replay"] = replay
        fake = str(fixture(tmp_path, "healthy-h100x8.json", lambda d: d["devices"][4].update(nvlink_errors=dict(counts))))
        return run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=fake))

    assert run(0).action == Action.NONE  # baseline
    for n in (5, 10):
        rep = run(n)
        r = {x.name: x for x in rep.results}["nvlink_errors"]
        assert rep.action == Action.WARN and r.findings == ["nvidia4@9a:00.0 nvlink replay+5"], r.findings
    assert run(10).action == Action.NONE  # a quiet interval: the streak ends
    for n in (15, 20):
        assert run(n).action == Action.WARN
    rep = run(25)
    r = {x.name: x for x in rep.results}["nvlink_errors"]
    assert rep.action == Action.DRAIN and r.findings == ["nvidia4@9a:00.0 nvlink errors above rate 3 runs"]
    assert slurm.reason == "slurmkit: nvidia4@9a:00.0 nvlink errors above rate 3 runs" and "DRAIN" in slurm.state
    # a prolog in between neither counts nor resets the health check's streak
    counts["replay"] = 30
    fake = str(fixture(tmp_path, "healthy-h100x8.json", lambda d: d["devices"][4].update(nvlink_errors=dict(counts))))
    run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", fake_nvml=fake, job_gpus=[4]))
    snap = json.loads((tmp_path / "state" / "node1" / "counters.json").read_text())
    assert snap["gpu"]["GPU-5c1e7a3b-0d2f-4b7e-9a61-000000000004"]["nvlink_streak"] == 3


def test_health_never_resumes_an_admin_drain(tmp_path, inventory):
    slurm = FakeSlurm(state="IDLE+DRAIN", reason="admin: burn-in")
    for _ in range(4):
        rep = run_hook(env(tmp_path, inventory, slurm, "health"))
        assert rep.exit_code == 0
    assert slurm.verbs() == ["scontrol -o"] * 4 and slurm.reason == "admin: burn-in"


def test_health_leaves_down_nodes_alone(tmp_path, inventory):
    slurm = FakeSlurm(state="DOWN*")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="xid79-gpu5.json"))
    assert rep.exit_code == 1 and slurm.verbs() == ["scontrol -o"] and "left alone" in rep.slurm["why"]


def test_health_makes_no_slurm_call_on_slurmds_first_run(tmp_path, inventory):
    h = host(tmp_path)
    d = Path(h.proc_root, "4321")
    d.mkdir()
    (d / "comm").write_text("slurmd\n")
    (d / "stat").write_text("4321 (slurmd) S 1 4321 4321 0 -1 4194560 " + " ".join(["0"] * 13) + " 777 0 0\n")
    slurm = FakeSlurm()
    e = env(tmp_path, inventory, slurm, "health", nvml="xid79-gpu5.json", ppid=4321)
    e.paths = h
    rep = run_hook(e)
    assert slurm.calls == [] and "before registration" in rep.slurm["done"]
    e2 = env(tmp_path, inventory, slurm, "health", fake_nvml=e.fake_nvml, ppid=4321)
    e2.paths = h
    rep = run_hook(e2)  # same slurmd, next interval: registered by now
    assert slurm.verbs() == ["scontrol -o", "update state=drain"]


def test_drain_and_reboot_policy(tmp_path, inventory):
    inv = yaml.safe_load(inventory.read_text())
    inv["hooks"]["checks"]["remapped_rows"] = {"action": "drain+reboot"}
    inventory.write_text(yaml.safe_dump(inv))
    slurm = FakeSlurm()
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert rep.action == Action.DRAIN_REBOOT and slurm.verbs() == ["scontrol -o", "update state=drain",
                                                                     "scontrol reboot"]
    assert slurm.calls[-1][:4] == ["scontrol", "reboot", "ASAP", "nextstate=resume"]


# --- epilog -------------------------------------------------------------------------------------------------

JOB_UID = 12345


@needs(os.geteuid() == 0, "starting a process as another user needs root")
def test_epilog_kills_the_job_users_leftover_gpu_process_and_cleans_shm(tmp_path, inventory):
    leftover = subprocess.Popen(["sleep", "60"], user=JOB_UID)
    mine = subprocess.Popen(["sleep", "60"])  # root's: never touched
    try:
        def busy(d):
            d["devices"][0]["compute_processes"] = [{"pid": leftover.pid, "used_memory": 1}]
            d["devices"][1]["compute_processes"] = [{"pid": mine.pid, "used_memory": 1}]
        shm = tmp_path / "shm"
        shm.mkdir()
        (shm / "nccl-1234").write_text("x")
        os.chown(shm / "nccl-1234", JOB_UID, JOB_UID)
        (shm / "other").write_text("y")
        slurm = FakeSlurm(jobs=["77"])  # squeue lists only the ending job itself
        e = env(tmp_path, inventory, slurm, "epilog", fake_nvml=str(fixture(tmp_path, "healthy-h100x8.json", busy)),
                job_id="77", job_uid=JOB_UID, job_user="alice", job_gpus=[0, 1], shm_dir=str(shm))
        e.paths = HostPaths(sys_root=e.paths.sys_root, proc_root="/proc", kmsg=e.paths.kmsg, dev_root=e.paths.dev_root)
        rep = run_hook(e)
        leftover.wait(timeout=5)
        assert leftover.returncode == -9
        assert mine.poll() is None
        res = {r.name: r for r in rep.results}
        assert res["gpu_procs"].status == Status.WARN  # root's process on the job's GPU: reported, not killed
        assert res["gpu_procs"].evidence["killed"][0]["pid"] == leftover.pid
        assert sorted(os.listdir(shm)) == ["other"]
        assert rep.exit_code == 0
        assert slurm.calls == []  # no Slurm command from an epilog (issue 11 item 7)
        assert rep.cleanup["shm"]["removed"] == ["nccl-1234"]  # every removed file is in the record
        assert json.loads((tmp_path / "state" / "node1" / "last-epilog.json").read_text())["cleanup"]["shm"] == {
            "removed": ["nccl-1234"], "errors": []}
    finally:
        for p in (leftover, mine):
            if p.poll() is None:
                p.kill()
                p.wait()


@needs(os.geteuid() == 0, "a root job's processes: the test must run as root")
def test_epilog_of_a_root_job_kills_its_own_leftover_and_names_what_it_leaves(tmp_path, inventory):
    """Issue 23 item 3: a job that ran as root left a process on its GPU. Before: 'other users' processes on the job's
    GPUs' (a WARN), the process left running, and the health check then drained 'busy pid'. Now the process /proc ties
    to the job (SLURM_JOB_ID in its environment) is killed; a root process it cannot tie to the job is left running
    and the message says whose it may be and what the health check will do."""
    own = subprocess.Popen(["sleep", "60"], env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "88"})
    daemon = subprocess.Popen(["sleep", "60"], env={"PATH": os.environ["PATH"]})
    try:
        def busy(d):
            d["devices"][0]["compute_processes"] = [{"pid": own.pid, "used_memory": 1}]
            d["devices"][1]["compute_processes"] = [{"pid": daemon.pid, "used_memory": 1}]
        slurm = FakeSlurm()
        e = env(tmp_path, inventory, slurm, "epilog", fake_nvml=str(fixture(tmp_path, "healthy-h100x8.json", busy)),
                job_id="88", job_uid=0, job_user="root", job_gpus=[0, 1], shm_dir=str(tmp_path / "shm"))
        e.paths = HostPaths(sys_root=e.paths.sys_root, proc_root="/proc", kmsg=e.paths.kmsg, dev_root=e.paths.dev_root)
        rep = run_hook(e)
        own.wait(timeout=5)
        assert own.returncode == -9 and daemon.poll() is None
        res = {r.name: r for r in rep.results}["gpu_procs"]
        assert res.status == Status.WARN and rep.exit_code == 0
        assert "other users" not in res.summary
        assert res.summary.startswith("killed 1 leftover process(es) of job 88; job 88 ran as root; root processes "
                                      "that /proc does not tie to it")
        assert f"nvidia1@2a:00.0 pid {daemon.pid} uid 0" in res.summary and "the health check drains the node" in res.summary
        assert res.findings == [f"nvidia1@2a:00.0 root pid {daemon.pid}"]
        assert [k["pid"] for k in res.evidence["killed"]] == [own.pid]
        assert [u["pid"] for u in res.evidence["unproven"]] == [daemon.pid]
    finally:
        for p in (own, daemon):
            if p.poll() is None:
                p.kill()
                p.wait()


@needs(os.geteuid() == 0, "chown needs root")
def test_shm_is_kept_while_the_user_has_another_job_here(tmp_path, inventory):
    """Decided from local facts (issue 11 item 7): job 78 of the same user still runs here (its slurmstepd is alive
    and one of the user's processes descends from it), so job 77's epilog leaves /dev/shm alone; once 78 is
    gone, the next epilog removes the user's files. No squeue, no scontrol."""
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "f").write_text("x")
    os.chown(shm / "f", JOB_UID, JOB_UID)
    proc = tmp_path / "proc"
    fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [78.batch]")
    fake_proc(proc, 901, uid=JOB_UID, ppid=900)  # a task of job 78's step
    (proc / "meminfo").write_text("MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\n")
    (proc / "333").mkdir(exist_ok=True)  # munged: the daemons check requires Slurm's auth daemon
    fake_daemon(proc, 333, "munged")
    slurm = FakeSlurm()
    rep = run_hook(env(tmp_path, inventory, slurm, "epilog", job_id="77", job_uid=JOB_UID, job_user="alice",
                       job_gpus=[0], shm_dir=str(shm)))
    assert rep.exit_code == 0 and os.listdir(shm) == ["f"] and slurm.calls == []
    assert rep.cleanup["shm"] == {"skipped": "user has other jobs here: ['78']"}
    (proc / "900" / "cmdline").write_bytes(b"slurmstepd: [79.batch]\0")  # 78 ended; 79 is another user's job
    fake_proc(proc, 901, uid=JOB_UID, job="78")  # 78's task outlived its step (init's child now), claiming 78
    rep = run_hook(env(tmp_path, inventory, slurm, "epilog", job_id="77", job_uid=JOB_UID, job_user="alice",
                       job_gpus=[0], shm_dir=str(shm)))
    assert os.listdir(shm) == [] and rep.cleanup["shm"]["removed"] == ["f"] and slurm.calls == []


def test_failing_epilog_calls_no_slurm_command(tmp_path, inventory):
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "epilog", nvml="remap-failed-gpu2.json", job_id="5",
                       job_uid=JOB_UID, job_gpus=[2]))
    assert rep.exit_code == 1 and slurm.calls == [] and "Epilog error" in rep.slurm["done"]
    # Slurm's 'Epilog error' drain is then ours to keep current (the health check reads this record)
    slurm = FakeSlurm(state="IDLE+DRAIN", reason="Epilog error")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert rep.slurm["decision"] == "update-reason" and slurm.reason.startswith("slurmkit: nvidia2@3a:00.0 remap-failed")


@needs(os.geteuid() == 0, "chown needs root")
def test_clean_shm_only_removes_the_users_entries(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("2")
    (tmp_path / "b").write_text("3")
    for p in ("a", "d"):
        os.chown(tmp_path / p, JOB_UID, JOB_UID)
    os.symlink("/etc/passwd", tmp_path / "link")
    os.lchown(tmp_path / "link", JOB_UID, JOB_UID)
    out = clean_shm(JOB_UID, str(tmp_path))
    assert sorted(out["removed"]) == ["a", "d", "link"] and sorted(os.listdir(tmp_path)) == ["b"]
    assert os.path.exists("/etc/passwd")
    assert clean_shm(0, str(tmp_path))["removed"] == []


# --- CLI edge -----------------------------------------------------------------------------------------------

def test_cli_check_json_and_table(tmp_path, inventory):
    from slurmkit.cli.hook import check

    fx = fixture(tmp_path, "xid79-gpu5.json")
    envv = {"SLURMKIT_FAKE_NVML": str(fx), "SLURMD_NODENAME": "node1"}
    r = CliRunner().invoke(check, ["--inventory", str(inventory), "--state-dir", str(tmp_path / "s"), "--json"],
                           env=envv)
    assert r.exit_code == 1, r.output
    rec = json.loads(r.output)
    assert rec["action"] == "drain" and rec["reason"].startswith("slurmkit: gpu_count 7/8")
    assert not (tmp_path / "s").exists()  # check is read-only
    r = CliRunner().invoke(check, ["--inventory", str(inventory), "--state-dir", str(tmp_path / "s")], env=envv)
    assert re.search(r"^gpu_count\s+FAIL\s+drain\s+gpu_count 7/8; gpu5 lost$", r.output, re.M), r.output


def test_cli_record_fixture_round_trips_through_the_fake(tmp_path, inventory):
    from slurmkit.cli.hook import check

    out = tmp_path / "rec.json"
    r = CliRunner().invoke(check, ["--record-fixture", str(out)],
                           env={"SLURMKIT_FAKE_NVML": str(NVML / "ecc-uncorrected-gpu1.json")})
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert len(rec["devices"]) == 8 and rec["devices"][1]["ecc_volatile_uncorrected"] == 2
    original = json.loads((NVML / "ecc-uncorrected-gpu1.json").read_text())
    for key in ("uuid", "pci_bus_id", "nvlink_state", "remapped_rows", "mig_mode", "retired_pages_pending"):
        assert rec["devices"][3][key] == original["devices"][3][key], key
    r = CliRunner().invoke(check, ["--json", "--inventory", str(inventory), "--node", "node1"],
                           env={"SLURMKIT_FAKE_NVML": str(out)})
    # same verdict from the recording (the host's own checks, e.g. whether a munged runs here, may add to it)
    assert json.loads(r.output)["reason"].split("; ")[0] == "slurmkit: nvidia1@2a:00.0 ecc-unc=2"


def test_cli_hook_prolog_reads_the_slurm_environment(tmp_path, inventory):
    from slurmkit.cli.hook import hook

    envv = {"SLURMKIT_FAKE_NVML": str(fixture(tmp_path, "ecc-uncorrected-gpu1.json")), "SLURMD_NODENAME": "node1",
            "SLURM_JOB_GPUS": "2,3", "SLURM_JOB_ID": "9", "SLURMKIT_STATE_DIR": str(tmp_path / "st")}
    r = CliRunner().invoke(hook, ["prolog", "--inventory", str(inventory)], env=envv)
    assert r.exit_code == 0, r.output
    assert "slurmkit prolog node1 job 9: OK" in r.output
    assert (tmp_path / "st" / "node1" / "last-prolog.json").exists()


def test_cli_clear_xid(tmp_path, inventory):
    from slurmkit.cli.hook import check

    slurm = FakeSlurm()
    run_hook(env(tmp_path, inventory, slurm, "health", nvml="ecc-uncorrected-gpu1.json"))
    r = CliRunner().invoke(check, ["--clear-xid", "--state-dir", str(tmp_path / "state"), "--node", "node1"])
    assert r.exit_code == 0 and "cleared 1 sticky" in r.output


def test_bad_gpus_flag_is_a_one_line_usage_error():
    r = subprocess.run([sys.executable, "-m", "slurmkit", "check", "--gpus", "a,b"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "slurmkit: error: --gpus: expected GPU indices like 0,1 or 0-3, got 'a,b'"


def test_unreadable_slurm_job_gpus_widens_the_checks_instead_of_failing():
    from slurmkit.cli.hook import _job_gpus

    assert _job_gpus("0,2-3") == [0, 2, 3]
    assert _job_gpus("0,x") is None  # from slurmd: check every GPU (a superset of the job's)


# --- a job's GPU scope: exactly the GPUs Slurm gave it (issue 11 item 1) ------------------------------------------

def fake_proc(root: Path, pid: int, *, uid: int, comm: str = "python", job: str | None = None,
              cgroup: str | None = None, cmdline: str | None = None, ppid: int = 1) -> None:
    """A process in a fake /proc: ``job`` puts SLURM_JOB_ID in its environment (root's believed, a user's not),
    ``ppid`` its parent (a fake slurmstepd's pid: a process of that job's step under proctrack/linuxproc)."""
    fake_daemon(root, pid, comm, uid=uid, ppid=ppid)  # stat, status, exe (a root-owned file named ``comm``)
    d = root / str(pid)
    (d / "comm").write_text(comm + "\n")
    (d / "environ").write_bytes(b"PATH=/bin\0" + (f"SLURM_JOB_ID={job}\0".encode() if job else b""))
    (d / "cgroup").write_text(cgroup or "0::/user.slice\n")
    (d / "cmdline").write_bytes((cmdline or comm).encode() + b"\0")


def test_gpu_process_owners_from_proc_alone(tmp_path):
    from slurmkit.health.host import gpu_process_owners

    proc = tmp_path / "proc"
    fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [55.batch]")
    fake_proc(proc, 901, uid=0, comm="slurmstepd", cmdline="slurmstepd: [60+1.0]")  # het job component
    fake_proc(proc, 10, uid=JOB_UID, ppid=900)  # a task of running job 55's slurmstepd (proctrack/linuxproc)
    fake_proc(proc, 11, uid=JOB_UID, cgroup="0::/system.slice/slurmstepd.scope/job_60/step_0/user/task_0\n")
    fake_proc(proc, 12, uid=JOB_UID, job="44")  # a leftover of a job that ended: a user's environ proves nothing
    fake_proc(proc, 14, uid=JOB_UID, job="55")  # claims running job 55 by its environment alone: not 55's
    fake_proc(proc, 15, uid=0, job="44")  # root's environment is root's: a root job's leftover
    fake_proc(proc, 16, uid=JOB_UID, cgroup="0::/user.slice/user-1000.slice/user@1000.service/job_55/x\n")
    # a user's own cgroups (systemd delegates user@UID.service's subtree to that user), named like Slurm's
    fake_proc(proc, 17, uid=JOB_UID, cgroup="0::/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/"
                                            "job_55/step_0\n")
    fake_proc(proc, 13, uid=JOB_UID)  # no evidence at all
    owners = gpu_process_owners(str(proc), {"0": [{"pid": 10}, {"pid": 11}], "1": [{"pid": 12}, {"pid": 13}],
                                            "2": {"error": "NotSupported"}, "3": [{"pid": p} for p in (14, 15, 16, 17)]})
    assert {p: o["job"] for p, o in owners.items()} == {"10": "55", "11": "60", "12": None, "13": None, "14": None,
                                                        "15": "44", "16": None, "17": None}
    assert [p for p, o in owners.items() if o["running"]] == ["10", "11"]
    assert all(o["start"] == 0 for o in owners.values())  # the fake stat's start time: the kill checks it
    assert gpu_process_owners(str(proc), {"0": []}) == {}


def test_health_keeps_a_busy_drain_while_the_ended_jobs_process_is_there(tmp_path, inventory):
    """The prolog drained for a leftover of job 50 (ended: no slurmstepd). The health check re-judges it: no resume
    while the process is there, resume after N passes once it is gone. A running job's process, or one without a
    job while some job runs, is never judged; one without a job on an idle node is a leftover."""
    proc = tmp_path / "proc"
    fake_proc(proc, 4242, uid=1000, job="50")  # its environment says 50: a user's environment is no evidence

    def on_gpu0(*pids):
        return str(fixture(tmp_path, "healthy-h100x8.json", lambda d: d["devices"][0].update(
            compute_processes=[{"pid": p, "used_memory": 1} for p in pids])))
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", fake_nvml=on_gpu0(4242), job_id="51", job_uid=1000,
                       job_gpus=[0]))
    assert rep.exit_code == 1 and slurm.reason == "slurmkit: nvidia0@18:00.0 busy pid 4242"
    slurm.state = "IDLE+DRAIN"
    for _ in range(3):
        rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=on_gpu0(4242)))
        gp = next(r for r in rep.results if r.name == "gpu_procs")
        assert gp.status == Status.FAIL and gp.evidence["gpus"]["0"]["leftovers"] == [{"pid": 4242, "job": None}]
        assert rep.slurm["decision"] == "none" and slurm.reason == "slurmkit: nvidia0@18:00.0 busy pid 4242"
    # job 50's process is gone; job 60 runs here with a process on gpu0 and an unknown one beside it: not judged
    fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [60.batch]")
    fake_proc(proc, 700, uid=1000, ppid=900)
    fake_proc(proc, 701, uid=1000)
    for _ in range(2):
        rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=on_gpu0(700, 701)))
    assert next(r for r in rep.results if r.name == "gpu_procs").status == Status.OK
    assert rep.slurm["decision"] == "resume" and slurm.state == "IDLE"
    # no job runs any more: the process without a job is a leftover
    import shutil
    shutil.rmtree(proc / "900")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=on_gpu0(701)))
    assert rep.exit_code == 1 and slurm.reason == "slurmkit: nvidia0@18:00.0 busy pid 701"


def busy_gpu0(pid: int):
    def edit(d):
        d["devices"][0]["compute_processes"] = [{"pid": pid, "used_memory": 1}]
    return edit


def test_cpu_only_job_prolog_does_not_judge_a_neighbours_gpu(tmp_path, inventory):
    """Job A holds gpu0; job B has no GPUs: B's prolog must neither drain the node nor call Slurm."""
    proc = tmp_path / "proc"
    fake_proc(proc, 4242, uid=JOB_UID)  # A's process, no job evidence: a leftover to a job that owns gpu0
    slurm = FakeSlurm(state="MIXED")
    fx = fixture(tmp_path, "healthy-h100x8.json", busy_gpu0(4242))
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", fake_nvml=str(fx), job_id="2", job_gpus=[]))
    assert rep.exit_code == 0 and slurm.calls == [], rep.reason
    res = {r.name: r for r in rep.results}
    assert res["gpu_procs"].status == Status.SKIP and res["gpu_procs"].summary == "no GPUs in scope"
    # the same process on a GPU the job *was* given is a leftover: busy
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", fake_nvml=str(fx), job_id="3", job_gpus=[0]))
    assert rep.exit_code == 1 and rep.reason == "slurmkit: nvidia0@18:00.0 busy pid 4242"


def test_cli_prolog_without_slurm_job_gpus_has_an_empty_scope(tmp_path, inventory):
    from slurmkit.cli.hook import hook

    fx = fixture(tmp_path, "healthy-h100x8.json", busy_gpu0(os.getpid()))
    envv = {"SLURMKIT_FAKE_NVML": str(fx), "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "9",
            "SLURMKIT_STATE_DIR": str(tmp_path / "st"), "PATH": str(tmp_path / "nobin")}  # no scontrol to call
    r = CliRunner().invoke(hook, ["prolog", "--inventory", str(inventory)], env=envv)
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "st" / "node1" / "last-prolog.json").read_text())
    gp = next(c for c in rec["checks"] if c["check"] == "gpu_procs")
    assert gp["status"] == "SKIP" and rec["slurm"] == {}


def test_prolog_on_a_shared_gpu_leaves_the_running_jobs_processes_alone(tmp_path, inventory):
    """Shards/MPS: job A (running, slurmstepd alive) has a process on gpu0; job B is given a shard of gpu0."""
    proc = tmp_path / "proc"
    fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [55.0]")
    fake_proc(proc, 10, uid=JOB_UID, ppid=900)
    (proc / "meminfo").write_text("MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\n")
    (proc / "333").mkdir(exist_ok=True)  # munged: the daemons check requires Slurm's auth daemon
    fake_daemon(proc, 333, "munged")
    slurm = FakeSlurm(state="MIXED")
    e = env(tmp_path, inventory, slurm, "prolog", fake_nvml=str(fixture(tmp_path, "healthy-h100x8.json",
                                                                         busy_gpu0(10))), job_id="56", job_gpus=[0])
    rep = run_hook(e)
    assert rep.exit_code == 0 and slurm.calls == [], rep.reason
    gp = next(r for r in rep.results if r.name == "gpu_procs")
    assert gp.status == Status.OK and gp.evidence["gpus"]["0"]["running_jobs"] == [{"pid": 10, "job": "55"}]


def test_epilog_never_kills_a_process_of_a_job_that_still_runs(tmp_path, inventory):
    """Same user, shared gpu0: the ending job 77's leftover dies; running job 55's process and an unowned process on
    the GPU job 55 still holds stay (a real process stands behind each fake /proc entry, so a wrong kill shows)."""
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        a, leftover, unowned = (p.pid for p in procs)
        proc = tmp_path / "proc"
        fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [55.batch]")
        fake_proc(proc, a, uid=JOB_UID, ppid=900)
        fake_proc(proc, leftover, uid=JOB_UID, job="77")
        (proc / str(leftover) / "stat").unlink()
        (proc / str(leftover) / "stat").symlink_to(f"/proc/{leftover}/stat")  # shows the kill (a zombie: Z)
        fake_proc(proc, unowned, uid=JOB_UID)
        (proc / "meminfo").write_text("MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\n")
        (proc / "333").mkdir(exist_ok=True)  # munged: the daemons check requires Slurm's auth daemon
        fake_daemon(proc, 333, "munged")

        def edit(d):
            d["devices"][0]["compute_processes"] = [{"pid": a}, {"pid": unowned}]
            d["devices"][1]["compute_processes"] = [{"pid": leftover}]
        slurm = FakeSlurm(jobs=["77", "55"])
        e = env(tmp_path, inventory, slurm, "epilog", fake_nvml=str(fixture(tmp_path, "healthy-h100x8.json", edit)),
                job_id="77", job_uid=JOB_UID, job_user="alice", job_gpus=[0, 1], shm_dir=str(tmp_path / "noshm"))
        rep = run_hook(e)
        procs[1].wait(timeout=5)
        assert procs[1].returncode == -9
        assert procs[0].poll() is None and procs[2].poll() is None
        gp = next(r for r in rep.results if r.name == "gpu_procs")
        assert gp.status == Status.OK and {h["pid"] for h in gp.evidence["held"]} == {a, unowned}
        assert rep.exit_code == 0
        # a CPU-only job of the same user ending next to job 55 touches no GPU process at all
        e = env(tmp_path / "b", inventory, slurm, "epilog", fake_nvml=e.fake_nvml, job_id="78", job_uid=JOB_UID,
                job_user="alice", job_gpus=[], shm_dir=str(tmp_path / "noshm"))
        e.paths = HostPaths(sys_root=e.paths.sys_root, proc_root=str(proc), kmsg=e.paths.kmsg, dev_root="")
        rep = run_hook(e)
        assert procs[0].poll() is None and procs[2].poll() is None and rep.exit_code == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_lost_gpu_outside_the_jobs_scope_stays_a_per_gpu_finding(tmp_path, inventory):
    """Issue 11 item 3: gpu5 lost makes its minor number an error value; a job on gpu0-1 must still get every NVML
    check (no worker crash turning them into SKIP). A GPU whose minor and bus id NVML cannot read keeps its index."""
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="xid79-gpu5.json", job_gpus=[0, 1]))
    res = {r.name: r for r in rep.results}
    assert res["nvml"].status == Status.OK, res["nvml"].summary
    assert res["ecc"].status == Status.OK and res["ecc"].summary == "ecc: 2 GPU(s) ok"
    assert res["gpu_count"].status == Status.FAIL and "gpu5 lost" in res["gpu_count"].findings

    def odd_minor(d):
        d["devices"][5]["minor"] = {"error": "Unknown"}
        d["devices"][2]["ecc_volatile_uncorrected"] = [1, {"error": "Unknown"}]  # values of the wrong shape
        d["devices"][5]["remapped_rows"] = [0, 0]
    rep = run_hook(env(tmp_path / "b", inventory, slurm, "prolog",
                       fake_nvml=str(fixture(tmp_path / "b", "healthy-h100x8.json", odd_minor)), job_gpus=[2, 5]))
    res = {r.name: r for r in rep.results}
    assert res["temperature"].summary == "temperature: 2 GPU(s) ok", res["temperature"].summary
    assert res["ecc"].status == Status.WARN and res["ecc"].findings == ["nvidia2@3a:00.0 ecc TypeError"]
    assert res["remapped_rows"].status == Status.WARN and res["remapped_rows"].findings == ["gpu5@ab:00.0 remapped rows IndexError"]  # minor unreadable
    # and a value the evaluation cannot read is that GPU's finding too
    from slurmkit.health.checks import EvalContext, eval_remapped_rows
    from slurmkit.health.expect import Expectations
    from slurmkit.health.policy import parse_policy

    ctx = EvalContext("health", parse_policy({}).check("remapped_rows"), Expectations(), {})
    v = eval_remapped_rows({"0": {"remapped_rows": [0, 0, 0, 0]}, "1": {"remapped_rows": [0, "x"]}}, ctx)
    assert v.status == Status.WARN and v.findings == ["gpu1 remapped rows unreadable"]


# --- slurmkit's own bookkeeping never fails a job (issue 11 item 2) ------------------------------------------------

def test_state_dir_unusable_never_fails_the_job(tmp_path, inventory):
    """The state dir path is a file (mkdir: ENOTDIR): the checks still run, the prolog passes, the log says why."""
    (tmp_path / "state").write_text("not a directory")
    slurm = FakeSlurm(state="ALLOCATED")
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", job_id="5", job_gpus=[0]))
    assert rep.exit_code == 0 and slurm.calls == []
    res = {r.name: r for r in rep.results}
    assert res["state"].status == Status.WARN and "state dir unusable" in res["state"].summary
    assert res["ecc"].status == Status.OK
    from slurmkit.health.output import log_line

    assert "state: state not saved" in log_line(rep)
    # a real fault still drains (the verdict of the checks decides), even with nowhere to write
    rep = run_hook(env(tmp_path, inventory, slurm, "prolog", nvml="ecc-uncorrected-gpu1.json", job_gpus=[1]))
    assert rep.exit_code == 1 and slurm.reason == "slurmkit: nvidia1@2a:00.0 ecc-unc=2; nvidia1@2a:00.0 xid48; after a GPU reset: slurmkit check --clear-xid"


def test_full_disk_during_outputs_never_fails_the_job(tmp_path, inventory, monkeypatch):
    """Checks pass, then every write fails with ENOSPC: exit 0, a WARN result and a metric in the textfile dir."""
    import errno

    from slurmkit.health import state as st

    slurm = FakeSlurm(state="ALLOCATED")
    run_hook(env(tmp_path, inventory, slurm, "health"))  # the node dir exists, as on a node that ran before
    real_write = st.atomic_write

    def full(path, text, *a, **kw):
        if str(tmp_path / "state") in path:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, text, *a, **kw)

    def full_append(path, rec, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(st, "atomic_write", full)
    monkeypatch.setattr(st, "append_history", full_append)
    tdir = tmp_path / "textfile"
    for hook in ("prolog", "epilog", "health"):
        e = env(tmp_path, inventory, slurm, hook, job_id="6", job_gpus=[0], textfile_dir=str(tdir),
                nvml="healthy-h100x8.json" if hook != "health" else "ecc-uncorrected-gpu1.json")
        rep = run_hook(e)
        res = {r.name: r for r in rep.results}
        assert res["state"].status == Status.WARN and "No space left on device" in res["state"].summary, hook
        assert rep.exit_code == (1 if hook == "health" else 0), hook  # health: the ECC fault, not the disk
        prom = (tdir / f"slurmkit_health_{hook}.prom").read_text()
        assert re.search(r'slurmkit_health_bookkeeping_errors\{node="node1",hook="' + hook + r'"\} [1-9]', prom), prom
    assert slurm.reason == "slurmkit: nvidia1@2a:00.0 ecc-unc=2; nvidia1@2a:00.0 xid48; after a GPU reset: slurmkit check --clear-xid"  # the health check still drained


def test_health_takes_back_slurms_prolog_error_drain_that_followed_our_failed_drain(tmp_path, inventory):
    """The prolog failed a job and its scontrol drain timed out: Slurm drained with its own 'Prolog error'. Our last
    prolog record shows it; the health check keeps the reason current while the fault lasts, resumes after N passes
    once it is gone, and never touches a 'Prolog error' it has no record of causing."""
    hung = FakeSlurm(state="ALLOCATED", hang=True)
    rep = run_hook(env(tmp_path, inventory, hung, "prolog", nvml="remap-failed-gpu2.json", job_gpus=[2]))
    assert rep.exit_code == 1 and "timed out" in rep.slurm["error"]
    slurm = FakeSlurm(state="IDLE+DRAIN", reason="Prolog error")  # what slurmctld did on our exit 1
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert rep.slurm["decision"] == "update-reason" and slurm.reason.startswith("slurmkit: nvidia2@3a:00.0 remap")
    # the same situation with a healed GPU: count passes, then resume
    slurm = FakeSlurm(state="IDLE+DRAIN", reason="Prolog error")
    fx = str(fixture(tmp_path, "healthy-h100x8.json", lambda d: d.update(boot_id="after-reset")))
    rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=fx))
    assert rep.slurm["passes"] == 1 and "claimed" in rep.slurm and "DRAIN" in slurm.state
    rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=fx))
    assert rep.slurm["decision"] == "resume" and slurm.state == "IDLE"
    # a passing last prolog (or none at all): 'Prolog error' is someone else's business
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", fake_nvml=fx, job_gpus=[0]))
    assert rep.exit_code == 0
    slurm = FakeSlurm(state="IDLE+DRAIN", reason="Prolog error")
    for _ in range(3):
        rep = run_hook(env(tmp_path, inventory, slurm, "health", fake_nvml=fx))
    assert slurm.reason == "Prolog error" and "drained by someone else" in rep.slurm["why"]


def test_claim_on_slurms_prolog_error_survives_another_jobs_passing_prolog(tmp_path, inventory):
    """Job 10's prolog fails on gpu2 and its drain call hangs; job 11's prolog on gpu0 passes right after (and
    overwrites last-prolog.json). Slurm's 'Prolog error' drain is still ours: the health check puts our reason on it.
    Once the node is no longer drained with Slurm's reason the claim is gone."""
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="MIXED", hang=True), "prolog",
                       nvml="remap-failed-gpu2.json", job_id="10", job_gpus=[2]))
    assert rep.exit_code == 1 and rep.slurm["done"].startswith("nothing")
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="MIXED"), "prolog", nvml="remap-failed-gpu2.json",
                       job_id="11", job_gpus=[0]))
    assert rep.exit_code == 0
    slurm = FakeSlurm(state="MIXED+DRAIN", reason="Prolog error")
    rep = run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert rep.slurm["decision"] == "update-reason" and slurm.reason.startswith("slurmkit: nvidia2@3a:00.0 remap"), rep.slurm
    claim = tmp_path / "state" / "node1" / "claim-prolog.json"
    # our reason is on the node now: the claim is not needed any more (past the grace) and goes
    rec = json.loads(claim.read_text())
    rec["at"] -= 3600
    claim.write_text(json.dumps(rec))
    run_hook(env(tmp_path, inventory, slurm, "health", nvml="remap-failed-gpu2.json"))
    assert not claim.exists()


def test_cli_internal_error_leaves_a_record_the_health_check_can_read(tmp_path, inventory, monkeypatch):
    from slurmkit.cli.hook import hook
    from slurmkit.health import hooks as hooks_mod

    def boom(env):
        raise RuntimeError("bug")
    monkeypatch.setattr(hooks_mod, "run_hook", boom)
    envv = {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "9", "SLURMKIT_STATE_DIR": str(tmp_path / "st")}
    r = CliRunner().invoke(hook, ["prolog", "--inventory", str(inventory)], env=envv)
    assert r.exit_code == 1 and "internal error: RuntimeError: bug" in r.output
    rec = json.loads((tmp_path / "st" / "node1" / "last-prolog.json").read_text())
    assert rec["exit_code"] == 1 and rec["job_id"] == "9"
    from slurmkit.health.hooks import slurm_drain_was_ours

    node = NodeState("node1", "idle", frozenset({"DRAIN"}), "Prolog error")
    assert slurm_drain_was_ours(node, str(tmp_path / "st" / "node1"))
    assert not slurm_drain_was_ours(NodeState("node1", "idle", frozenset({"DRAIN"}), "Epilog error"),
                                    str(tmp_path / "st" / "node1"))


# --- the hot path: no click, the NVML worker forked first (issue 11 speed) -------------------------------------

def test_fast_hook_argument_parsing_falls_back_to_click_for_anything_else():
    from slurmkit.cli.hookrun import parse_fast

    assert parse_fast(["--inventory", "/etc/slurm/slurmkit.yaml", "--textfile-dir=/var/lib/ne"]) == {
        "inventory": "/etc/slurm/slurmkit.yaml", "state_dir": None, "policy_file": None, "textfile_dir": "/var/lib/ne"}
    for argv in (["--help"], ["--inventory"], ["--inventory="], ["--bogus", "x"], ["positional"]):
        assert parse_fast(argv) is None, argv


def test_hook_via_the_console_entry_point_does_not_import_click(tmp_path, inventory):
    code = ("import sys, runpy; sys.argv = ['slurmkit', 'hook', 'prolog', '--inventory', sys.argv[1]]\n"
            "try:\n    runpy.run_module('slurmkit.cli.main', run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code, 'click' in sys.modules)\n")
    envv = {**os.environ, "SLURMKIT_FAKE_NVML": str(fixture(tmp_path, "healthy-h100x8.json")),
            "SLURMD_NODENAME": "node1", "SLURM_JOB_GPUS": "0", "SLURMKIT_STATE_DIR": str(tmp_path / "st")}
    r = subprocess.run([sys.executable, "-c", code, str(inventory)], env=envv, capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "exit 0 False", r.stdout + r.stderr
    assert json.loads((tmp_path / "st" / "node1" / "last-prolog.json").read_text())["exit_code"] == 0


def test_preforked_worker_is_instructed_or_abandoned(tmp_path):
    import time

    from slurmkit.health.nvmlworker import Worker

    fx = str(NVML / "ecc-uncorrected-gpu1.json")
    w = Worker.prefork(fx, "node1")
    time.sleep(0.05)  # the hook loading its inventory meanwhile
    g = w.instruct(["ecc"], frozenset({1, 2}), {"init": 5.0, "ecc": 5.0}, time.monotonic() + 10).collect()
    assert g.data["init"]["selected"] == [1, 2] and g.data["ecc"]["1"]["ecc_volatile_uncorrected"] == 2
    assert set(g.data["ecc"]) == {"1", "2"}
    assert g.durations["init"] == g.data["init"]["init_s"] < 0.05  # NVML's own time, not the wait for instructions
    w = Worker.prefork(fx, "node1")
    w.abandon()
    # killed: reaped by abandon() (its bounded ~20 ms wait), or -- on a loaded machine, where the SIGKILLed child
    # took longer to die -- dead and reaped here; never left running
    end = time.monotonic() + 5
    while True:
        try:
            pid, _status = os.waitpid(w.pid, os.WNOHANG)
        except ChildProcessError:
            break  # abandon() reaped it
        if pid:
            break  # it died after abandon() stopped waiting
        assert time.monotonic() < end, "the abandoned worker still runs 5 s after abandon()"
        time.sleep(0.01)
    # a hang in nvmlInit is still caught by the init deadline counted from the fork
    w = Worker.prefork(str(NVML / "nvml-hang-init.json"), "node1")
    g = w.instruct(["ecc"], None, {"init": 0.5, "ecc": 0.5}, time.monotonic() + 5).collect()
    assert g.stalled == "init" and 0.4 < g.stalled_after_s < 2


def test_nvml_duration_is_the_time_the_hang_took(tmp_path, inventory):
    inv = yaml.safe_load(inventory.read_text())
    inv["hooks"]["checks"].update(budget_s=2.0, scontrol_timeout_s=0.3, nvml={"timeout_s": 1.0})
    inventory.write_text(yaml.safe_dump(inv))
    rep = run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", nvml="nvml-hang-init.json",
                       job_gpus=[0]))
    nvml = next(r for r in rep.results if r.name == "nvml")
    assert nvml.status == Status.FAIL and nvml.duration_s >= 0.9  # was 0.00007 s for a hang that took seconds
    # the hint for the usual cause on a healthy node (issue 11 item 13): no persistence daemon in this /proc
    assert "nvidia-persistenced is not running" in nvml.summary and nvml.evidence["persistenced"] is False


# --- history rotation under a lock (issue 11 item 8) ---------------------------------------------------------

def test_concurrent_history_rotation_never_throws_away_the_rotated_file(tmp_path, monkeypatch):
    """Writer B runs while writer A is between its size check and its rename. Before: both rotated, B's rename put
    B's fresh file over A's .1 and every rotated record was lost. Now the check and the rename are one locked step."""
    import threading

    from slurmkit.health import state as st

    monkeypatch.setattr(st, "MAX_HISTORY_BYTES", 1000)
    hist = tmp_path / "history.jsonl"
    old = [{"n": i, "pad": "x" * 40} for i in range(30)]
    hist.write_text("".join(json.dumps(r) + "\n" for r in old))  # > 1000 bytes: the next writer rotates
    real_getsize = os.path.getsize
    b = threading.Thread(target=st.append_history, args=(str(hist), {"writer": "B"}))
    fired = []

    def getsize(path):
        size = real_getsize(path)
        if not fired:  # writer A has just seen the full file: let writer B run now
            fired.append(1)
            b.start()
            b.join(0.3)  # under the lock B waits for A; without it B rotates and appends right here
        return size
    monkeypatch.setattr(st.os.path, "getsize", getsize)
    st.append_history(str(hist), {"writer": "A"})
    b.join(5)
    rotated = [json.loads(x) for x in (tmp_path / "history.jsonl.1").read_text().splitlines()]
    current = [json.loads(x) for x in hist.read_text().splitlines()]
    assert [r["n"] for r in rotated] == list(range(30))  # the rotated records survive
    assert current == [{"writer": "A"}, {"writer": "B"}]


# --- `slurmkit check` runs what the hooks run (issue 11 item 6) ----------------------------------------------

def test_check_finds_the_inventory_like_the_hooks_and_honours_every_flag(tmp_path, inventory):
    from slurmkit.cli.hook import check

    fx = fixture(tmp_path, "xid79-gpu5.json")
    base = {"SLURMKIT_FAKE_NVML": str(fx), "SLURMD_NODENAME": "node1", "SLURMKIT_INVENTORY": "",
            "SLURM_CONF": ""}
    # beside $SLURM_CONF (where `conf generate` puts slurmkit.yaml next to the wrappers): 7 of 8 GPUs is a FAIL
    (inventory.parent / "slurm.conf").write_text("ClusterName=x\n")
    r = CliRunner().invoke(check, ["--state-dir", str(tmp_path / "s"), "--json"],
                           env={**base, "SLURM_CONF": str(inventory.parent / "slurm.conf")})
    rec = json.loads(r.output)
    gc = next(c for c in rec["checks"] if c["check"] == "gpu_count")
    assert gc["status"] == "FAIL" and gc["summary"].startswith("gpu_count 7/8"), gc
    # $SLURMKIT_INVENTORY first
    r = CliRunner().invoke(check, ["--state-dir", str(tmp_path / "s"), "--json", "--gpus", "0,1",
                                   "--textfile-dir", str(tmp_path / "prom")],
                           env={**base, "SLURMKIT_INVENTORY": str(inventory)})
    rec = json.loads(r.output)
    ecc = next(c for c in rec["checks"] if c["check"] == "ecc")
    assert set(ecc["evidence"]["gpus"]) == {"0", "1"}  # --gpus scopes the per-GPU checks like SLURM_JOB_GPUS
    assert (tmp_path / "prom" / "slurmkit_health_check.prom").exists()  # --textfile-dir: the metrics only
    assert not (tmp_path / "s").exists()  # still read-only otherwise
    xid = next(c for c in rec["checks"] if c["check"] == "xid")
    assert "since the last run" not in xid["summary"]
    r = CliRunner().invoke(check, ["--json"], env={**base, "SLURMKIT_INVENTORY": str(tmp_path / "missing.yaml")})
    from slurmkit.errors import UsageError

    assert isinstance(r.exception, UsageError) and "$SLURMKIT_INVENTORY" in str(r.exception)  # exit 2 at the edge


def test_textfile_dir_is_an_inventory_setting(tmp_path, inventory):
    inv = yaml.safe_load(inventory.read_text())
    inv["hooks"]["checks"]["textfile_dir"] = str(tmp_path / "node-exporter")
    inventory.write_text(yaml.safe_dump(inv))
    run_hook(env(tmp_path, inventory, FakeSlurm(state="ALLOCATED"), "prolog", job_gpus=[0]))
    prom = (tmp_path / "node-exporter" / "slurmkit_health_prolog.prom").read_text()
    assert 'check="xid",state="ok"} 1' in prom and "slurmkit_health_nvml_init_seconds{" in prom
    assert not (tmp_path / "state" / "node1" / "slurmkit_health_prolog.prom").exists()
    from slurmkit.errors import InventoryError
    from slurmkit.health.policy import parse_policy

    with pytest.raises(InventoryError, match="hooks.checks.textfile_dir"):
        parse_policy({"textfile_dir": "relative/dir"})


def test_check_takes_no_state_lock_and_its_help_says_what_it_writes(tmp_path, inventory):
    """Read-only `check` on a node with a state dir: it reads the XID cursor and counter snapshot but creates no
    lock file (nor anything else) there, and without --textfile-dir writes no textfile, as its help says."""
    from slurmkit.cli.hook import check

    ndir = tmp_path / "s" / "node1"
    ndir.mkdir(parents=True)
    envv = {"SLURMKIT_FAKE_NVML": str(fixture(tmp_path, "healthy-h100x8.json")), "SLURMD_NODENAME": "node1",
            "SLURMKIT_INVENTORY": str(inventory)}
    r = CliRunner().invoke(check, ["--state-dir", str(tmp_path / "s"), "--json"], env=envv)
    rec = json.loads(r.output)
    assert {c["check"] for c in rec["checks"]} >= {"xid", "pcie"}
    assert sorted(os.listdir(ndir)) == []
    help_text = " ".join(CliRunner().invoke(check, ["--help"]).output.split())
    assert "without this flag check writes no textfile" in help_text
