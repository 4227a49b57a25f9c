"""NVML gathering in a forked worker, so a hung driver can never hold a hook past its budget.

Why a process and not a thread: a hung NVML call usually sits in an ioctl the kernel will not interrupt; a thread stuck
there keeps the hook's process from exiting (slurmd would wait on it), a forked child can be SIGKILLed and abandoned.
The child's stdio points at /dev/null so slurmd's output pipe sees EOF as soon as the hook itself exits.

The child does one ``nvmlInit`` and then one *probe* at a time (identity, ecc, remapped_rows, ...), writing one JSON
line per probe to a pipe. The parent reads lines against each probe's deadline and the global one; on a timeout it
kills the child and marks the stalled probe as timed out (fail closed). Values are recorded raw, errors as
``{"error": "NotSupported"}`` (pynvml's class suffix): the exact shape the fake NVML serves, so a gather from a real GPU
is also a fixture.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

# No dataclasses here: this module is imported before the worker is forked, ahead of everything else a hook loads.

# Probe name -> the check that evaluates it (1:1 except "init", which feeds nvml, gpu_count and driver).
PROBES = ("ecc", "remapped_rows", "retired_pages", "recovery_action", "clocks", "temperature", "persistence",
          "nvlink", "nvlink_errors", "pcie", "fabric", "inforom", "power", "mig", "gpu_procs", "firmware")


def _errname(exc: BaseException) -> str:
    name = type(exc).__name__
    return name[len("NVMLError_"):] if name.startswith("NVMLError_") else name


def load_nvml(fake_source: str | None, node: str | None) -> Any:
    """The real pynvml module, or the fake serving ``fake_source`` (a JSON file or a directory of <node>.json)."""
    if fake_source:
        from slurmkit.health.fakenvml import FakeNVML, load_state

        return FakeNVML(load_state(fake_source, node))
    import pynvml

    return pynvml


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    import pynvml

    try:
        v = fn(*args)
    except pynvml.NVMLError as exc:
        return {"error": _errname(exc)}
    except Exception as exc:  # a binding without the function, an odd return shape: one GPU's finding, not a crash
        return {"error": type(exc).__name__}
    if isinstance(v, bytes):
        v = v.decode(errors="replace")
    return v


def _probe_ecc(nv: Any, h: Any) -> dict[str, Any]:
    import pynvml

    unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    out = {
        "ecc_mode": _call(lambda: list(nv.nvmlDeviceGetEccMode(h))),
        "ecc_volatile_uncorrected": _call(nv.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_VOLATILE_ECC),
        "ecc_aggregate_uncorrected": _call(nv.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_AGGREGATE_ECC),
    }
    # SRAM vs DRAM (NVML nvmlMemoryLocation_t: NVML_MEMORY_LOCATION_DRAM 2, NVML_MEMORY_LOCATION_SRAM 7, "Turing+"),
    # what nvidia-smi shows as ecc.errors.{un,}corrected.{volatile,aggregate}.{sram,dram} and AzNHC judges apart
    fn = getattr(nv, "nvmlDeviceGetMemoryErrorCounter", None)
    for where, const in (("sram", "NVML_MEMORY_LOCATION_SRAM"), ("dram", "NVML_MEMORY_LOCATION_DRAM")):
        loc = getattr(pynvml, const, None)
        if fn is None or loc is None:
            out[f"ecc_{where}"] = {"error": "FunctionNotFound"}
            continue
        counts = {f"{kind}_{counter}": _call(fn, h, etype, ctype, loc)
                  for kind, etype in (("unc", unc), ("cor", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED))
                  for counter, ctype in (("volatile", pynvml.NVML_VOLATILE_ECC),
                                         ("aggregate", pynvml.NVML_AGGREGATE_ECC))}
        errs = {v["error"] for v in counts.values() if isinstance(v, dict)}
        out[f"ecc_{where}"] = {"error": errs.pop()} if len(errs) == 1 and len(counts) == sum(
            isinstance(v, dict) for v in counts.values()) else counts
    return out


# NVLink error counters, totals over the GPU's links (pynvml field ids NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL)
NVLINK_ERROR_FIELDS = {"crc_flit": "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                       "crc_data": "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                       "replay": "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                       "recovery": "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"}


def _field_values(nv: Any, h: Any, fields: dict[str, int]) -> dict[str, Any] | dict[str, str]:
    """One nvmlDeviceGetFieldValues call; a field's own error stays that field's value."""
    import pynvml

    vals = _call(nv.nvmlDeviceGetFieldValues, h, list(fields.values()))
    if isinstance(vals, dict):
        return vals
    out: dict[str, Any] = {}
    for name, v in zip(fields, vals, strict=False):
        if v.nvmlReturn != pynvml.NVML_SUCCESS:
            out[name] = {"error": _errname(pynvml.NVMLError(v.nvmlReturn))}
        else:
            out[name] = int(getattr(v.value, _VALUE_ATTR.get(int(v.valueType), "ullVal")))
    return out


# nvmlValueType_t -> the member of the nvmlValue_t union that holds it (pynvml c_nvmlValue_t)
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _probe_nvlink_errors(nv: Any, h: Any) -> dict[str, Any]:
    import pynvml

    fields = {k: getattr(pynvml, c) for k, c in NVLINK_ERROR_FIELDS.items() if hasattr(pynvml, c)}
    if not fields:
        return {"nvlink_errors": {"error": "FunctionNotFound"}}
    out = _field_values(nv, h, fields)
    if "error" in out:
        return {"nvlink_errors": out}
    errs = {v["error"] for v in out.values() if isinstance(v, dict)}
    if len(errs) == 1 and all(isinstance(v, dict) for v in out.values()):
        return {"nvlink_errors": {"error": errs.pop()}}  # no NVLink (or no counters) on this GPU
    return {"nvlink_errors": out}


def _probe_fabric(nv: Any, h: Any) -> dict[str, Any]:
    """GPU fabric (NVSwitch / multi-node NVLink) registration: nvmlDeviceGetGpuFabricInfoV, else the v1 call."""
    import ctypes

    import pynvml

    calls = [(getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None), getattr(pynvml, "c_nvmlGpuFabricInfoV_t", None)),
             (getattr(nv, "nvmlDeviceGetGpuFabricInfo", None), getattr(pynvml, "c_nvmlGpuFabricInfo_t", None))]
    r: Any = {"error": "FunctionNotFound"}
    info: Any = None
    for fn, struct in calls:
        if fn is None or struct is None:
            continue
        info = struct()
        r = _call(fn, h, ctypes.byref(info))
        if not (isinstance(r, dict) and r.get("error") in ("FunctionNotFound", "ArgumentVersionMismatch")):
            break  # answered (or failed for a reason of its own); an older driver gets the v1 call
    if isinstance(r, dict):
        return {"fabric": r}
    status = int(info.status)
    out = {"state": int(info.state), "status": "Success" if status == pynvml.NVML_SUCCESS
           else _errname(pynvml.NVMLError(status)), "clique_id": int(getattr(info, "cliqueId", 0))}
    if hasattr(info, "healthMask"):
        out["health_mask"] = int(info.healthMask)
    return {"fabric": out}


def _probe_inforom(nv: Any, h: Any) -> dict[str, Any]:
    v = _call(nv.nvmlDeviceValidateInforom, h)  # None on success; NVML_ERROR_CORRUPTED_INFOROM when it is not
    return {"inforom_valid": v if isinstance(v, dict) else True}


def _probe_power(nv: Any, h: Any) -> dict[str, Any]:
    enforced = _call(nv.nvmlDeviceGetEnforcedPowerLimit, h)
    default = _call(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)
    for v in (enforced, default):
        if isinstance(v, dict):
            return {"power_limit_mw": v}
    return {"power_limit_mw": [enforced, default]}


def _probe_recovery(nv: Any, h: Any) -> dict[str, Any]:
    import pynvml

    # The field exists in the binding since 12.570; older bindings cannot even ask.
    fid = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if fid is None:
        return {"recovery_action": {"error": "FunctionNotFound"}}
    vals = _call(nv.nvmlDeviceGetFieldValues, h, [fid])
    if isinstance(vals, dict):
        return {"recovery_action": vals}
    v = vals[0]
    if v.nvmlReturn != pynvml.NVML_SUCCESS:
        return {"recovery_action": {"error": _errname(pynvml.NVMLError(v.nvmlReturn))}}
    return {"recovery_action": int(v.value.uiVal)}


def _probe_clocks(nv: Any, h: Any) -> dict[str, Any]:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"clocks_event_reasons": _call(fn, h)}


def _probe_nvlink(nv: Any, h: Any) -> dict[str, Any]:
    import pynvml

    states: list[Any] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        v = _call(nv.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(v, dict):
            # Past the device's last link NVML answers InvalidArgument (or NotSupported); link 0 failing means
            # the GPU has no NVLink at all. Any other error on a real link is recorded and judged.
            if v["error"] in ("InvalidArgument", "NotSupported"):
                break
        states.append(v)
    if not states:
        return {"nvlink_state": {"error": "NotSupported"}}
    return {"nvlink_state": states}


def _probe_pcie(nv: Any, h: Any) -> dict[str, Any]:
    cur = _call(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    mx = _call(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    out: dict[str, Any] = {"pcie_width": cur if isinstance(cur, dict) else mx if isinstance(mx, dict) else [cur, mx]}
    out["pcie_replay"] = _call(nv.nvmlDeviceGetPcieReplayCounter, h)
    # generation: current (drops at idle for power saving), max for this GPU in this slot, max of the GPU itself
    gens = [_call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h), _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)]
    gpu_max = getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
    gens.append(_call(gpu_max, h) if gpu_max is not None else {"error": "FunctionNotFound"})
    out["pcie_gen"] = gens
    return out


def _probe_procs(nv: Any, h: Any) -> dict[str, Any]:
    v = _call(nv.nvmlDeviceGetComputeRunningProcesses, h)
    if isinstance(v, dict):
        return {"compute_processes": v}
    return {"compute_processes": [{"pid": int(p.pid), "used_memory": getattr(p, "usedGpuMemory", None)} for p in v]}


def _probe_mig(nv: Any, h: Any) -> dict[str, Any]:
    return {"mig_mode": _call(lambda: list(nv.nvmlDeviceGetMigMode(h)))}


def _probe_app_clocks(nv: Any, h: Any) -> dict[str, Any]:
    """Application clocks against the board's maximum, graphics and memory (nvmlDeviceGetApplicationsClock,
    nvmlDeviceGetMaxClockInfo: what nvidia-smi shows as clocks.applications.* and clocks.max.*, which AzNHC's
    check_app_gpu_clocks compares). The active stage reads it (not a hook check)."""
    import pynvml

    out: dict[str, Any] = {}
    for name, clock in (("graphics", pynvml.NVML_CLOCK_GRAPHICS), ("memory", pynvml.NVML_CLOCK_MEM)):
        app = _call(nv.nvmlDeviceGetApplicationsClock, h, clock)
        mx = _call(nv.nvmlDeviceGetMaxClockInfo, h, clock)
        for v in (app, mx):
            if isinstance(v, dict):
                return {"app_clocks": v}
        out[name] = [app, mx]
    return {"app_clocks": out}


# The key each probe writes that its check reads first (where a probe's failure is recorded).
PROBE_KEYS = {"ecc": "ecc_volatile_uncorrected", "remapped_rows": "remapped_rows",
              "retired_pages": "retired_pages_pending", "recovery_action": "recovery_action",
              "clocks": "clocks_event_reasons", "temperature": "temperature_c", "persistence": "persistence_mode",
              "nvlink": "nvlink_state", "nvlink_errors": "nvlink_errors", "pcie": "pcie_width", "fabric": "fabric",
              "inforom": "inforom_valid", "power": "power_limit_mw", "mig": "mig_mode",
              "gpu_procs": "compute_processes", "firmware": "vbios_version", "app_clocks": "app_clocks"}

_PROBE_FNS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "ecc": _probe_ecc,
    "remapped_rows": lambda nv, h: {"remapped_rows": _call(lambda: list(nv.nvmlDeviceGetRemappedRows(h)))},
    "retired_pages": lambda nv, h: {"retired_pages_pending": _call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)},
    "recovery_action": _probe_recovery,
    "clocks": _probe_clocks,
    "temperature": lambda nv, h: {"temperature_c": _call(nv.nvmlDeviceGetTemperature, h, 0)},
    "persistence": lambda nv, h: {"persistence_mode": _call(nv.nvmlDeviceGetPersistenceMode, h)},
    "nvlink": _probe_nvlink,
    "nvlink_errors": _probe_nvlink_errors,
    "pcie": _probe_pcie,
    "fabric": _probe_fabric,
    "inforom": _probe_inforom,
    "power": _probe_power,
    "mig": _probe_mig,
    "gpu_procs": _probe_procs,
    "firmware": lambda nv, h: {"vbios_version": _call(nv.nvmlDeviceGetVbiosVersion, h),
                               "inforom_image_version": _call(nv.nvmlDeviceGetInforomImageVersion, h)},
    "app_clocks": _probe_app_clocks,  # not in PROBES: the active stage asks for it
}


def _probe_one(probe: str, nv: Any, h: Any) -> dict[str, Any]:
    """One probe on one GPU; whatever goes wrong stays this GPU's error value (the check's key holds it)."""
    try:
        return _PROBE_FNS[probe](nv, h)
    except Exception as exc:
        return {PROBE_KEYS[probe]: {"error": _errname(exc)}}


Instructions = tuple[list[str], "frozenset[int] | None"]


def gather(nv: Any, probes: Iterable[str], minors: frozenset[int] | None,
           emit: Callable[[str, dict[str, Any]], None],
           instructions: Callable[[], Instructions | None] | None = None) -> None:
    """One init, then each probe over the selected GPUs; ``emit(probe, data)`` after each.

    ``minors``: the /dev/nvidiaN minor numbers in scope (the job's GPUs), None = all. Lost GPUs stay in the
    ``init`` record (they are what gpu_count reports) but no probe touches them again. ``instructions()``, when
    given, is asked for (probes, minors) after init (a worker forked before its hook knew them); None = stop.
    The ``init`` record carries ``init_s``: the seconds nvmlInit and the device scan took, measured here.
    """
    import pynvml

    t0 = time.monotonic()
    try:
        nv.nvmlInit()
    except pynvml.NVMLError as exc:
        emit("init", {"error": _errname(exc), "init_s": round(time.monotonic() - t0, 6)})
        return
    count = _call(nv.nvmlDeviceGetCount)
    info: dict[str, Any] = {"driver_version": _call(nv.nvmlSystemGetDriverVersion), "count": count, "devices": []}
    handles: dict[int, Any] = {}
    for i in range(count if isinstance(count, int) else 0):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except pynvml.NVMLError as exc:
            info["devices"].append({"index": i, "error": _errname(exc)})
            continue
        dev: dict[str, Any] = {"index": i, "minor": _call(nv.nvmlDeviceGetMinorNumber, h)}
        pci = _call(nv.nvmlDeviceGetPciInfo, h)
        dev["pci_bus_id"] = pci if isinstance(pci, dict) else _call(lambda p=pci: p.busId)
        for key, fn in (("name", nv.nvmlDeviceGetName), ("uuid", nv.nvmlDeviceGetUUID),
                        ("serial", nv.nvmlDeviceGetSerial)):
            dev[key] = _call(fn, h)
        if any(isinstance(v, dict) and v.get("error") == "GpuIsLost" for v in dev.values()):
            dev["lost"] = True
        info["devices"].append(dev)
        handles[i] = h
    info["init_s"] = round(time.monotonic() - t0, 6)
    if instructions is not None:
        got = instructions()
        if got is None:
            return
        probes, minors = got
    selected: dict[int, Any] = {}
    for dev in info["devices"]:
        i, minor = dev["index"], dev.get("minor")
        if i not in handles or dev.get("lost"):
            continue
        # an unreadable minor (an error value) falls back to the index: gres.conf File=/dev/nvidia[0-N] in order
        if minors is None or (minor in minors if isinstance(minor, int) else i in minors):
            selected[i] = handles[i]
    handles = selected
    info["selected"] = sorted(handles)
    emit("init", info)
    for probe in probes:
        emit(probe, {str(i): _probe_one(probe, nv, h) for i, h in handles.items()})
    try:
        nv.nvmlShutdown()
    except pynvml.NVMLError:
        pass


class GatherResult:
    """What the parent got back. ``data[probe]`` exists for every probe that finished."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}
        self.durations: dict[str, float] = {}
        self.stalled: str | None = None  # the probe (or "init") that ran past its deadline
        self.stalled_after_s = 0.0
        self.crashed: str | None = None  # the worker died or raised: text of the failure
        self.load_error: str | None = None  # NVML (or the fake's fixture) could not be loaded at all


class Worker:
    """A forked NVML gatherer. ``start()`` forks (call it before creating threads); ``collect()`` reads its probe
    lines against each probe's deadline and the global one (``time.monotonic()`` based)."""

    def __init__(self, fake_source: str | None, node: str | None, probes: list[str], minors: frozenset[int] | None,
                 timeouts: dict[str, float], deadline: float):
        self.fake_source, self.node, self.probes, self.minors = fake_source, node, probes, minors
        self.timeouts, self.deadline = timeouts, deadline
        self.pid = 0
        self.rfd = -1
        self.cfd = -1  # control pipe to a pre-forked child (its probes and GPUs), -1 once sent
        self.started = 0.0
        self.done = False

    @classmethod
    def prefork(cls, fake_source: str | None, node: str | None) -> Worker:
        """Fork now (no thread may exist yet): the child loads NVML and runs nvmlInit while the hook loads its
        inventory; ``instruct()`` then tells it what to probe, or ``abandon()`` ends it."""
        w = cls(fake_source, node, [], None, {}, 0.0)
        return w._fork(deferred=True)

    def start(self) -> Worker:
        return self._fork(deferred=False)

    def _fork(self, deferred: bool) -> Worker:
        rfd, wfd = os.pipe()
        crfd, cwfd = os.pipe() if deferred else (-1, -1)
        self.started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # child: never returns
            if cwfd >= 0:
                os.close(cwfd)
            _child(rfd, wfd, self.fake_source, self.node, self.probes, self.minors, crfd)
        os.close(wfd)
        if crfd >= 0:
            os.close(crfd)
        self.pid, self.rfd, self.cfd = pid, rfd, cwfd
        return self

    def instruct(self, probes: list[str], minors: frozenset[int] | None, timeouts: dict[str, float],
                 deadline: float) -> Worker:
        self.probes, self.minors, self.timeouts, self.deadline = probes, minors, timeouts, deadline
        if self.cfd >= 0:
            msg = json.dumps({"probes": probes, "minors": sorted(minors) if minors is not None else None})
            try:
                os.write(self.cfd, msg.encode() + b"\n")
            except OSError:
                pass  # the child is gone: collect() reports how
            os.close(self.cfd)
            self.cfd = -1
        return self

    def abandon(self) -> None:
        """No NVML needed after all (or the hook failed): end the child without waiting on it."""
        if self.done:
            return
        self.done = True
        for fd in (self.cfd, self.rfd):
            if fd >= 0:
                os.close(fd)
        self.cfd = self.rfd = -1
        if self.pid:
            _reap(self.pid)

    def collect(self) -> GatherResult:
        res = GatherResult()
        expected = ["init", *self.probes]
        buf = b""
        last = self.started
        try:
            while expected:
                probe = expected[0]
                limit = min(self.deadline, last + self.timeouts.get(probe, 1.0))
                now = time.monotonic()
                if now >= limit:
                    res.stalled, res.stalled_after_s = probe, now - last
                    break
                ready, _, _ = select.select([self.rfd], [], [], limit - now)
                if not ready:
                    continue  # the loop re-checks the deadline
                chunk = os.read(self.rfd, 65536)
                if not chunk:  # the child exited: finished early (NVML init failed) or crashed
                    break
                buf += chunk
                while b"\n" in buf and expected:
                    line, buf = buf.split(b"\n", 1)
                    rec = json.loads(line)
                    now = time.monotonic()
                    kind = rec["probe"]
                    if kind == "_load_error":
                        res.load_error = rec["data"]["error"]
                        expected = []
                    elif kind == "_crash":
                        res.crashed = rec["data"]["error"]
                        expected = []
                    else:
                        res.data[kind] = rec["data"]
                        # init: what nvmlInit and the device scan took in the child (a pre-forked child waits for
                        # its instructions after init; that wait is not NVML's time)
                        init_s = rec["data"].get("init_s") if kind == "init" else None
                        res.durations[kind] = init_s if isinstance(init_s, (int, float)) else now - last
                        last = now
                        if kind in expected:
                            expected.remove(kind)
                        if kind == "init" and "error" in rec["data"]:
                            expected = []
        finally:
            os.close(self.rfd)
            self.rfd = -1
            self.done = True
            _reap(self.pid)
        if expected and res.stalled is None:
            res.crashed = f"NVML worker exited before {expected[0]} ({time.monotonic() - self.started:.3f}s)"
        return res


def run_worker(fake_source: str | None, node: str | None, probes: list[str], minors: frozenset[int] | None,
               timeouts: dict[str, float], deadline: float) -> GatherResult:
    """Fork, gather in the child, collect: the one-call form."""
    return Worker(fake_source, node, probes, minors, timeouts, deadline).start().collect()


def _reap(pid: int) -> None:
    """Kill and reap without ever blocking: a child stuck in an uninterruptible ioctl is left to init."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        os.kill(pid, signal.SIGKILL)
        for _ in range(20):  # ~20 ms: enough for a killable child, bounded for one that is not
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
            time.sleep(0.001)
    except (ChildProcessError, ProcessLookupError):
        pass


def _read_instructions(cfd: int) -> Instructions | None:
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(cfd, 65536)
        if not chunk:
            return None  # the parent went away or decided it needs no NVML
        buf += chunk
    msg = json.loads(buf.split(b"\n", 1)[0])
    minors = msg.get("minors")
    return list(msg["probes"]), (frozenset(minors) if minors is not None else None)


def _child(rfd: int, wfd: int, fake_source: str | None, node: str | None, probes: list[str],
           minors: frozenset[int] | None, cfd: int = -1) -> None:
    code = 0
    try:
        os.close(rfd)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

        def emit(probe: str, data: dict[str, Any]) -> None:
            os.write(wfd, json.dumps({"probe": probe, "data": data}, separators=(",", ":")).encode() + b"\n")

        try:
            nv = load_nvml(fake_source, node)
        except (ImportError, OSError, ValueError) as exc:
            emit("_load_error", {"error": f"{type(exc).__name__}: {exc}"})
            return
        try:
            gather(nv, probes, minors, emit, (lambda: _read_instructions(cfd)) if cfd >= 0 else None)
        except Exception as exc:  # report, never hang the parent on a half-written stream
            emit("_crash", {"error": f"{type(exc).__name__}: {exc}"})
            code = 1
    except BaseException:
        code = 1
    finally:
        os._exit(code)
