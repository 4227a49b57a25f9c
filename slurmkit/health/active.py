"""The active diagnostic stage (`slurmkit check --active`): for after maintenance and for suspicious nodes, never in
every prolog (minutes, not milliseconds: DCGM's own guidance puts level 2 at about two minutes).

Where ``dcgmi`` is installed it runs ``dcgmi diag -r <level> -j`` (level 1-2) and reports each test's per-GPU result.
Otherwise, where torch sees the GPUs, a short test per GPU: dense bf16 GEMM throughput (TFLOPS) and device-memory
copy bandwidth (GB/s), each judged two ways:

- against the GPU model's floor (``FLOORS``: a fraction of the datasheet's dense BF16 and HBM figures; a GPU below
  it is slow whatever its neighbours do);
- against the node's other GPUs: below ``peer_pct`` of their median is a FAIL (one slow board among equals: a
  throttled, mis-seated or degraded GPU, which a floor set for the model can miss).

On a fake-NVML node (tests, the lab) the same torch code runs on the CPU once per fake GPU (small sizes), a fixture
device's ``active_slowdown`` scales its numbers (a slow board to find), and only the peer rule judges: a CPU has no
GPU model's floor. Results are ``CheckResult``s (record, metrics), like every check.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from slurmkit.health.result import Action, CheckResult, Status

# Datasheet dense BF16 TFLOPS and HBM bandwidth GB/s (NVIDIA H100, H200, A100, L40S, B200 datasheets), matched on
# the NVML name; the floor is FLOOR_FRACTION of each. A healthy GPU reaches ~70-80% of the BF16 peak on a large
# square GEMM and ~85-90% of HBM bandwidth on a device copy; half of either is a broken or badly throttled board.
DATASHEET: tuple[tuple[str, float, float], ...] = (
    ("h200", 989.0, 4800.0),
    ("h100 nvl", 835.0, 3900.0),
    ("h100 pcie", 756.0, 2000.0),
    ("h100", 989.0, 3350.0),  # SXM5
    ("gh200", 989.0, 4000.0),
    ("b200", 2250.0, 8000.0),
    ("a100-sxm4-80gb", 312.0, 2039.0),
    ("a100 80gb pcie", 312.0, 1935.0),
    ("a100", 312.0, 1555.0),
    ("l40s", 362.0, 864.0),
)
FLOOR_FRACTION = 0.5


def model_floor(name: str) -> tuple[float, float] | None:
    """(GEMM TFLOPS, copy GB/s) floors for an NVML device name, None for a model not in the table."""
    n = name.lower()
    for key, tflops, gbs in DATASHEET:
        if key in n:
            return tflops * FLOOR_FRACTION, gbs * FLOOR_FRACTION
    return None


@dataclass
class GpuResult:
    index: int
    label: str
    name: str
    gemm_tflops: float | None = None
    membw_gbs: float | None = None
    error: str | None = None


def _repeat(op, args, sync, seconds: float) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Run ``op(*args)`` once to warm up, then repeatedly for ``seconds`` (synchronising every 4 calls):
    (calls, seconds)."""
    op(*args)
    sync()
    iters, t0 = 0, time.perf_counter()
    while True:
        op(*args)
        iters += 1
        if iters % 4 == 0:
            sync()
            if time.perf_counter() - t0 >= seconds:
                break
    return iters, time.perf_counter() - t0


def _torch_device_test(torch: Any, device: Any, gemm_n: int, bw_mb: int, seconds: float,
                       dtype: Any = None) -> tuple[float, float]:
    """(TFLOPS, GB/s) on one device: bf16 n x n matmuls, then copies of a ``bw_mb`` MiB buffer, each timed for about
    ``seconds`` after a warm-up (cuda events would be finer; a synchronize around a timed loop is enough here)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    dtype = dtype or torch.bfloat16
    a = torch.randn(gemm_n, gemm_n, device=device, dtype=dtype)
    b = torch.randn(gemm_n, gemm_n, device=device, dtype=dtype)
    iters, el = _repeat(torch.matmul, (a, b), sync, seconds)
    tflops = 2 * gemm_n ** 3 * iters / el / 1e12
    del a, b
    n = bw_mb * (1 << 20) // 4
    x = torch.empty(n, device=device, dtype=torch.float32).fill_(1.0)
    y = torch.empty_like(x)
    iters, el = _repeat(y.copy_, (x,), sync, seconds)
    gbs = 2 * x.numel() * 4 * iters / el / 1e9  # a copy reads and writes every byte
    del x, y
    return tflops, gbs


def run_torch(devices: list[dict[str, Any]], budget_s: float, simulated: bool) -> list[GpuResult]:
    """One test per GPU in ``devices`` (NVML init records: index, minor, pci_bus_id, name, label)."""
    import torch

    out: list[GpuResult] = []
    per = max(0.05, budget_s / max(1, len(devices)) / 2.5)  # two timed loops + warm-up per GPU within the budget
    cpu: tuple[float, float] | None = None
    for d in devices:
        r = GpuResult(index=int(d["index"]), label=str(d.get("label") or f"gpu{d['index']}"), name=str(d.get("name")))
        try:
            if simulated:
                # one CPU stands in for every fake GPU: measure it once (the same code path, float32 as the CPU's
                # native type), then scale by each fixture device's slowdown, so the peer rule sees no CPU noise
                if cpu is None:
                    cpu = _torch_device_test(torch, torch.device("cpu"), 256, 16, min(per, 0.2), torch.float32)
                slow = float(d.get("active_slowdown") or 1.0)
                tflops, gbs = cpu[0] * slow, cpu[1] * slow
            else:
                # CUDA's device order is not NVML's unless CUDA_DEVICE_ORDER=PCI_BUS_ID; match by bus id
                cuda_idx = _cuda_index(torch, str(d.get("pci_bus_id") or ""), int(d["index"]))
                tflops, gbs = _torch_device_test(torch, torch.device("cuda", cuda_idx), 8192, 1024, per)
            r.gemm_tflops, r.membw_gbs = float(f"{tflops:.6g}"), float(f"{gbs:.6g}")  # a CPU's are tiny
        except Exception as exc:  # an OOM, a CUDA error on a sick GPU: that GPU's finding
            r.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        out.append(r)
    return out


def _cuda_index(torch: Any, bus: str, fallback: int) -> int:
    from slurmkit.health.gpuid import norm_bus

    want = norm_bus(bus)
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        # torch's cudaDeviceProp fields are integers: pci_domain_id, pci_bus_id, pci_device_id
        dom, b, dev = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
        if all(isinstance(x, int) for x in (dom, b, dev)) and norm_bus(f"{dom:04x}:{b:02x}:{dev:02x}.0") == want:
            return i
    return fallback


def judge(results: list[GpuResult], peer_pct: float, use_floor: bool) -> list[CheckResult]:
    """Two results, ``active_gemm`` and ``active_membw``, each per GPU against the floor and the peers."""
    out = []
    for key, unit, check in (("gemm_tflops", "TFLOPS", "active_gemm"), ("membw_gbs", "GB/s", "active_membw")):
        vals = {r.label: getattr(r, key) for r in results if getattr(r, key) is not None}
        findings: list[str] = []
        ev: dict[str, Any] = {"unit": unit, "values": vals, "peer_pct": peer_pct}
        for r in results:
            if r.error:
                findings.append(f"{r.label} {check.split('_')[1]} error")
                continue
            v = getattr(r, key)
            floor = model_floor(r.name) if use_floor else None
            if floor is not None:
                f = floor[0] if key == "gemm_tflops" else floor[1]
                ev.setdefault("floors", {})[r.label] = f
                if v < f:
                    findings.append(f"{r.label} {check.split('_')[1]} {v:.4g}<{f:.4g}{unit} floor")
                    continue
            others = [x for lab, x in vals.items() if lab != r.label]
            if len(others) >= 1:
                med = statistics.median(others)
                if med > 0 and v < med * peer_pct / 100:
                    findings.append(f"{r.label} {check.split('_')[1]} {v:.4g}<{peer_pct:g}% of peers {med:.4g}{unit}")
        if not use_floor:
            ev["floor"] = "none on a simulated node (torch on the CPU): peers only"
        if findings:
            out.append(CheckResult(check, Status.FAIL, "; ".join(findings), findings, ev, action=Action.DRAIN))
        elif vals:
            lo, hi = min(vals.values()), max(vals.values())
            out.append(CheckResult(check, Status.OK, f"{len(vals)} GPU(s) {lo:.4g}-{hi:.4g} {unit}", [], ev))
        else:
            out.append(CheckResult(check, Status.SKIP, "no GPU measured", [], ev))
    errs = [r for r in results if r.error]
    if errs:
        out[0].evidence["errors"] = {r.label: r.error for r in errs}
    return out


# --- DCGM -----------------------------------------------------------------------------------------------------

def dcgmi_path() -> str | None:
    return shutil.which("dcgmi")


def run_dcgm(dcgmi: str, level: int, budget_s: float) -> CheckResult:
    """``dcgmi diag -r <level> -j``: each test's per-GPU result. DCGM's JSON has no published stable schema (its docs
    say so), so this reads it loosely: any object naming a test and carrying per-GPU results with a status."""
    argv = [dcgmi, "diag", "-r", str(level), "-j"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=budget_s)
    except subprocess.TimeoutExpired:
        return CheckResult("dcgm_diag", Status.FAIL, f"dcgmi diag -r {level} ran past {budget_s:g}s",
                           ["dcgm diag timeout"], {"argv": argv}, action=Action.DRAIN,
                           duration_s=time.monotonic() - t0)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return CheckResult("dcgm_diag", Status.WARN, f"dcgmi diag exit {p.returncode}, output not JSON: "
                           f"{(p.stderr or p.stdout).strip()[:160]}", ["dcgm diag unreadable"], {"argv": argv},
                           action=Action.WARN, duration_s=time.monotonic() - t0)
    rows = list(_dcgm_rows(doc))
    fails = [f"gpu{g} {t} {s.lower()}" for t, g, s, _ in rows if s.lower() in ("fail", "failed")]
    warns = [f"gpu{g} {t} warn" for t, g, s, _ in rows if s.lower() in ("warn", "warning")]
    ev = {"argv": argv, "exit_code": p.returncode,
          "results": [{"test": t, "gpu": g, "status": s, "info": i} for t, g, s, i in rows]}
    took = time.monotonic() - t0
    if fails or (p.returncode != 0 and not rows):
        findings = fails or [f"dcgm diag exit {p.returncode}"]
        return CheckResult("dcgm_diag", Status.FAIL, "; ".join(findings), findings, ev, action=Action.DRAIN,
                           duration_s=took)
    if warns:
        return CheckResult("dcgm_diag", Status.WARN, "; ".join(warns), warns, ev, action=Action.WARN, duration_s=took)
    return CheckResult("dcgm_diag", Status.OK, f"dcgmi diag -r {level}: {len(rows)} result(s) passed", [], ev,
                       duration_s=took)


def _dcgm_rows(doc: Any, test: str = "") -> Any:
    """(test, gpu, status, info) from DCGM's diag JSON (2.x: category/tests/results with gpu_id and status; 3.x/4.x:
    tests with name and results carrying entity_id)."""
    if isinstance(doc, dict):
        name = doc.get("name") or doc.get("test_name") or test
        for key in ("results", "tests", "test_categories", "DCGM GPU Diagnostic", "category"):
            v = doc.get(key)
            if isinstance(v, list):
                for item in v:
                    if isinstance(item, dict) and ("status" in item or "result" in item) and \
                            any(k in item for k in ("gpu_id", "entity_id", "gpu_ids")):
                        gpu = item.get("gpu_id", item.get("entity_id", item.get("gpu_ids")))
                        info = item.get("info") or item.get("warnings") or item.get("error") or ""
                        yield str(name), gpu, str(item.get("status", item.get("result"))), info
                    else:
                        yield from _dcgm_rows(item, str(name))
            elif isinstance(v, dict):
                yield from _dcgm_rows(v, str(name))
    elif isinstance(doc, list):
        for item in doc:
            yield from _dcgm_rows(item, test)


# --- application clocks and host-to-GPU bandwidth (issue 35 item 5: AzNHC's check_app_gpu_clocks, check_gpu_bw) ----

def judge_app_clocks(data: dict[str, Any], labels: dict[str, str]) -> CheckResult:
    """Application clocks below the board's maximum (NVML, the ``app_clocks`` probe): the GPU runs a job's kernels
    at the lower clock. AzNHC's check_app_gpu_clocks sets them to the maximum itself; slurmkit reports (a WARN: a
    configuration to fix with ``nvidia-smi -rac`` or ``-ac``, not a broken board) and changes nothing."""
    findings: list[str] = []
    ev: dict[str, Any] = {}
    supported = 0
    for idx in sorted(data, key=int):
        v = data[idx].get("app_clocks")
        label = labels.get(idx, f"gpu{idx}")
        if not isinstance(v, dict) or "error" in v:
            ev[label] = v
            err = v.get("error") if isinstance(v, dict) else "unreadable"
            if err not in ("NotSupported", "FunctionNotFound"):
                findings.append(f"{label} app clocks {err}")
            continue
        supported += 1
        ev[label] = {k: {"app_mhz": a, "max_mhz": m} for k, (a, m) in v.items()}
        low = [f"{k} {a}<{m}MHz" for k, (a, m) in v.items() if isinstance(a, int) and isinstance(m, int) and a < m]
        if low:
            findings.append(f"{label} app clocks " + ", ".join(low))
    if findings:
        return CheckResult("active_app_clocks", Status.WARN, "; ".join(findings) + " (nvidia-smi -rac resets them)",
                           findings, {"gpus": ev}, action=Action.WARN)
    if not supported:
        return CheckResult("active_app_clocks", Status.SKIP, "application clocks not supported on these GPUs", [],
                           {"gpus": ev})
    return CheckResult("active_app_clocks", Status.OK, f"{supported} GPU(s) at their maximum application clocks", [],
                       {"gpus": ev})


# PCIe payload rate per lane after line encoding, GB/s (PCI-SIG: 2.5/5 GT/s 8b/10b, 8/16/32 GT/s 128b/130b,
# 64 GT/s PAM4 with FLIT mode ~242/256)
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_floor(pcie: dict[str, Any] | None) -> float | None:
    """FLOOR_FRACTION of the link's payload rate at the generation and width the slot and the GPU allow (from the
    NVML pcie probe: pcie_gen [current, max in this slot, the GPU's max], pcie_width [current, max]); None when NVML
    does not say (a GPU on NVLink-C2C: peers only). A healthy Gen5 x16 H100 copies ~50 GB/s of pinned memory; AzNHC
    expects 48 (its nd96isr_h100_v5 conf, check_gpu_bw 48)."""
    if not isinstance(pcie, dict):
        return None
    gen, width = pcie.get("pcie_gen"), pcie.get("pcie_width")
    if not (isinstance(gen, list) and len(gen) == 3 and isinstance(width, list) and len(width) == 2):
        return None
    g = [x for x in gen[1:] if isinstance(x, int) and not isinstance(x, bool)]
    w = width[1]
    if not g or not isinstance(w, int) or min(g) not in PCIE_LANE_GBS or w <= 0:
        return None
    return round(FLOOR_FRACTION * w * PCIE_LANE_GBS[min(g)], 3)


def _h2d_test(torch: Any, device: Any, mb: int, seconds: float) -> tuple[float, float]:
    """(host->device, device->host) GB/s of a pinned ``mb`` MiB buffer (the copy engines' path, as nvbandwidth's
    host_to_device_memcpy_ce measures), each timed for about ``seconds``."""
    n = mb << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device=device)

    def sync() -> None:
        torch.cuda.synchronize(device)

    from functools import partial

    iters, el = _repeat(partial(dev.copy_, host, non_blocking=True), (), sync, seconds)
    h2d = n * iters / el / 1e9
    iters, el = _repeat(partial(host.copy_, dev, non_blocking=True), (), sync, seconds)
    d2h = n * iters / el / 1e9
    del host, dev
    return h2d, d2h


def run_h2d(devices: list[dict[str, Any]], pcie: dict[str, Any], budget_s: float, peer_pct: float,
            simulated: bool) -> CheckResult:
    """Host-to-GPU and GPU-to-host bandwidth per GPU, judged against the link's floor (``pcie_floor``) and the node's
    other GPUs. Measured only where CUDA runs: a simulated node, a machine without torch or without a CUDA device
    is a SKIP naming why, never a pass."""
    if simulated:
        return CheckResult("active_h2d", Status.SKIP, "simulated node (fake NVML): no host-to-GPU link to measure")
    try:
        import torch
    except ImportError:
        return CheckResult("active_h2d", Status.SKIP, "torch not installed: host-to-GPU bandwidth not measured")
    if not torch.cuda.is_available():
        return CheckResult("active_h2d", Status.SKIP, "no CUDA device (torch.cuda.is_available() is false): "
                                                      "host-to-GPU bandwidth not measured")
    per = max(0.05, budget_s / max(1, len(devices)) / 2.5)
    values: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    t0 = time.monotonic()
    for d in devices:
        label = str(d.get("label") or f"gpu{d['index']}")
        try:
            idx = _cuda_index(torch, str(d.get("pci_bus_id") or ""), int(d["index"]))
            h2d, d2h = _h2d_test(torch, torch.device("cuda", idx), 256, per)
            values[label] = {"h2d": float(f"{h2d:.4g}"), "d2h": float(f"{d2h:.4g}")}
        except Exception as exc:  # a CUDA error on a sick GPU: that GPU's finding
            errors[label] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    floors = {str(d.get("label") or f"gpu{d['index']}"): pcie_floor(pcie.get(str(d["index"]))) for d in devices}
    return judge_h2d(values, errors, floors, peer_pct, time.monotonic() - t0)


def judge_h2d(values: dict[str, dict[str, float]], errors: dict[str, str], floors: dict[str, float | None],
              peer_pct: float, took: float = 0.0) -> CheckResult:
    findings = [f"{lab} h2d error" for lab in errors]
    for lab, v in values.items():
        for way in ("h2d", "d2h"):
            x, floor = v[way], floors.get(lab)
            if floor is not None and x < floor:
                findings.append(f"{lab} {way} {x:.4g}<{floor:.4g}GB/s floor")
                continue
            others = [o[way] for k, o in values.items() if k != lab]
            if others:
                med = statistics.median(others)
                if med > 0 and x < med * peer_pct / 100:
                    findings.append(f"{lab} {way} {x:.4g}<{peer_pct:g}% of peers {med:.4g}GB/s")
    ev: dict[str, Any] = {"unit": "GB/s", "values": values, "floors": floors, "peer_pct": peer_pct}
    if errors:
        ev["errors"] = errors
    if findings:
        return CheckResult("active_h2d", Status.FAIL, "; ".join(findings), findings, ev, action=Action.DRAIN,
                           duration_s=took)
    if not values:
        return CheckResult("active_h2d", Status.SKIP, "no GPU measured", [], ev, duration_s=took)
    lo = min(min(v.values()) for v in values.values())
    hi = max(max(v.values()) for v in values.values())
    return CheckResult("active_h2d", Status.OK, f"{len(values)} GPU(s) host<->GPU {lo:.4g}-{hi:.4g} GB/s", [], ev,
                       duration_s=took)
