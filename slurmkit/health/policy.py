"""The health policy: which checks run, their thresholds, deadlines, and what a failure does.

Source: the inventory's ``hooks.checks`` mapping (or a site YAML with the same shape). Schema::

    hooks:
      checks:
        budget_s: 5                 # global wall-clock budget of one hook run (NVML hang included)
        resume_after_passes: 3      # health check: consecutive passes before resuming a node we drained
        scontrol_timeout_s: 1       # each scontrol/squeue call a hook makes
        temperature: {max_c: 90, warn_c: 83, action: drain}
        ib: false                   # shorthand for {enabled: false}
        xid: {codes: [48, 79], hooks: [prolog, health]}

Every check accepts ``enabled`` (bool), ``action`` (warn | drain | drain+reboot: what a FAIL does),
``timeout_s`` (its own deadline) and ``hooks`` (the hooks it runs in); the rest is per check (``CHECK_KEYS``).
Errors name the key path (``hooks.checks.temperature.max_c``) like the inventory loader does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmkit.errors import InventoryError
from slurmkit.health import xidcodes
from slurmkit.health.result import Action

HOOK_KINDS = ("prolog", "epilog", "health", "check")
_NODE_HOOKS = ("health", "check")

# XIDs that mean "this GPU must not take another job": the one XID table's drain class (xidcodes.py: NVIDIA's XID
# catalogue and AzNHC's list; 63 is its reset class, a WARN). The rules alert on the same table.
DEFAULT_FAIL_XIDS = xidcodes.DRAIN

CLOCK_REASON_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}


@dataclass(frozen=True)
class CheckDefault:
    action: Action
    timeout_s: float
    settings: Mapping[str, Any] = field(default_factory=dict)
    hooks: tuple[str, ...] = HOOK_KINDS  # the node checks below run in the health check (and check), not per job
    enabled: bool = True  # False: a site turns it on (a check whose finding depends on how the site works)


_D = CheckDefault
# Registry order is also report order and reason order. Defaults: hardware faults drain; configuration drift warns.
CHECK_DEFAULTS: dict[str, CheckDefault] = {
    "nvml": _D(Action.DRAIN, 3.0),
    # bus_ids: the expected GPUs' PCI bus ids in /dev/nvidiaN order, to name a missing one (default: the node's first
    # healthy run, gpuid.py)
    "gpu_count": _D(Action.DRAIN, 1.0, {"expected": None, "bus_ids": None}),
    "driver": _D(Action.WARN, 1.0, {"version": None}),
    # AzNHC azure_gpu_ecc.nhc (check_gpu_ecc 20000000 10000 in its H100 conf): SRAM uncorrectable > 0, SRAM correctable
    # > 10000 or any DRAM count > 20000000 fails; without the SRAM/DRAM split, volatile uncorrected > 0 fails
    "ecc": _D(Action.DRAIN, 1.0, {"max_volatile_uncorrected": 0, "max_sram_correctable": 10000,
                                  "max_dram_errors": 20_000_000}),
    # AzNHC: uncorrectable remapped rows > 512 fails (NVIDIA A100 memory error management: 512 remaps per GPU)
    # pending: a WARN while a job runs; drain_pending_when_idle: the health check drains an idle node for the reset
    "remapped_rows": _D(Action.DRAIN, 1.0, {"max_uncorrectable": 512, "drain_pending_when_idle": True}),
    "retired_pages": _D(Action.DRAIN, 1.0),
    "recovery_action": _D(Action.DRAIN, 1.0),
    "xid": _D(Action.DRAIN, 1.0, {"codes": DEFAULT_FAIL_XIDS}),
    "clocks": _D(Action.WARN, 1.0, {"reasons": ("hw_slowdown", "hw_thermal", "hw_power_brake")}),
    "temperature": _D(Action.DRAIN, 1.0, {"warn_c": 83, "max_c": 90}),
    # expected: true makes persistence off a FAIL (drain); unset: a WARN (nvmlInit takes seconds without it)
    "persistence": _D(Action.DRAIN, 1.0, {"expected": None}),
    "nvlink": _D(Action.DRAIN, 1.0),
    # deltas since the last run of the NVLink CRC/replay/recovery totals (DCGM's NVLink health watch) warn; a GPU
    # above the rate (CRC errors per second above DCGM's DCGM_LIMIT_MAX_LWLINK_CRC_ERROR, 100: "CRC errors only matter
    # at rates of 100+ per second", DCGM dcgm_gpu_hardware_limits.h; or replay/recovery growth above max_delta) in
    # escalate_after consecutive health runs is drained (escalate_action)
    "nvlink_errors": _D(Action.WARN, 1.0, {"max_delta": 0, "max_crc_per_s": 100, "escalate_after": 3,
                                           "escalate_action": "drain"}),
    # width below max fails; replays per minute above DCGM's DCGM_FR_PCI_REPLAY_RATE default (8) warn
    "pcie": _D(Action.DRAIN, 1.0, {"max_replays_per_min": 8}),
    "fabric": _D(Action.DRAIN, 1.0),
    "inforom": _D(Action.DRAIN, 1.0),
    "power": _D(Action.WARN, 1.0, {"min_limit_pct": 95}),
    "mig": _D(Action.DRAIN, 1.0, {"expected": None}),
    "gpu_procs": _D(Action.DRAIN, 1.0),
    "ib": _D(Action.DRAIN, 1.0, {"min_rate_gbps": None, "mtu": None, "max_link_downed_delta": 0,
                                 "max_symbol_error_delta": 0}),
    "cpu_governor": _D(Action.WARN, 1.0, {"expected": "performance"}),
    "memory": _D(Action.WARN, 1.0, {"min_available_pct": 5.0}),
    "disk_space": _D(Action.DRAIN, 1.0, {"paths": ("/tmp", "/dev/shm"), "min_free_pct": 5.0}),
    "slurmd_oom": _D(Action.WARN, 1.0, {"expected_adj": -1000}),
    # --- node checks NHC sites run (LBNL NHC, AzNHC, Meta GCM), in the health check by default -------------------
    # network filesystems (and the listed mount points) mounted and answering statvfs within timeout_s (NHC
    # check_fs_mount; a hung or ESTALE mount fails); never df on every mount (NHC #76/#77)
    "filesystems": _D(Action.DRAIN, 1.0, {"required": ()}, hooks=_NODE_HOOKS),
    # EDAC memory-controller counters since boot: any uncorrectable error fails (NHC check_hw_mcelog's intent);
    # correctable errors above max_correctable warn
    "edac": _D(Action.DRAIN, 1.0, {"max_uncorrectable": 0, "max_correctable": 1000}, hooks=_NODE_HOOKS),
    # machine checks in the kernel log this boot (xid.py, the same pass and cursor as the XIDs): a poisoned page or
    # an uncorrected memory error fails; logged corrected events above max_correctable warn (edac's key names)
    "mce": _D(Action.DRAIN, 1.0, {"max_uncorrectable": 0, "max_correctable": 10}, hooks=_NODE_HOOKS),
    # required daemons alive (NHC check_ps_service): munged always; on a GPU node nvidia-persistenced, nv-fabricmanager
    # where NVML reports an NVSwitch fabric; nvidia-imex / nv-hostengine (DCGM) when imex / dcgm is true
    # (a process counts only where it runs a root-controlled file of that name as one of the daemon's users: checks.py
    # DAEMON_USERS, ``users`` adds a site's: {name: [user or uid, ...]})
    "daemons": _D(Action.DRAIN, 1.0, {"required": ("munged",), "imex": False, "dcgm": False, "users": None},
                  hooks=_NODE_HOOKS),
    # online CPUs and physical memory not below the inventory's (NHC check_hw_cpuinfo, check_hw_physmem); the
    # fudge is MemTotal's shortfall against memory_mb the kernel's own reservations explain
    "hardware": _D(Action.DRAIN, 1.0, {"memory_fudge_pct": 0.0}, hooks=_NODE_HOOKS),
    # processes in uninterruptible sleep (Meta GCM's D-state check): more than max_count warns
    "dstate": _D(Action.WARN, 1.0, {"max_count": 0}, hooks=_NODE_HOOKS),
    # driver, VBIOS, InfoROM image against the fleet's expected versions (each a version or a list); without
    # expectations the versions are recorded for `slurmkit report firmware`, which names the odd nodes out
    "firmware": _D(Action.WARN, 1.0, {"driver": None, "vbios": None, "inforom": None}, hooks=_NODE_HOOKS),
    # NUMA node of each GPU (by PCI bus id) and HCA against gpu_numa / hca_numa, else the node's first run
    "topology": _D(Action.WARN, 1.0, {"gpu_numa": None, "hca_numa": None}, hooks=_NODE_HOOKS),
    # the BMC's verdict on this node, written by `slurmkit bmc --state-dir` on the management host into the node's
    # (shared) state dir: a failed fan fails (drain); a lost PSU redundancy or a hot inlet warns; no verdict skips;
    # one older than max_age_s (the writer stopped) warns and never drains
    "bmc": _D(Action.DRAIN, 1.0, {"max_age_s": 1800}, hooks=_NODE_HOOKS),
    # --- what NHC / AzNHC configurations check besides (issue 35 item 5; the README's "checks versus NHC/AzNHC") ---
    # free inodes (statvfs f_favail / f_files) on each path (NHC check_fs_ifree; a filesystem without an inode count,
    # f_files 0 as on btrfs, is not judged: NHC's "bogus check" case)
    "inodes": _D(Action.DRAIN, 1.0, {"paths": ("/tmp", "/dev/shm"), "min_free_pct": 5.0}, hooks=_NODE_HOOKS),
    # swap size in MB between min_mb and max_mb (NHC check_hw_swap; AzNHC's GPU confs require none: max_mb 0) and
    # free swap (NHC check_hw_swap_free); nothing set: the sizes are recorded
    "swap": _D(Action.WARN, 1.0, {"min_mb": None, "max_mb": None, "min_free_pct": None}, hooks=_NODE_HOOKS),
    # network interfaces that must exist and be up (NHC check_hw_eth, which AzNHC lists for eth0 and ib0..ib7):
    # ``required`` and the node group's ``by_group`` list, plus the inventory's kind: eth NICs
    "interfaces": _D(Action.DRAIN, 1.0, {"required": (), "by_group": None}, hooks=_NODE_HOOKS),
    # DMI/SMBIOS fields (/sys/class/dmi/id: bios_version, board_name, ...) against the expected values, each a value
    # or a list (NHC check_dmi_data_match); ``by_group`` per node group
    "dmi": _D(Action.WARN, 1.0, {"expected": None, "by_group": None}, hooks=_NODE_HOOKS),
    # NVMe namespaces nvme<N>n1 (AzNHC check_nvme_count): fewer or more than expected fails; ``by_group`` per group
    "nvme": _D(Action.DRAIN, 1.0, {"expected": None, "by_group": None}, hooks=_NODE_HOOKS),
    # load average at or above the limits (NHC check_ps_loadavg); ``per_cpu``: the limits are per online CPU
    "load": _D(Action.WARN, 1.0, {"max_1m": None, "max_5m": None, "max_15m": None, "per_cpu": False},
               hooks=_NODE_HOOKS),
    # processes of ordinary users (uid >= min_uid, not exempt_users) with no job on the node (NHC
    # check_ps_unauth_users); whose job a process is in comes from its job cgroup or slurmstepd ancestry. Off until
    # a site turns it on: an admin logged in with an ordinary uid would drain the node
    "unauth_procs": _D(Action.DRAIN, 1.0, {"min_uid": 1000, "exempt_users": ()}, hooks=_NODE_HOOKS,
                       enabled=False),
    # the site's file tests (NHC check_file_test, check_file_contents): [{path, test: [exists, file, dir, ...],
    # not: bool, match: regex, no_match: regex}]
    "files": _D(Action.DRAIN, 1.0, {"tests": ()}, hooks=_NODE_HOOKS),
    # the site's commands (NHC check_cmd_output / check_cmd_status): [{name, argv | shell, exit, match, no_match,
    # timeout_s}]; run only from a policy file only root (or the hook's own user) can change, without a shell
    # unless ``shell`` says so, with a clean environment, a timeout and bounded output (commands.py)
    "commands": _D(Action.DRAIN, 1.0, {"run": ()}, hooks=_NODE_HOOKS),
}

# DMI fields a check may name: the world-readable attributes of /sys/class/dmi/id (drivers/firmware/dmi-id.c; the
# serials and UUIDs are root-only and none of the fleet's business)
DMI_FIELDS = ("bios_vendor", "bios_version", "bios_date", "bios_release", "ec_firmware_release", "sys_vendor",
              "product_name", "product_version", "product_family", "product_sku", "board_vendor", "board_name",
              "board_version", "chassis_vendor", "chassis_type", "chassis_version")
# what check_file_test's test(1) operators ask, by name (-e -f -d -L -S -p -b -c -s -r -w -x -u -g -k -O -G)
FILE_TESTS = ("exists", "file", "dir", "symlink", "socket", "pipe", "block", "char", "nonempty", "readable",
              "writable", "executable", "setuid", "setgid", "sticky", "owned", "group_owned")
FILE_TEST_KEYS = {"path", "test", "not", "match", "no_match"}
COMMAND_KEYS = {"name", "argv", "shell", "exit", "match", "no_match", "timeout_s", "max_output_bytes"}
COMMAND_MAX_OUTPUT = 65536  # bytes of a command's output kept and matched (the rest is read and dropped)

COMMON_KEYS = {"enabled", "action", "timeout_s", "hooks"}
GLOBAL_KEYS = {"budget_s", "resume_after_passes", "scontrol_timeout_s", "textfile_dir", "epilog_active"}
EPILOG_ACTIVE_KEYS = {"enabled", "budget_s", "level", "method", "peer_pct", "min_interval_s"}
# Signals that end a job from outside (scancel, the time limit, preemption: SIGTERM then SIGKILL; a terminal's
# SIGHUP/SIGINT), not a fault of the node: after these the epilog's active stage does not run.
STOP_SIGNALS = frozenset({1, 2, 9, 15})
# gpusub's exit code for a run stopped unfinished (checkpoint saved, requeue follows): jobs/rundir.py STOPPED_EXIT,
# not imported here (the hooks' hot path stays free of the jobs package)
REQUEUE_EXIT = 75
# node_exporter's textfile collector directory on Debian/Ubuntu (prometheus-node-exporter's default
# --collector.textfile.directory); used when it exists and the site set no textfile_dir
DEFAULT_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


@dataclass(frozen=True)
class CheckPolicy:
    name: str
    enabled: bool
    action: Action
    timeout_s: float
    hooks: frozenset[str]
    settings: Mapping[str, Any]

    def get(self, key: str) -> Any:
        return self.settings.get(key)


@dataclass(frozen=True)
class EpilogActive:
    """``hooks.checks.epilog_active``: the active stage (`check --active`) in the epilog of a job that failed on its
    own, on that job's GPUs only (other jobs may hold the rest). Off by default: it keeps the node COMPLETING for
    up to ``budget_s``, which must fit, with the hook's own budget, inside PrologEpilogTimeout."""

    budget_s: float = 30.0
    level: int = 1
    method: str = "auto"
    peer_pct: float = 85.0
    min_interval_s: float = 3600.0  # a crash-looping user must not hold the node in the epilog after every crash


@dataclass(frozen=True)
class Policy:
    checks: Mapping[str, CheckPolicy]
    budget_s: float = 5.0
    resume_after_passes: int = 3
    scontrol_timeout_s: float = 1.0
    textfile_dir: str | None = None  # hooks.checks.textfile_dir: where the Prometheus textfile goes
    epilog_active: EpilogActive | None = None  # None: the epilog never runs the active stage

    def check(self, name: str) -> CheckPolicy:
        return self.checks[name]

    def enabled_for(self, hook: str) -> list[CheckPolicy]:
        return [c for c in self.checks.values() if c.enabled and hook in c.hooks]


def _err(path: str, msg: str, source: str | None) -> InventoryError:
    return InventoryError(path, msg, source)


def _unknown(key: str, allowed: set[str], path: str, source: str | None) -> InventoryError:
    import difflib  # only on bad input: not on the hook's hot path

    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(allowed))}"
    return _err(path, f"unknown key{hint}", source)


def _number(v: Any, path: str, source: str | None, *, minimum: float | None = None, integer: bool = False,
            exclusive_min: bool = False) -> float | int:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok:
        raise _err(path, f"expected {'an integer' if integer else 'a number'}, got {v!r}", source)
    if minimum is not None and (v <= minimum if exclusive_min else v < minimum):
        raise _err(path, f"must be {'>' if exclusive_min else '>='} {minimum:g}, got {v!r}", source)
    return v


def _int_list(v: Any, path: str, source: str | None) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise _err(path, f"expected a list of integers, got {v!r}", source)
    for i, x in enumerate(v):
        _number(x, f"{path}[{i}]", source, minimum=0, integer=True)
    return tuple(v)


def _setting(check: str, key: str, v: Any, path: str, source: str | None) -> Any:
    """Validate one check-specific setting; returns the normalised value."""
    if v is None:
        return None
    if key in ("expected_adj",):
        return _number(v, path, source, minimum=-1000, integer=True)
    if key in ("expected",) and check in ("gpu_count",):
        return _number(v, path, source, minimum=0, integer=True)
    if key == "expected" and check == "mig":
        if not isinstance(v, bool):
            raise _err(path, f"expected true or false, got {v!r}", source)
        return v
    if key == "expected" and check == "cpu_governor":
        if not isinstance(v, str) or not v:
            raise _err(path, f"expected a governor name such as 'performance', got {v!r}", source)
        return v
    if key in ("max_volatile_uncorrected", "max_sram_correctable", "max_dram_errors", "max_uncorrectable",
               "max_delta", "max_link_downed_delta", "max_symbol_error_delta"):
        return _number(v, path, source, minimum=0, integer=True)
    if key in ("max_replays_per_min", "max_crc_per_s"):
        return _number(v, path, source, minimum=0)
    if key == "escalate_after":
        return _number(v, path, source, minimum=1, integer=True)
    if key == "escalate_action":
        if v not in ("warn", "drain", "drain+reboot"):
            raise _err(path, f"expected one of warn, drain, drain+reboot, got {v!r}", source)
        return v
    if key == "drain_pending_when_idle":
        if not isinstance(v, bool):
            raise _err(path, f"expected true or false, got {v!r}", source)
        return v
    if key == "min_limit_pct":
        n = _number(v, path, source, minimum=0, exclusive_min=True)
        if n > 100:
            raise _err(path, f"a percentage must be <= 100, got {v!r}", source)
        return n
    if key == "mtu":
        return _number(v, path, source, minimum=0, integer=True, exclusive_min=True)
    if key == "expected" and check == "persistence":
        if not isinstance(v, bool):
            raise _err(path, f"expected true or false, got {v!r}", source)
        return v
    if key in ("warn_c", "max_c", "min_rate_gbps"):
        return _number(v, path, source, minimum=0, exclusive_min=True)
    if key in ("min_available_pct", "min_free_pct"):
        n = _number(v, path, source, minimum=0)
        if n > 100:
            raise _err(path, f"a percentage must be <= 100, got {v!r}", source)
        return n
    if key == "version":
        if not isinstance(v, (str, int, float)) or isinstance(v, bool) or not str(v).strip():
            raise _err(path, f"expected a driver version string such as '550.54.15', got {v!r}", source)
        return str(v).strip()
    if key == "codes":
        return _int_list(v, path, source)
    if key == "required" and check == "filesystems":
        if not isinstance(v, (list, tuple)) or not all(isinstance(p, str) and p.startswith("/") for p in v):
            raise _err(path, f"expected a list of absolute mount points, got {v!r}", source)
        return tuple(v)
    if key == "required" and check == "daemons":
        if not isinstance(v, (list, tuple)) or not all(isinstance(p, str) and p for p in v):
            raise _err(path, f"expected a list of process names such as 'munged', got {v!r}", source)
        return tuple(v)
    if key == "users" and check == "daemons":
        if not isinstance(v, Mapping) or not all(
                isinstance(k, str) and k and isinstance(us, (list, tuple)) and us
                and all(isinstance(u, (str, int)) and not isinstance(u, bool) and str(u) for u in us)
                for k, us in v.items()):
            raise _err(path, f"expected a mapping of daemon name -> list of users (names or uids), such as "
                             f"{{'munged': ['munge']}}, got {v!r}", source)
        return {k: tuple(str(u) for u in us) for k, us in v.items()}
    if key in ("imex", "dcgm"):
        if not isinstance(v, bool):
            raise _err(path, f"expected true or false, got {v!r}", source)
        return v
    if key in ("max_count", "max_correctable"):
        return _number(v, path, source, minimum=0, integer=True)
    if key == "memory_fudge_pct":
        n = _number(v, path, source, minimum=0)
        if n > 50:
            raise _err(path, f"a fudge above 50% hides a lost DIMM bank, got {v!r}", source)
        return n
    if key in ("driver", "vbios", "inforom"):
        vals = v if isinstance(v, (list, tuple)) else [v]
        if not vals or not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) and str(x).strip()
                               for x in vals):
            raise _err(path, f"expected a version string or a list of them, got {v!r}", source)
        return tuple(str(x).strip() for x in vals)
    if key in ("gpu_numa", "hca_numa"):
        if not isinstance(v, Mapping) or not all(isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
                                                 for k, n in v.items()):
            raise _err(path, "expected a mapping of " + ("PCI bus id" if key == "gpu_numa" else "HCA name")
                       + f" -> NUMA node, got {v!r}", source)
        if key == "gpu_numa":
            from slurmkit.health.gpuid import norm_bus

            bad = [k for k in v if norm_bus(k) is None]
            if bad:
                raise _err(path, f"not a PCI bus id: {bad[0]!r} (expected such as '0000:18:00.0')", source)
        return dict(v)
    if key == "bus_ids":
        from slurmkit.health.gpuid import norm_bus

        if not isinstance(v, (list, tuple)) or not all(isinstance(b, str) and norm_bus(b) for b in v):
            raise _err(path, f"expected a list of PCI bus ids such as '0000:18:00.0', got {v!r}", source)
        return tuple(v)
    if key == "reasons":
        if not isinstance(v, (list, tuple)):
            raise _err(path, f"expected a list of {', '.join(CLOCK_REASON_BITS)}", source)
        for i, r in enumerate(v):
            if r not in CLOCK_REASON_BITS:
                import difflib

                close = difflib.get_close_matches(str(r), list(CLOCK_REASON_BITS), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(CLOCK_REASON_BITS)}"
                raise _err(f"{path}[{i}]", f"unknown clock-event reason {r!r}{hint}", source)
        return tuple(v)
    if key == "paths":
        if not isinstance(v, (list, tuple)) or not all(isinstance(p, str) and p.startswith("/") for p in v):
            raise _err(path, f"expected a list of absolute paths, got {v!r}", source)
        return tuple(v)
    if key == "max_age_s":
        return _number(v, path, source, minimum=0, exclusive_min=True)
    return _nhc_setting(check, key, v, path, source)


def _bool(v: Any, path: str, source: str | None) -> bool:
    if not isinstance(v, bool):
        raise _err(path, f"expected true or false, got {v!r}", source)
    return v


def _regex(v: Any, path: str, source: str | None) -> str:
    import re

    if not isinstance(v, str) or not v:
        raise _err(path, f"expected a regular expression, got {v!r}", source)
    try:
        re.compile(v)
    except re.error as exc:
        raise _err(path, f"not a valid regular expression: {exc}", source) from None
    return v


def _str_list(v: Any, path: str, source: str | None, what: str) -> tuple[str, ...]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) and x.strip() for x in v):
        raise _err(path, f"expected a list of {what}, got {v!r}", source)
    return tuple(x.strip() for x in v)


def _ifname(v: Any, path: str, source: str | None) -> str:
    # Linux's dev_valid_name (net/core/dev.c): at most IFNAMSIZ-1 (15) bytes, no '/', ':' or whitespace, not . or ..
    if not isinstance(v, str) or not v or len(v.encode()) > 15 or v in (".", "..") or any(
            c in v for c in "/: \t\n"):
        raise _err(path, f"not a network interface name (at most 15 characters, no '/', ':' or spaces): {v!r}",
                   source)
    return v


def _dmi_expected(v: Any, path: str, source: str | None) -> dict[str, tuple[str, ...]]:
    if not isinstance(v, Mapping) or not v:
        raise _err(path, f"expected a mapping of DMI field -> value or list of values, such as "
                         f"{{'bios_version': '2.1.3'}}, got {v!r}", source)
    out: dict[str, tuple[str, ...]] = {}
    for k, want in v.items():
        if k not in DMI_FIELDS:
            raise _unknown(str(k), set(DMI_FIELDS), f"{path}.{k}", source)
        vals = want if isinstance(want, (list, tuple)) else [want]
        if not vals or not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) and str(x).strip()
                               for x in vals):
            raise _err(f"{path}.{k}", f"expected a value or a list of them, got {want!r}", source)
        out[k] = tuple(str(x).strip() for x in vals)
    return out


def _by_group(check: str, v: Any, path: str, source: str | None) -> dict[str, Any]:
    """``by_group: {<node group>: <what the check's own key takes>}``: that group's nodes are held to it."""
    if not isinstance(v, Mapping) or not all(isinstance(k, str) and k for k in v):
        raise _err(path, f"expected a mapping of node group name -> expectation, got {v!r}", source)
    out: dict[str, Any] = {}
    for g, want in v.items():
        gp = f"{path}.{g}"
        if check == "nvme":
            out[g] = _number(want, gp, source, minimum=0, integer=True)
        elif check == "dmi":
            out[g] = _dmi_expected(want, gp, source)
        else:  # interfaces
            if not isinstance(want, (list, tuple)):
                raise _err(gp, f"expected a list of interface names, got {want!r}", source)
            out[g] = tuple(_ifname(x, f"{gp}[{i}]", source) for i, x in enumerate(want))
    return out


def _file_tests(v: Any, path: str, source: str | None) -> tuple[dict[str, Any], ...]:
    if not isinstance(v, (list, tuple)):
        raise _err(path, f"expected a list of file tests such as [{{path: /etc/slurm/ok, test: file}}], got {v!r}",
                   source)
    out = []
    for i, t in enumerate(v):
        tp = f"{path}[{i}]"
        if not isinstance(t, Mapping):
            raise _err(tp, f"expected a mapping with path and test, got {t!r}", source)
        for k in t:
            if k not in FILE_TEST_KEYS:
                raise _unknown(str(k), FILE_TEST_KEYS, f"{tp}.{k}", source)
        p = t.get("path")
        if not isinstance(p, str) or not p.startswith("/"):
            raise _err(f"{tp}.path", f"expected an absolute path (%n: the node's name), got {p!r}", source)
        tests = t.get("test", "exists")
        tests = [tests] if isinstance(tests, str) else tests
        if not isinstance(tests, (list, tuple)) or not tests:
            raise _err(f"{tp}.test", f"expected a test name or a list of them ({', '.join(FILE_TESTS)})", source)
        for j, name in enumerate(tests):
            if name not in FILE_TESTS:
                raise _unknown(str(name), set(FILE_TESTS), f"{tp}.test[{j}]", source)
        entry: dict[str, Any] = {"path": p, "test": tuple(tests), "not": _bool(t.get("not", False), f"{tp}.not",
                                                                               source)}
        for k in ("match", "no_match"):
            if t.get(k) is not None:
                entry[k] = _regex(t[k], f"{tp}.{k}", source)
        out.append(entry)
    return tuple(out)


def _commands(v: Any, path: str, source: str | None) -> tuple[dict[str, Any], ...]:
    if not isinstance(v, (list, tuple)):
        raise _err(path, "expected a list of commands such as [{name: gpfs, argv: [/usr/lpp/mmfs/bin/mmhealth, "
                         f"node, show], match: HEALTHY}}], got {v!r}", source)
    out = []
    names: set[str] = set()
    for i, c in enumerate(v):
        cp = f"{path}[{i}]"
        if not isinstance(c, Mapping):
            raise _err(cp, f"expected a mapping with name and argv (or shell), got {c!r}", source)
        for k in c:
            if k not in COMMAND_KEYS:
                raise _unknown(str(k), COMMAND_KEYS, f"{cp}.{k}", source)
        name = c.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 40 or any(ch.isspace() for ch in name):
            raise _err(f"{cp}.name", f"expected a short name without spaces (it names the finding), got {name!r}",
                       source)
        if name in names:
            raise _err(f"{cp}.name", f"{name!r} is used twice", source)
        names.add(name)
        argv, shell = c.get("argv"), c.get("shell")
        if (argv is None) == (shell is None):
            raise _err(cp, "expected exactly one of argv (run as given, no shell) or shell (a /bin/sh -c line)",
                       source)
        entry: dict[str, Any] = {"name": name}
        if argv is not None:
            if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
                raise _err(f"{cp}.argv", f"expected a list of strings, got {argv!r}", source)
            if not argv[0].startswith("/"):
                # no PATH search: the program is the one the site named, wherever the hook's PATH points
                raise _err(f"{cp}.argv[0]", f"expected the program's absolute path, got {argv[0]!r}", source)
            entry["argv"] = tuple(argv)
        else:
            if not isinstance(shell, str) or not shell.strip():
                raise _err(f"{cp}.shell", f"expected a shell command line, got {shell!r}", source)
            entry["shell"] = shell
        entry["exit"] = int(_number(c.get("exit", 0), f"{cp}.exit", source, minimum=0, integer=True))
        for k in ("match", "no_match"):
            if c.get(k) is not None:
                entry[k] = _regex(c[k], f"{cp}.{k}", source)
        if c.get("timeout_s") is not None:
            entry["timeout_s"] = float(_number(c["timeout_s"], f"{cp}.timeout_s", source, minimum=0,
                                               exclusive_min=True))
        mx = c.get("max_output_bytes", COMMAND_MAX_OUTPUT)
        entry["max_output_bytes"] = int(_number(mx, f"{cp}.max_output_bytes", source, minimum=1, integer=True))
        if entry["max_output_bytes"] > 1 << 20:
            raise _err(f"{cp}.max_output_bytes", f"at most 1048576 (1 MiB) is kept, got {mx!r}", source)
        out.append(entry)
    return tuple(out)


def _nhc_setting(check: str, key: str, v: Any, path: str, source: str | None) -> Any:
    """The settings of the checks issue 35 item 5 added (the NHC/AzNHC ones)."""
    if key in ("min_mb", "max_mb", "min_uid"):
        return _number(v, path, source, minimum=0, integer=True)
    if key in ("max_1m", "max_5m", "max_15m"):
        return _number(v, path, source, minimum=0, exclusive_min=True)
    if key == "per_cpu":
        return _bool(v, path, source)
    if key == "required" and check == "interfaces":
        if not isinstance(v, (list, tuple)):
            raise _err(path, f"expected a list of interface names such as ['eth0', 'ib0'], got {v!r}", source)
        return tuple(_ifname(x, f"{path}[{i}]", source) for i, x in enumerate(v))
    if key == "by_group":
        return _by_group(check, v, path, source)
    if key == "expected" and check == "nvme":
        return _number(v, path, source, minimum=0, integer=True)
    if key == "expected" and check == "dmi":
        return _dmi_expected(v, path, source)
    if key == "exempt_users":
        if not isinstance(v, (list, tuple)) or not all(
                isinstance(u, (str, int)) and not isinstance(u, bool) and str(u).strip() for u in v):
            raise _err(path, f"expected a list of user names or uids, got {v!r}", source)
        return tuple(str(u).strip() for u in v)
    if key == "tests":
        return _file_tests(v, path, source)
    if key == "run":
        return _commands(v, path, source)
    raise AssertionError(f"no validator for {check}.{key}")  # CHECK_DEFAULTS and this function drifted apart


def parse_policy(raw: Mapping[str, Any] | None, *, path: str = "hooks.checks", source: str | None = None) -> Policy:
    """Validate ``raw`` (the ``hooks.checks`` mapping) and merge it over the defaults."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise _err(path, f"expected a mapping of check name -> settings, got {type(raw).__name__}", source)
    allowed = set(CHECK_DEFAULTS) | GLOBAL_KEYS
    for key in raw:
        if not isinstance(key, str) or key not in allowed:
            raise _unknown(str(key), allowed, f"{path}.{key}", source)
    budget = float(_number(raw.get("budget_s", 5.0), f"{path}.budget_s", source, minimum=0, exclusive_min=True))
    passes = int(_number(raw.get("resume_after_passes", 3), f"{path}.resume_after_passes", source, minimum=1, integer=True))
    sc_timeout = float(_number(raw.get("scontrol_timeout_s", 1.0), f"{path}.scontrol_timeout_s", source,
                               minimum=0, exclusive_min=True))
    if sc_timeout >= budget:
        raise _err(f"{path}.scontrol_timeout_s", f"must be below budget_s ({budget:g}) or a drain could never fit", source)
    textfile_dir = raw.get("textfile_dir")
    if textfile_dir is not None and (not isinstance(textfile_dir, str) or not textfile_dir.startswith("/")):
        raise _err(f"{path}.textfile_dir", f"expected an absolute directory path, got {textfile_dir!r}", source)
    epilog_active = _epilog_active(raw.get("epilog_active"), f"{path}.epilog_active", source)
    checks: dict[str, CheckPolicy] = {}
    for name, dflt in CHECK_DEFAULTS.items():
        cpath = f"{path}.{name}"
        entry = raw.get(name, {})
        if entry is None:
            entry = {}
        if isinstance(entry, bool):
            entry = {"enabled": entry}
        if not isinstance(entry, Mapping):
            raise _err(cpath, f"expected a mapping or true/false, got {entry!r}", source)
        known = COMMON_KEYS | set(dflt.settings)
        for key in entry:
            if not isinstance(key, str) or key not in known:
                raise _unknown(str(key), known, f"{cpath}.{key}", source)
        enabled = entry.get("enabled", dflt.enabled)
        if not isinstance(enabled, bool):
            raise _err(f"{cpath}.enabled", f"expected true or false, got {enabled!r}", source)
        action = dflt.action
        if "action" in entry:
            try:
                action = Action.parse(str(entry["action"]))
            except ValueError:
                raise _err(f"{cpath}.action", f"expected one of warn, drain, drain+reboot, got {entry['action']!r}",
                           source) from None
            if action == Action.NONE:
                raise _err(f"{cpath}.action", "expected one of warn, drain, drain+reboot, got 'none'", source)
        timeout = float(_number(entry.get("timeout_s", dflt.timeout_s), f"{cpath}.timeout_s", source, minimum=0,
                                exclusive_min=True))
        if timeout > budget:
            raise _err(f"{cpath}.timeout_s", f"must not exceed budget_s ({budget:g}), got {timeout:g}", source)
        hooks = entry.get("hooks", list(dflt.hooks))
        if not isinstance(hooks, (list, tuple)) or not all(h in HOOK_KINDS for h in hooks):
            raise _err(f"{cpath}.hooks", f"expected a list drawn from {', '.join(HOOK_KINDS)}, got {hooks!r}", source)
        settings = dict(dflt.settings)
        for key in dflt.settings:
            if key in entry:
                settings[key] = _setting(name, key, entry[key], f"{cpath}.{key}", source)
        if name == "temperature" and settings["warn_c"] is not None and settings["max_c"] is not None \
                and settings["warn_c"] > settings["max_c"]:
            raise _err(f"{cpath}.warn_c", f"must not exceed max_c ({settings['max_c']:g})", source)
        if name == "commands":
            for i, c in enumerate(settings["run"] or ()):
                if c.get("timeout_s", 0) > timeout:
                    raise _err(f"{cpath}.run[{i}].timeout_s", f"must not exceed the check's timeout_s ({timeout:g}): "
                               "the commands run one after the other within it", source)
        checks[name] = CheckPolicy(name, enabled, action, timeout, frozenset(hooks), settings)
    return Policy(checks=checks, budget_s=budget, resume_after_passes=passes, scontrol_timeout_s=sc_timeout,
                  textfile_dir=textfile_dir, epilog_active=epilog_active)


def _epilog_active(v: Any, path: str, source: str | None) -> EpilogActive | None:
    if v is None or v is False:
        return None
    if v is True:
        return EpilogActive()
    if not isinstance(v, Mapping):
        raise _err(path, f"expected true/false or a mapping, got {v!r}", source)
    for key in v:
        if not isinstance(key, str) or key not in EPILOG_ACTIVE_KEYS:
            raise _unknown(str(key), EPILOG_ACTIVE_KEYS, f"{path}.{key}", source)
    enabled = v.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _err(f"{path}.enabled", f"expected true or false, got {enabled!r}", source)
    if not enabled:
        return None
    d = EpilogActive()
    level = _number(v.get("level", d.level), f"{path}.level", source, minimum=1, integer=True)
    if level not in (1, 2):  # dcgmi diag -r 1|2: level 3+ takes many minutes, never in an epilog
        raise _err(f"{path}.level", f"expected 1 or 2, got {level!r}", source)
    method = v.get("method", d.method)
    if method not in ("auto", "dcgm", "torch"):
        raise _err(f"{path}.method", f"expected one of auto, dcgm, torch, got {method!r}", source)
    peer = float(_number(v.get("peer_pct", d.peer_pct), f"{path}.peer_pct", source, minimum=0, exclusive_min=True))
    if peer > 100:
        raise _err(f"{path}.peer_pct", f"must be at most 100, got {peer:g}", source)
    return EpilogActive(
        budget_s=float(_number(v.get("budget_s", d.budget_s), f"{path}.budget_s", source, minimum=0,
                               exclusive_min=True)),
        level=int(level), method=str(method), peer_pct=peer,
        min_interval_s=float(_number(v.get("min_interval_s", d.min_interval_s), f"{path}.min_interval_s", source,
                                     minimum=0)))


def job_failed_on_its_own(exit_code2: str | None) -> bool | None:
    """SLURM_JOB_EXIT_CODE2 (``<exit>:<signal>`` of the batch script; set in the Epilog only,
    slurm-22-05-8-1 and slurm-24-11-5-1 src/plugins/prep/script/prep_script_slurmd.c, doc/html/prolog_epilog.shtml).
    True: it exited non-zero or died of a signal of its own (SIGSEGV, SIGABRT, SIGBUS: a CUDA fault's usual end);
    False: it succeeded, was stopped from outside (STOP_SIGNALS: scancel, time limit, preemption) or stopped for a
    requeue (gpusub's 75); None: Slurm did not say (unset or unreadable)."""
    if not exit_code2 or ":" not in exit_code2:
        return None
    code, _, sig = exit_code2.strip().partition(":")
    if not (code.isdigit() and sig.isdigit()):
        return None
    c, s = int(code), int(sig)
    if s:
        return s not in STOP_SIGNALS
    # a shell reports its child's fatal signal as 128+N (bash(1) EXIT STATUS)
    if c > 128 and c - 128 in STOP_SIGNALS:
        return False
    return c not in (0, REQUEUE_EXIT)


def load_site_policy(path: str) -> Policy:
    """A site YAML whose top level is the ``hooks.checks`` mapping (imports yaml only when used)."""
    from slurmkit.errors import UsageError
    from slurmkit.model import yamlio

    try:
        with open(path) as f:
            data = yamlio.load(f)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read policy: {exc.strerror}") from exc
    except yamlio.DuplicateKeyError as exc:
        raise InventoryError(exc.path, exc.message, path) from None
    except yamlio.YAMLError as exc:
        raise InventoryError("", f"not valid YAML: {exc}", path) from exc
    return parse_policy(data or {}, path="checks", source=path)
