"""The fake NVML state the lab's nodes get with ``--hooks``: synthesized healthy for the lab's shape, or a
recorded one (``--fake-nvml FILE``) checked against that shape before anything starts.

The shape is the one ``slurmkit/health/fakenvml.py`` serves (what ``slurmkit check --record-fixture`` records
from a real GPU); the values are those of an idle, healthy data-centre GPU, so every health check passes and a
fault is injected by editing one node's copy (DIR/fake-nvml/<node>.json).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from slurmkit.errors import LabError

# What NVML's nvmlDeviceGetName answers for the lab's --gpu-type values (nvidia-smi -L); others get
# "NVIDIA <TYPE>", which the gpu_count check's type match (the type's letters and digits in the name) accepts.
GPU_NAMES = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "a100": "NVIDIA A100-SXM4-80GB",
    "b200": "NVIDIA B200",
    "gb200": "NVIDIA GB200",
    "l40s": "NVIDIA L40S",
}
# NVLink links per GPU (NVIDIA data sheets): H100/H200 SXM 18, A100 SXM 12, B200/GB200 18
NVLINKS = {"a100": 12}
# Board power limits in W (NVIDIA data sheets, SXM where there is one): what nvmlDeviceGetEnforcedPowerLimit and
# nvmlDeviceGetPowerManagementDefaultLimit answer on an untouched board; others get 700
POWER_W = {"a100": 400, "b200": 1000, "gb200": 1200, "l40s": 350}
# PCIe generation of the GPU (current, slot max, GPU max): Gen4 for A100/L40S, Gen5 for Hopper and Blackwell
PCIE_GEN = {"a100": 4, "l40s": 4}
# Maximum graphics and memory clocks in MHz, as nvidia-smi -q "Max Clocks" shows them on an H100 SXM (H200: its
# faster HBM3e); the other types get the H100's. An untouched board's application clocks are at its maximum, which
# is all the active stage's application-clock check compares.
MAX_CLOCKS_MHZ = {"h200": (1980, 3201)}
DRIVER = "570.124.06"


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def healthy_state(gpus: int, gpu_type: str) -> dict[str, Any]:
    """A healthy node with ``gpus`` GPUs of ``gpu_type`` (minor i = index i, as the lab's /dev/nvidia<i>)."""
    name = GPU_NAMES.get(gpu_type.lower(), f"NVIDIA {gpu_type.upper()}")
    links = NVLINKS.get(gpu_type.lower(), 18)
    watts = POWER_W.get(gpu_type.lower(), 700)
    gen = PCIE_GEN.get(gpu_type.lower(), 5)
    gclk, mclk = MAX_CLOCKS_MHZ.get(gpu_type.lower(), (1980, 2619))
    zero_ecc = {"unc_volatile": 0, "unc_aggregate": 0, "cor_volatile": 0, "cor_aggregate": 0}
    devices = []
    for i in range(gpus):
        devices.append({
            "index": i, "minor": i, "name": name,
            "uuid": f"GPU-00000000-0000-4000-8000-{i:012d}", "serial": f"{1652322000000 + i}",
            "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            "ecc_mode": [1, 1], "ecc_volatile_uncorrected": 0, "ecc_aggregate_uncorrected": 0,
            "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": {"error": "NotSupported"},
            "recovery_action": 0, "clocks_event_reasons": 1, "temperature_c": 31, "persistence_mode": 1,
            "nvlink_state": [1] * links, "pcie_width": [16, 16], "pcie_gen": [gen, gen, gen], "pcie_replay": 0,
            "nvlink_errors": {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0},
            "power_limit_mw": [watts * 1000, watts * 1000], "inforom_valid": True,
            "ecc_sram": dict(zero_ecc), "ecc_dram": dict(zero_ecc),
            "fabric": {"state": 3, "status": "Success", "clique_id": 0, "health_mask": 0}, "mig_mode": [0, 0], "compute_processes": [],
            "app_clocks_mhz": {"graphics": gclk, "memory": mclk}, "max_clocks_mhz": {"graphics": gclk, "memory": mclk},
        })
    return {
        "recorded": {"by": f"slurmkit lab: synthesized healthy {gpus} x {gpu_type}", "host": "lab", "fault": "none"},
        "driver_version": DRIVER, "count": gpus, "boot_id": "00000000-0000-4000-8000-00000000b007", "kmsg": [],
        "devices": devices,
    }


def load_template(path: str, gpus: int, gpu_type: str) -> dict[str, Any]:
    """A recorded state for every node, refused with what is wrong unless it matches the lab's shape: a state
    with more GPUs than the lab makes the checks probe GPUs the lab's gres.conf does not have (the error was
    "gpu2 InvalidArgument" on every node), one of another type fails the type check."""
    where = f"--fake-nvml {path}"
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise LabError(f"{where}: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("devices"), list):
        raise LabError(f"{where}: not a recorded NVML state (a JSON object with a 'devices' list)")
    devices = state["devices"]
    count = state.get("count", len(devices))
    if count != len(devices):
        raise LabError(f"{where}: 'count' is {count} but 'devices' lists {len(devices)} GPUs")
    hint = f"record one with {gpus} GPUs, or leave out --fake-nvml for a healthy {gpus} x {gpu_type} state"
    if len(devices) != gpus:
        raise LabError(f"{where} describes {len(devices)} GPUs but the lab has --gpus-per-node {gpus}; {hint}")
    names = sorted({str(d.get("name")) for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)})
    if names and not any(_norm(gpu_type) in _norm(n) for n in names):
        raise LabError(f"{where} has {', '.join(repr(n) for n in names)} GPUs but the lab has --gpu-type "
                       f"{gpu_type}; {hint}")
    return state
