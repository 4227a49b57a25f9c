"""A fake NVML serving a recorded device state, with pynvml's call surface and pynvml's exceptions.

For tests and the lab only (``SLURMKIT_FAKE_NVML``): the JSON file is the same shape the gather code records from
a real GPU (``slurmkit check --record-fixture``), so a fault is injected by editing one value. Shape::

    {"driver_version": "550.54.15", "boot_id": "...", "init_error": null,
     "hang": {"call": "nvmlDeviceGetTotalEccErrors", "device": 3, "seconds": 3600},   # optional
     "kmsg": [[seq, "NVRM: Xid (PCI:0000:18:00): 79, ..."], ...],                      # the node's kernel log
              # a row [seq, text, prio] carries /dev/kmsg's prio (facility << 3 | level; 14 = a user's line)
     "devices": [{"index": 0, "minor": 0, "name": "...", "uuid": "...", "pci_bus_id": "00000000:18:00.0",
                  "ecc_volatile_uncorrected": 0, "temperature_c": 31, "nvlink_state": [1, 1, ...], ...}]}

A value ``{"error": "NotSupported"}`` makes that call raise ``pynvml.NVMLError_NotSupported`` (any pynvml error
class suffix works); ``"lost": true`` on a device makes every call on it raise ``NVMLError_GpuIsLost``.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

# pynvml is imported where the fake is *used* (the forked gather worker), not where a hook merely reads the
# fixture's kernel log: the parent process stays light.


def fixture_path(source: str, node: str | None) -> str:
    """``SLURMKIT_FAKE_NVML`` is a JSON file, or a directory holding ``<node>.json``."""
    if os.path.isdir(source):
        if not node:
            raise FileNotFoundError(f"{source} is a directory but the node name is unknown (SLURMD_NODENAME)")
        return os.path.join(source, f"{node}.json")
    return source


def load_state(source: str, node: str | None) -> dict[str, Any]:
    with open(fixture_path(source, node)) as f:
        return json.load(f)


def _raise(name: str) -> None:
    import pynvml

    cls = getattr(pynvml, f"NVMLError_{name}", None)
    if cls is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    raise cls()


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class FakeNVML:
    """Attribute-compatible with the ``pynvml`` module for the functions slurmkit calls."""

    def __init__(self, state: dict[str, Any]):
        import pynvml

        self.NVMLError = pynvml.NVMLError
        self._nv = pynvml
        self.state = state
        self.devices: list[dict[str, Any]] = list(state.get("devices", []))
        self._initialised = False

    # --- helpers ------------------------------------------------------------------------------------------
    def _maybe_hang(self, call: str, index: int | None = None) -> None:
        hang = self.state.get("hang")
        if not hang or hang.get("call", "nvmlInit") != call:
            return
        if hang.get("device") is not None and hang["device"] != index:
            return
        # A hung driver ioctl: sleep far past any budget. The caller's worker gets killed.
        time.sleep(float(hang.get("seconds", 3600)))

    def _dev(self, handle: _Handle, call: str) -> dict[str, Any]:
        if not self._initialised:
            _raise("Uninitialized")
        self._maybe_hang(call, handle.index)
        dev = self.devices[handle.index]
        if dev.get("lost"):
            _raise("GpuIsLost")
        return dev

    def _value(self, handle: _Handle, call: str, key: str) -> Any:
        dev = self._dev(handle, call)
        if key not in dev:
            _raise("NotSupported")  # a recording without the key: the GPU did not answer it
        v = dev[key]
        if isinstance(v, dict) and set(v) == {"error"}:
            _raise(v["error"])
        return v

    # --- system -------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._maybe_hang("nvmlInit")
        if self.state.get("init_error"):
            _raise(self.state["init_error"])
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        if not self._initialised:
            _raise("Uninitialized")
        self._maybe_hang("nvmlSystemGetDriverVersion")
        return str(self.state.get("driver_version", ""))

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialised:
            _raise("Uninitialized")
        self._maybe_hang("nvmlDeviceGetCount")
        return int(self.state.get("count", len(self.devices)))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not self._initialised:
            _raise("Uninitialized")
        self._maybe_hang("nvmlDeviceGetHandleByIndex", index)
        if index >= len(self.devices):
            _raise("InvalidArgument")
        dev = self.devices[index]
        if dev.get("lost") == "handle":  # lost before the driver could even hand out a handle
            _raise("GpuIsLost")
        return _Handle(index)

    # --- identity -----------------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return self._value(h, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return self._value(h, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetSerial(self, h: _Handle) -> str:
        return self._value(h, "nvmlDeviceGetSerial", "serial")

    def nvmlDeviceGetMinorNumber(self, h: _Handle) -> int:
        dev = self._dev(h, "nvmlDeviceGetMinorNumber")
        if "minor" not in dev:
            return h.index
        return int(self._value(h, "nvmlDeviceGetMinorNumber", "minor"))

    def nvmlDeviceGetVbiosVersion(self, h: _Handle) -> str:
        return self._value(h, "nvmlDeviceGetVbiosVersion", "vbios_version")

    def nvmlDeviceGetInforomImageVersion(self, h: _Handle) -> str:
        return self._value(h, "nvmlDeviceGetInforomImageVersion", "inforom_image_version")

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        return SimpleNamespace(busId=self._value(h, "nvmlDeviceGetPciInfo", "pci_bus_id"))

    # --- health -------------------------------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        # the fake checks the constants the gather code passes, so a wrong argument fails a test
        nv = self._nv
        if error_type != nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED or \
                counter_type not in (nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC):
            _raise("InvalidArgument")
        key = "ecc_volatile_uncorrected" if counter_type == nv.NVML_VOLATILE_ECC else "ecc_aggregate_uncorrected"
        return int(self._value(h, "nvmlDeviceGetTotalEccErrors", key))

    def nvmlDeviceGetEccMode(self, h: _Handle) -> list[int]:
        return list(self._value(h, "nvmlDeviceGetEccMode", "ecc_mode"))

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        v = self._value(h, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return (int(v[0]), int(v[1]), int(v[2]), int(v[3]))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending"))

    def _field(self, dev: dict[str, Any], fid: int) -> Any:
        """The fixture value behind one field id (pynvml's NVML_FI_* constants), or an error dict."""
        nv = self._nv
        if fid == nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
            return dev.get("recovery_action", {"error": "NotSupported"})
        from slurmkit.health.nvmlworker import NVLINK_ERROR_FIELDS

        for name, const in NVLINK_ERROR_FIELDS.items():
            if fid == getattr(nv, const, None):
                errs = dev.get("nvlink_errors", {"error": "NotSupported"})
                if isinstance(errs, dict) and set(errs) == {"error"}:
                    return errs
                return errs.get(name, {"error": "NotSupported"})
        return {"error": "NotSupported"}

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[int]) -> list[SimpleNamespace]:
        pynvml = self._nv
        dev = self._dev(h, "nvmlDeviceGetFieldValues")
        out = []
        for fid in field_ids:
            v = self._field(dev, fid)
            if isinstance(v, dict):
                # a per-field failure: the call succeeds, the field carries the error code (as real NVML does)
                code = getattr(pynvml, f"NVMLError_{v['error']}")().value
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=code, valueType=1,
                                           value=SimpleNamespace(uiVal=0, ullVal=0)))
            else:
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=pynvml.NVML_SUCCESS, valueType=3,
                                           value=SimpleNamespace(uiVal=int(v) & 0xFFFFFFFF, ullVal=int(v))))
        return out

    def nvmlDeviceGetMemoryErrorCounter(self, h: _Handle, error_type: int, counter_type: int, location: int) -> int:
        nv = self._nv
        where = {nv.NVML_MEMORY_LOCATION_SRAM: "ecc_sram", nv.NVML_MEMORY_LOCATION_DRAM: "ecc_dram"}.get(location)
        if where is None:
            _raise("NotSupported")
            raise AssertionError  # _raise always raises
        counts = self._value(h, "nvmlDeviceGetMemoryErrorCounter", where)
        kind = "unc" if error_type == nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "cor"
        counter = "volatile" if counter_type == nv.NVML_VOLATILE_ECC else "aggregate"
        v = counts.get(f"{kind}_{counter}", {"error": "NotSupported"})
        if isinstance(v, dict):
            _raise(v["error"])
        return int(v)

    def nvmlDeviceGetPcieReplayCounter(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetPcieReplayCounter", "pcie_replay"))

    def _gen(self, h: _Handle, call: str, i: int) -> int:
        v = self._value(h, call, "pcie_gen")[i]
        if isinstance(v, dict):
            _raise(v["error"])
        return int(v)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: _Handle) -> int:
        return self._gen(h, "nvmlDeviceGetCurrPcieLinkGeneration", 0)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: _Handle) -> int:
        return self._gen(h, "nvmlDeviceGetMaxPcieLinkGeneration", 1)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: _Handle) -> int:
        return self._gen(h, "nvmlDeviceGetGpuMaxPcieLinkGeneration", 2)

    def nvmlDeviceGetGpuFabricInfoV(self, h: _Handle, ref: Any) -> int:
        """Fills the caller's struct (passed ``ctypes.byref``) like the real call; returns NVML_SUCCESS."""
        nv = self._nv
        v = self._value(h, "nvmlDeviceGetGpuFabricInfoV", "fabric")
        info = ref._obj
        info.state = int(v.get("state", 0))
        status = v.get("status", "Success")
        info.status = nv.NVML_SUCCESS if status == "Success" else getattr(nv, f"NVMLError_{status}")().value
        info.cliqueId = int(v.get("clique_id", 0))
        if hasattr(info, "healthMask"):
            info.healthMask = int(v.get("health_mask", 0))
        return nv.NVML_SUCCESS

    def nvmlDeviceValidateInforom(self, h: _Handle) -> None:
        self._value(h, "nvmlDeviceValidateInforom", "inforom_valid")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw")[0])

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetPowerManagementDefaultLimit", "power_limit_mw")[1])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons"))

    def _clock(self, h: _Handle, call: str, key: str, clock: int) -> int:
        nv = self._nv
        name = {nv.NVML_CLOCK_GRAPHICS: "graphics", nv.NVML_CLOCK_SM: "sm", nv.NVML_CLOCK_MEM: "memory"}.get(clock)
        if name is None:
            _raise("InvalidArgument")
        v = self._value(h, call, key).get(name, {"error": "NotSupported"})
        if isinstance(v, dict):
            _raise(v["error"])
        return int(v)

    def nvmlDeviceGetApplicationsClock(self, h: _Handle, clock: int) -> int:
        """``app_clocks_mhz: {graphics, memory}`` (MHz, what nvidia-smi -ac set)."""
        return self._clock(h, "nvmlDeviceGetApplicationsClock", "app_clocks_mhz", clock)

    def nvmlDeviceGetMaxClockInfo(self, h: _Handle, clock: int) -> int:
        """``max_clocks_mhz: {graphics, memory}`` (MHz, the board's maximum)."""
        return self._clock(h, "nvmlDeviceGetMaxClockInfo", "max_clocks_mhz", clock)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        if sensor != self._nv.NVML_TEMPERATURE_GPU:
            _raise("InvalidArgument")
        return int(self._value(h, "nvmlDeviceGetTemperature", "temperature_c"))

    def nvmlDeviceGetPersistenceMode(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetPersistenceMode", "persistence_mode"))

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        states = self._value(h, "nvmlDeviceGetNvLinkState", "nvlink_state")
        if link >= len(states):
            _raise("InvalidArgument")  # what real NVML answers past the device's last link
        v = states[link]
        if isinstance(v, dict):
            _raise(v["error"])
        return int(v)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetCurrPcieLinkWidth", "pcie_width")[0])

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: _Handle) -> int:
        return int(self._value(h, "nvmlDeviceGetMaxPcieLinkWidth", "pcie_width")[1])

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        return list(self._value(h, "nvmlDeviceGetMigMode", "mig_mode"))

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[SimpleNamespace]:
        procs = self._value(h, "nvmlDeviceGetComputeRunningProcesses", "compute_processes")
        return [SimpleNamespace(pid=int(p["pid"]), usedGpuMemory=p.get("used_memory")) for p in procs]
