"""`slurmkit check --active` (issue 23 item 7): the torch GEMM / memory-bandwidth stage on the fake NVML with torch on
the CPU (a slow board found against its peers), the model floors, and dcgmi diag's results through a stub dcgmi."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from slurmkit.health.active import GpuResult, judge, judge_h2d, model_floor, pcie_floor, run_dcgm, run_h2d
from slurmkit.health.hooks import HookEnv, run_active
from slurmkit.health.result import Action, Status

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"
torch = pytest.importorskip("torch", reason="the active stage's torch path needs torch (in the dev venv)")


def fixture(tmp: Path, slow: dict[int, float] | None = None) -> str:
    d = json.loads((NVML / "healthy-h100x8.json").read_text())
    for i, f in (slow or {}).items():
        d["devices"][i]["active_slowdown"] = f
    p = tmp / "nvml" / "node1.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(d))
    return str(p.parent)


def test_active_finds_the_slow_gpu_among_its_peers(tmp_path):
    env = HookEnv(hook="check", node="node1", state_dir=str(tmp_path / "state"), fake_nvml=fixture(tmp_path, {3: 0.5}),
                  textfile_dir=str(tmp_path / "prom"))
    rep = run_active(env, budget_s=3)
    res = {r.name: r for r in rep.results}
    assert rep.exit_code == 1 and rep.action == Action.DRAIN
    for name, what in (("active_gemm", "gemm"), ("active_membw", "membw")):
        assert res[name].status == Status.FAIL and len(res[name].findings) == 1, res[name].summary
        assert res[name].findings[0].startswith(f"nvidia3@5d:00.0 {what} ") and "<85% of peers" in res[name].findings[0]
        assert "peers only" in res[name].evidence["floor"]
    rec = json.loads((tmp_path / "state" / "node1" / "last-active.json").read_text())
    assert rec["hook"] == "active" and rec["reason"].startswith("slurmkit: nvidia3@5d:00.0 "), rec["reason"]
    assert rec["gpus"][3]["serial"] == "1652322000003"
    prom = (tmp_path / "prom" / "slurmkit_health_active.prom").read_text()
    assert 'check="active_gemm",state="fail"} 1' in prom


def test_active_healthy_node_passes(tmp_path):
    env = HookEnv(hook="check", node="node1", state_dir=str(tmp_path / "state"), fake_nvml=fixture(tmp_path))
    rep = run_active(env, budget_s=3)
    assert rep.exit_code == 0, [r.summary for r in rep.results]
    assert {r.name: r.status for r in rep.results} == {"active_gemm": Status.OK, "active_membw": Status.OK,
                                                       "active_app_clocks": Status.OK, "active_h2d": Status.SKIP}
    res = {r.name: r for r in rep.results}
    assert res["active_h2d"].summary.startswith("simulated node")  # a CPU has no host-to-GPU link: never a pass
    assert res["active_app_clocks"].summary == "8 GPU(s) at their maximum application clocks"
    assert any("torch" in n and "CPU" in n for n in rep.notes)


def test_floors_from_the_model_and_peers():
    assert model_floor("NVIDIA H200") == (494.5, 2400.0)
    assert model_floor("NVIDIA H100 80GB HBM3") == (494.5, 1675.0)
    assert model_floor("NVIDIA H100 PCIe") == (378.0, 1000.0)
    assert model_floor("Tesla T4") is None
    rs = [GpuResult(i, f"nvidia{i}@x", "NVIDIA H200", 700.0, 4000.0) for i in range(4)]
    rs[1].gemm_tflops = 400.0  # below the model's floor (and its peers)
    rs[2].membw_gbs = 3000.0  # above the floor, below 85% of its peers
    rs[3].error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    gemm, bw = judge(rs, 85.0, use_floor=True)
    assert gemm.findings == ["nvidia1@x gemm 400<494.5TFLOPS floor", "nvidia3@x gemm error"]
    assert bw.findings == ["nvidia2@x membw 3000<85% of peers 4000GB/s", "nvidia3@x membw error"]
    assert gemm.evidence["errors"]["nvidia3@x"].startswith("RuntimeError")


def stub_dcgmi(tmp: Path, doc: object, rc: int = 0, sleep: float = 0) -> str:
    p = tmp / "dcgmi"
    p.write_text(f"#!{sys.executable}\nimport json, sys, time\ntime.sleep({sleep})\n"
                 f"assert sys.argv[1:4] == ['diag', '-r', '2'] and sys.argv[4] == '-j', sys.argv\n"
                 f"print(json.dumps({json.dumps(doc)!r} and json.loads({json.dumps(doc)!r})))\nsys.exit({rc})\n")
    p.chmod(0o755)
    return str(p)


DCGM_DOC = {"DCGM GPU Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"gpu_id": "0", "status": "Pass"},
                                                                          {"gpu_id": "1", "status": "Pass"}]}]},
    {"category": "Hardware", "tests": [{"name": "Memory", "results": [
        {"gpu_id": "0", "status": "Pass"},
        {"gpu_id": "1", "status": "Fail", "warnings": "DCGM_FR_FAULTY_MEMORY: uncorrectable ECC error"}]}]}]}}


def test_dcgm_diag_results_per_gpu(tmp_path):
    r = run_dcgm(stub_dcgmi(tmp_path, DCGM_DOC, rc=226), 2, 30)
    assert r.status == Status.FAIL and r.findings == ["gpu1 Memory fail"] and r.action == Action.DRAIN
    assert len(r.evidence["results"]) == 4
    ok = json.loads(json.dumps(DCGM_DOC).replace('"Fail"', '"Pass"'))
    assert run_dcgm(stub_dcgmi(tmp_path, ok), 2, 30).status == Status.OK
    r = run_dcgm(stub_dcgmi(tmp_path, DCGM_DOC, sleep=5), 2, 0.5)
    assert r.status == Status.FAIL and r.findings == ["dcgm diag timeout"]


def test_cli_check_active(tmp_path):
    import subprocess

    env = {**os.environ, "SLURMKIT_FAKE_NVML": fixture(tmp_path, {5: 0.4}), "SLURMD_NODENAME": "node1"}
    p = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "check", "--active", "--budget", "3",
                        "--state-dir", str(tmp_path / "state"), "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1, p.stderr
    rec = json.loads(p.stdout)
    assert rec["reason"].startswith("slurmkit: nvidia5@ab:00.0 ") and "nvidia4" not in rec["reason"], rec["reason"]


def test_cuda_device_found_by_pci_bus_id_not_by_order():
    """CUDA orders devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID: the stage maps NVML's GPU by bus id."""
    from types import SimpleNamespace as NS

    from slurmkit.health.active import _cuda_index

    props = [NS(pci_domain_id=0, pci_bus_id=0x9A, pci_device_id=0), NS(pci_domain_id=0, pci_bus_id=0x18, pci_device_id=0)]
    fake = NS(cuda=NS(device_count=lambda: 2, get_device_properties=lambda i: props[i]))
    assert _cuda_index(fake, "00000000:18:00.0", 7) == 1 and _cuda_index(fake, "00000000:9A:00.0", 7) == 0
    assert _cuda_index(fake, "00000000:AB:00.0", 7) == 7


# --- application clocks and host-to-GPU bandwidth (issue 35 item 5) -------------------------------------------

def test_application_clocks_below_the_maximum_warn(tmp_path):
    src = fixture(tmp_path)
    p = Path(src) / "node1.json"
    d = json.loads(p.read_text())
    d["devices"][2]["app_clocks_mhz"] = {"graphics": 1410, "memory": 2619}  # nvidia-smi -ac 2619,1410 left behind
    d["devices"][5]["app_clocks_mhz"] = {"error": "NotSupported"}
    p.write_text(json.dumps(d))
    rep = run_active(HookEnv(hook="check", node="node1", state_dir=str(tmp_path / "state"), fake_nvml=src), budget_s=3)
    r = {r.name: r for r in rep.results}["active_app_clocks"]
    assert r.status == Status.WARN and r.action == Action.WARN and rep.exit_code == 0  # configuration, not a fault
    assert r.findings == ["nvidia2@3a:00.0 app clocks graphics 1410<1980MHz"], r.findings
    assert r.evidence["gpus"]["nvidia0@18:00.0"]["graphics"] == {"app_mhz": 1980, "max_mhz": 1980}
    for dev in d["devices"]:
        dev["app_clocks_mhz"] = {"error": "NotSupported"}
    p.write_text(json.dumps(d))
    rep = run_active(HookEnv(hook="check", node="node1", state_dir=str(tmp_path / "state"), fake_nvml=src), budget_s=3)
    assert {r.name: r for r in rep.results}["active_app_clocks"].status == Status.SKIP


def test_host_to_gpu_floor_from_the_pcie_link():
    assert pcie_floor({"pcie_gen": [1, 5, 5], "pcie_width": [16, 16]}) == 31.504  # Gen5 x16, idle at gen1
    assert pcie_floor({"pcie_gen": [4, 4, 5], "pcie_width": [16, 16]}) == 15.752  # a Gen5 GPU in a Gen4 slot
    assert pcie_floor({"pcie_gen": [{"error": "NotSupported"}] * 3, "pcie_width": [16, 16]}) is None
    assert pcie_floor(None) is None


def test_host_to_gpu_judged_against_the_floor_and_the_peers():
    vals = {f"g{i}": {"h2d": 52.0, "d2h": 51.0} for i in range(4)}
    floors = {f"g{i}": 31.5 for i in range(4)}
    assert judge_h2d(vals, {}, floors, 85).status == Status.OK
    vals["g1"] = {"h2d": 24.0, "d2h": 50.0}  # trained down to x8, or a retimer fault
    vals["g2"] = {"h2d": 52.0, "d2h": 40.0}  # above the floor, below its peers
    del vals["g3"]  # its copy raised: no value, a finding
    r = judge_h2d(vals, {"g3": "RuntimeError: CUDA error: unspecified launch failure"}, floors, 85)
    assert r.status == Status.FAIL and r.action == Action.DRAIN
    assert r.findings == ["g3 h2d error", "g1 h2d 24<31.5GB/s floor", "g2 d2h 40<85% of peers 50.5GB/s"], r.findings


def test_host_to_gpu_is_measured_only_where_cuda_runs():
    dev = [{"index": 0, "label": "nvidia0@18:00.0", "pci_bus_id": "00000000:18:00.0"}]
    r = run_h2d(dev, {"0": {"pcie_gen": [5, 5, 5], "pcie_width": [16, 16]}}, 2.0, 85, simulated=False)
    if torch.cuda.is_available():  # a GPU machine: a real measurement, judged
        assert r.status in (Status.OK, Status.FAIL) and r.evidence["values"]["nvidia0@18:00.0"]["h2d"] > 0
    else:
        assert r.status == Status.SKIP and "no CUDA device" in r.summary, r.summary
