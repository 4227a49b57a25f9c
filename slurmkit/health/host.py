"""Non-NVML gathers: sysfs and procfs reads only (no subprocesses, no psutil import on the hot path).

Every function takes its roots so tests point them at a temporary tree; each returns raw data for ``checks.py``.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostPaths:
    sys_root: str = "/sys"
    proc_root: str = "/proc"
    kmsg: str = "/dev/kmsg"
    dev_root: str = "/dev"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# Port counters that count link flaps and line errors (the kernel's ib_core sysfs, what `perfquery` shows):
# LinkDownedCounter, SymbolErrorCounter, LinkErrorRecoveryCounter.
IB_FLAP_COUNTERS = ("link_downed", "symbol_error", "link_error_recovery")


def gather_ib(paths: HostPaths) -> dict[str, Any]:
    """``/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}`` — what ``ibstat`` shows — plus
    the flap counters under ``counters/`` and the MTU of each IPoIB interface on the HCA (``device/net/<if>/mtu``)."""
    base = os.path.join(paths.sys_root, "class", "infiniband")
    if not os.path.isdir(base):
        return {"absent": True}
    devices: dict[str, Any] = {}
    mtus: dict[str, dict[str, int | None]] = {}
    for dev in sorted(os.listdir(base)):
        ports: dict[str, Any] = {}
        pdir = os.path.join(base, dev, "ports")
        for port in sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []:
            p = os.path.join(pdir, port)
            ports[port] = {k: _read(os.path.join(p, k)) for k in ("state", "phys_state", "rate", "link_layer")}
            counters: dict[str, int] = {}
            for c in IB_FLAP_COUNTERS:
                v = _read(os.path.join(p, "counters", c))
                if v is not None and v.isdigit():
                    counters[c] = int(v)
            if counters:
                ports[port]["counters"] = counters
        devices[dev] = ports
        ndir = os.path.join(base, dev, "device", "net")
        if os.path.isdir(ndir):
            for ifname in sorted(os.listdir(ndir)):
                v = _read(os.path.join(ndir, ifname, "mtu"))
                mtus.setdefault(dev, {})[ifname] = int(v) if v is not None and v.isdigit() else None
    return {"devices": devices, "mtu": mtus}


def gather_cpu_governor(paths: HostPaths) -> dict[str, Any]:
    files = glob.glob(os.path.join(paths.sys_root, "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
    if not files:
        return {"absent": True}
    counts: dict[str, int] = {}
    for f in files:
        g = _read(f) or "unreadable"
        counts[g] = counts.get(g, 0) + 1
    return {"governors": counts, "cpus": len(files)}


def gather_memory(paths: HostPaths) -> dict[str, Any]:
    text = _read(os.path.join(paths.proc_root, "meminfo")) or ""
    vals: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            vals[key] = int(rest.split()[0])  # kB
    return {"total_kb": vals.get("MemTotal"), "available_kb": vals.get("MemAvailable")}


def gather_disk(paths_to_check: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in paths_to_check:
        try:
            st = os.statvfs(p)
        except OSError as exc:
            out[p] = {"error": exc.strerror or str(exc)}
            continue
        total = st.f_blocks * st.f_frsize
        avail = st.f_bavail * st.f_frsize
        out[p] = {"total_bytes": total, "avail_bytes": avail}
    return out


def _comm(proc_root: str, pid: int) -> str | None:
    return _read(os.path.join(proc_root, str(pid), "comm"))


def _cmdline(proc_root: str, pid: int) -> list[str]:
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_slurmd(paths: HostPaths, node: str | None, ppid: int | None = None) -> int | None:
    """slurmd serving ``node``: our parent when slurmd runs us, else a scan of /proc.

    Several slurmd per host (the lab, multiple-slurmd builds) are told apart by ``-N <node>``.
    """
    if ppid and _comm(paths.proc_root, ppid) == "slurmd":
        return ppid
    found: list[tuple[int, list[str]]] = []
    for d in os.listdir(paths.proc_root):
        if d.isdigit() and _comm(paths.proc_root, int(d)) == "slurmd":
            found.append((int(d), _cmdline(paths.proc_root, int(d))))
    if not found:
        return None
    if node:
        for pid, argv in found:
            for i, a in enumerate(argv):
                if (a == "-N" and i + 1 < len(argv) and argv[i + 1] == node) or a == f"-N{node}":
                    return pid
    named = [pid for pid, argv in found if "-N" not in argv and not any(a.startswith("-N") for a in argv)]
    return min(named) if named else (found[0][0] if len(found) == 1 else None)


def gather_slurmd_oom(paths: HostPaths, node: str | None, ppid: int | None) -> dict[str, Any]:
    pid = find_slurmd(paths, node, ppid)
    if pid is None:
        return {"absent": True}
    adj = _read(os.path.join(paths.proc_root, str(pid), "oom_score_adj"))
    return {"pid": pid, "oom_score_adj": int(adj) if adj is not None and adj.lstrip("-").isdigit() else None}


def process_start_ticks(proc_root: str, pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: with the pid, a stable identity for one slurmd instance."""
    text = _read(os.path.join(proc_root, str(pid), "stat"))
    if not text:
        return None
    try:
        return int(text.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def gpus_expected_by_devices(paths: HostPaths) -> bool:
    """/dev/nvidia0.. exist: the node has NVIDIA GPUs even if nobody told us (so NVML missing is a failure)."""
    return bool(glob.glob(os.path.join(paths.dev_root, "nvidia[0-9]*")))


# --- whose is a GPU process (local facts only: no Slurm command from a prolog/epilog) -------------------------

# slurmstepd names itself "slurmstepd: [<job>.<step>]" (slurm-22-05-8-1 src/slurmd/slurmstepd/slurmstepd.c
# _set_job_log_prefix: setproctitle("[%s]") of the step id; het jobs print "<job>+<offset>.<step>").
_STEPD_RE = re.compile(r"\[(\d+)(?:\+\d+)?\.[^\]]*\]")
# Slurm's own job cgroups, as its plugins name them: cgroup v1 ``/slurm/uid_1000/job_42/step_0`` (slurm-22-05-8-1
# src/plugins/cgroup/v1/cgroup_v1.c: "%s/uid_%u" under CgroupSlurmPrefix "slurm", "slurm_<node>" with
# multiple-slurmd, then "job_%u"), v2 ``.../slurmstepd.scope/job_42/step_0/user/task_0`` (cgroup/v2/cgroup_v2.c:
# "job_%u" under the slurmstepd scope). Only those layouts: under cgroup v2 an ordinary user may create cgroups of
# any name in the subtree systemd delegates to them (user@UID.service), so a bare ``/job_42/`` proves nothing.
# 26.05's v2 names it by SLUID unless cgroup.conf has CgroupJobIdPaths=yes, which slurmkit's cgroup.conf sets.
_CGROUP_JOB_RE = re.compile(r"^\d+:[^:]*:(?:/[^/]+)*?(?:/slurm(?:_[^/]+)?/uid_\d+|/slurmstepd\.scope)/job_(\d+)(?:/|$)",
                            re.MULTILINE)
_MAX_ANCESTORS = 64


def _ppid(proc_root: str, pid: int) -> int | None:
    text = _read(os.path.join(proc_root, str(pid), "stat"))
    try:
        return int(text.rsplit(")", 1)[1].split()[1]) if text else None
    except (IndexError, ValueError):
        return None


def stepd_job(proc_root: str, pid: int) -> str | None:
    """The job ``pid`` is the slurmstepd of, when it is a real one: named slurmstepd, every uid root and the
    executable a root-controlled file named slurmstepd (``exe_identity``); its "[job.step]" title is then root's.
    Any user can name a process slurmstepd and give it that title."""
    if _comm(proc_root, pid) != "slurmstepd":
        return None
    uids = proc_uids(proc_root, pid)
    if not uids or uids[0] != 0:  # real uid root: only root makes one (slurmstepd seteuid()s to the user at times)
        return None
    ident = exe_identity(proc_root, pid)
    exe = str(ident.get("exe") or "")
    # Debian installs it as slurmstepd-wlm behind an alternatives link: comm is the name exec'd, exe the file
    if not ident.get("trusted") or not os.path.basename(exe.removesuffix(" (deleted)")).startswith("slurmstepd"):
        return None
    m = _STEPD_RE.search(" ".join(_cmdline(proc_root, pid)))
    return m.group(1) if m else None


def running_jobs(proc_root: str) -> set[str]:
    """Job ids with a live slurmstepd on this host: the jobs that still run here, read from /proc alone."""
    jobs: set[str] = set()
    try:
        names = os.listdir(proc_root)
    except OSError:
        return jobs
    for d in names:
        if d.isdigit() and _comm(proc_root, int(d)) == "slurmstepd":
            job = stepd_job(proc_root, int(d))
            if job:
                jobs.add(job)
    return jobs


def _ancestor_job(proc_root: str, pid: int, memo: dict[int, str | None]) -> str | None:
    """The job of the nearest real slurmstepd above ``pid`` (not ``pid`` itself); ``memo`` keeps each walked
    process's answer, so a scan over many processes reads each shared ancestor once."""
    walked: list[int] = []
    cur: int | None = pid
    job: str | None = None
    for _ in range(_MAX_ANCESTORS):
        cur = _ppid(proc_root, cur) if cur is not None else None
        if cur is None or cur <= 1:
            break
        if cur in memo:
            job = memo[cur]
            break
        walked.append(cur)
        job = stepd_job(proc_root, cur)
        if job:
            break
    # a walked process's answer is the job found at or above it (the stepd found is its own answer)
    for w in walked:
        memo[w] = job
    return job


def job_of_pid(proc_root: str, pid: int, memo: dict[int, str | None] | None = None) -> str | None:
    """The Slurm job a process runs in, from what only Slurm and root could have made: its job cgroup
    (proctrack/cgroup: Slurm's own layout, ``_CGROUP_JOB_RE``), else the real slurmstepd it descends from
    (proctrack/linuxproc: the parent chain up to a root slurmstepd, ``stepd_job``), else -- for a process that is
    root's in every uid, whose environment only root wrote -- the SLURM_JOB_ID in its environment (a root job's
    leftover that left its step). Never an ordinary user's environment: any user can start a process with
    SLURM_JOB_ID=<another user's running job> and so claim that job's protection."""
    text = _read(os.path.join(proc_root, str(pid), "cgroup")) or ""
    m = _CGROUP_JOB_RE.search(text)
    # never under a user's systemd instance (user@UID.service), the subtree systemd delegates to that user
    if m and "/user@" not in text[text.rfind("\n", 0, m.start()) + 1:m.end()]:
        return m.group(1)
    job = _ancestor_job(proc_root, pid, {} if memo is None else memo)
    if job:
        return job
    uids = proc_uids(proc_root, pid)
    if not uids or any(uids):
        return None
    try:
        with open(os.path.join(proc_root, str(pid), "environ"), "rb") as f:
            env = f.read()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            v = item[len(b"SLURM_JOB_ID="):].decode(errors="replace")
            return v if v.isdigit() else None
    return None


def gpu_process_owners(proc_root: str, procs_by_gpu: dict[str, Any]) -> dict[str, Any]:
    """For every pid NVML lists: ``{"job": id | None, "running": bool}``; ``running`` means a slurmstepd of that job
    is alive here. Reads /proc only when some GPU has a process (the usual prolog reads nothing)."""
    pids = {int(p["pid"]) for v in procs_by_gpu.values() if isinstance(v, list) for p in v if isinstance(p, dict)
            and isinstance(p.get("pid"), int)}
    if not pids:
        return {}
    live = running_jobs(proc_root)
    out: dict[str, Any] = {}
    for pid in sorted(pids):
        job = job_of_pid(proc_root, pid)
        # ``start``: with the pid, which process this judgement is about (a kill later checks it is still that one)
        out[str(pid)] = {"job": job, "running": job is not None and job in live,
                         "start": process_start_ticks(proc_root, pid)}
    return out


def other_jobs_of_uid(proc_root: str, uid: int, exclude_job: str | None) -> list[str]:
    """Jobs other than ``exclude_job`` that still run here (a live slurmstepd) and own a process of ``uid``."""
    live = running_jobs(proc_root) - ({exclude_job} if exclude_job else set())
    if not live:
        return []
    found: set[str] = set()
    memo: dict[int, str | None] = {}
    for d in os.listdir(proc_root):
        if not d.isdigit():
            continue
        status = _read(os.path.join(proc_root, d, "status")) or ""
        line = next((ln for ln in status.splitlines() if ln.startswith("Uid:")), "")
        parts = line.split()
        if len(parts) < 2 or parts[1] != str(uid):
            continue
        job = job_of_pid(proc_root, int(d), memo)
        if job in live:
            found.add(job)
    return sorted(found, key=int)


def persistenced_running(paths: HostPaths) -> bool:
    """nvidia-persistenced is alive (its comm, cut by the kernel to 15 characters, is 'nvidia-persiste')."""
    try:
        names = os.listdir(paths.proc_root)
    except OSError:
        return False
    return any(d.isdigit() and (_comm(paths.proc_root, int(d)) or "").startswith("nvidia-persiste") for d in names)


# --- NHC-style node checks (issue 23 item 5): one pass over each source, no subprocess ---------------------------

# Filesystem types that live on another machine: a dead server hangs stat() on them (NHC #76/#77: never df them all
# in the hook's own thread). What LBNL NHC's check_fs_mount and AzNHC's confs check by type.
NETWORK_FS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "cephfs", "ceph", "fuse.glusterfs",
                        "glusterfs", "panfs", "wekafs", "fuse.sshfs", "9p", "orangefs", "pvfs2"})


def read_mounts(paths: HostPaths) -> list[tuple[str, str, str]]:
    """(device, mount point, type) of every mount (/proc/self/mounts, octal escapes undone)."""
    return [m[:3] for m in _read_mounts(paths)]


def _read_mounts(paths: HostPaths) -> list[tuple[str, str, str, str]]:
    """(device, mount point, type, options) of every mount (/proc/self/mounts, octal escapes undone)."""
    text = _read(os.path.join(paths.proc_root, "self", "mounts")) or ""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3:
            out.append((f[0], f[1].replace("\\040", " ").replace("\\011", "\t"), f[2], f[3] if len(f) > 3 else ""))
    return out


def users_fuse_mount(fstype: str, options: str) -> int | None:
    """The uid of the ordinary user who mounted this FUSE filesystem, None when root did (or it is no FUSE mount).

    Any user can mount FUSE where setuid fusermount3 is installed (Apptainer, enroot and sshfs need it), choosing
    the subtype (``-o subtype=sshfs`` makes the type ``fuse.sshfs``, one of NETWORK_FS), the device text and the
    mount point; the kernel stores the mounting user as ``user_id=`` (fs/fuse/inode.c, fuse_show_options).
    Without ``allow_other`` the kernel answers root's statfs itself (fuse_statfs: a process
    fuse_allow_current_process refuses gets a zeroed answer), but where /etc/fuse.conf has ``user_allow_other``
    the user's daemon answers root's statvfs, or never does, or is gone (ENOTCONN): a user's mount says nothing
    about the node and must never drain it."""
    if not (fstype == "fuse" or fstype == "fuseblk" or fstype.startswith(("fuse.", "fuseblk."))):
        return None
    for opt in options.split(","):
        key, _, val = opt.partition("=")
        if key == "user_id":
            return int(val) if val.isdigit() and int(val) != 0 else None
    return None


def gather_filesystems(paths: HostPaths, required: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    """Every network mount and every required path: mounted, and answering a statvfs within ``timeout_s`` (each
    in its own daemon thread, all in parallel: a hung NFS server costs the budget once, never the hook)."""
    import threading
    import time

    mounts = _read_mounts(paths)
    by_point = {m[1]: m for m in mounts}
    targets: dict[str, dict[str, Any]] = {}
    users_mounts = 0
    for dev, point, fstype, opts in mounts:
        if fstype in NETWORK_FS:
            if users_fuse_mount(fstype, opts) is not None:
                users_mounts += 1  # an ordinary user's FUSE mount (fusermount3): theirs, not the node's
                continue
            targets[point] = {"type": fstype, "device": dev, "required": False}
    for p in required:
        m = by_point.get(p)
        targets[p] = {"type": m[2] if m else None, "device": m[0] if m else None, "required": True,
                      "mounted": m is not None}
    results: dict[str, Any] = {}

    def probe(point: str) -> None:
        t = time.monotonic()
        try:
            os.statvfs(point)
            results[point] = {"ok": True, "s": round(time.monotonic() - t, 6)}
        except OSError as exc:
            results[point] = {"ok": False, "error": exc.strerror or str(exc), "errno": exc.errno}

    threads = []
    for point, info in targets.items():
        if info.get("mounted") is False:
            continue
        th = threading.Thread(target=probe, args=(point,), daemon=True, name=f"statvfs {point}")
        th.start()
        threads.append(th)
    end = time.monotonic() + timeout_s
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    for point, info in targets.items():
        info.update(results.get(point, {"ok": False, "hung": True} if info.get("mounted") is not False else {}))
    return {"mounts": targets, "timeout_s": timeout_s, **({"users_fuse_mounts": users_mounts} if users_mounts else {})}


def gather_edac(paths: HostPaths) -> dict[str, Any]:
    """Host memory errors since boot, per memory controller (EDAC: /sys/devices/system/edac/mc/mc*/{ce,ue}_count)."""
    mcs = sorted(glob.glob(os.path.join(paths.sys_root, "devices/system/edac/mc/mc[0-9]*")))
    if not mcs:
        return {"absent": True}
    out: dict[str, Any] = {}
    for mc in mcs:
        vals = {k: _read(os.path.join(mc, f"{k}_count")) for k in ("ce", "ue")}
        out[os.path.basename(mc)] = {k: int(v) if v is not None and v.isdigit() else None for k, v in vals.items()}
    return {"controllers": out}


def proc_uids(proc_root: str, pid: int) -> tuple[int, ...] | None:
    """Real, effective, saved and filesystem uid of ``pid`` (the ``Uid:`` line of /proc/<pid>/status), as root's
    namespace sees them (a process in a user namespace shows its real uid here, not the namespace's 0)."""
    text = _read(os.path.join(proc_root, str(pid), "status"))
    for line in (text or "").splitlines():
        if line.startswith("Uid:"):
            try:
                return tuple(int(x) for x in line.split()[1:5])
            except ValueError:
                return None
    return None


def _root_controlled_dir(path: str) -> str:
    """"" when no one but root can change what ``path`` (an absolute directory) holds: every directory from / down
    is root's and not writable by group or others, unless sticky (/tmp: others cannot rename or remove root's
    entries there, and the next component is checked in its turn). Else the first directory that fails, and why."""
    import stat as st_

    cur = "/"
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts) + 1):
        if i:
            cur = os.path.join(cur, parts[i - 1])
        try:
            s = os.lstat(cur)
        except OSError as exc:
            return f"{cur}: {exc.strerror}"
        if not st_.S_ISDIR(s.st_mode):
            return f"{cur}: not a directory"
        if s.st_uid != 0:
            return f"{cur}: owned by uid {s.st_uid}"
        if s.st_mode & 0o022 and not s.st_mode & st_.S_ISVTX:
            return f"{cur}: writable by {'group' if s.st_mode & 0o020 else 'others'}"
    return ""


def exe_identity(proc_root: str, pid: int) -> dict[str, Any]:
    """What ``pid`` runs (the kernel's /proc/<pid>/exe link) and whether only root could have put it there:
    ``{"exe": path, "trusted": bool, "why": reason when not}``. Trusted: the executable's inode (stat through the
    link, so a binary replaced by a package upgrade, "(deleted)", is still the one that runs) is root's and not
    writable by group or others, and its directory is root-controlled (``_root_controlled_dir``). A process name is
    no identity: comm is the basename of any file a user executes (``cp /bin/sleep nvidia-imex``) or anything a
    process sets with prctl(PR_SET_NAME) (proc(5), /proc/pid/comm)."""
    link = os.path.join(proc_root, str(pid), "exe")
    try:
        exe = os.readlink(link)
        s = os.stat(link)
    except OSError as exc:
        return {"exe": None, "trusted": False, "why": f"exe unreadable: {exc.strerror}"}
    # proc(5): "If the pathname has been unlinked, the symbolic link will contain the string '(deleted)' appended"
    path = exe[:-len(" (deleted)")] if exe.endswith(" (deleted)") else exe
    path = os.path.realpath(path) if os.path.isabs(path) else path
    if not os.path.isabs(path):
        return {"exe": exe, "trusted": False, "why": "exe is not a path"}
    if s.st_uid != 0:
        return {"exe": exe, "trusted": False, "why": f"{path} owned by uid {s.st_uid}"}
    if s.st_mode & 0o022:
        return {"exe": exe, "trusted": False, "why": f"{path} writable by group or others"}
    why = _root_controlled_dir(os.path.dirname(path))
    return {"exe": exe, "trusted": not why, **({"why": why} if why else {})}


def process_identity(proc_root: str, pid: int) -> dict[str, Any]:
    """``pid``'s uids (real first), the executable behind it and its start time: who runs it and what, as only the
    kernel and root could have made them (never its name, arguments or environment)."""
    uids = proc_uids(proc_root, pid)
    ident: dict[str, Any] = {"pid": pid, "uid": uids[0] if uids else None,
                             "all_root": bool(uids) and not any(uids or ()), **exe_identity(proc_root, pid),
                             "start": process_start_ticks(proc_root, pid)}
    return ident


def _note_daemon(seen: dict[str, Any], comm: str, ident: dict[str, Any]) -> None:
    """Keep one pid per uid of the processes that run a root-controlled executable of that name, and a few samples
    of the rest: a name any user can take a thousand times costs a bounded record, and never hides the real one."""
    exe = ident.get("exe") or ""
    base = os.path.basename(exe[:-len(" (deleted)")] if exe.endswith(" (deleted)") else exe)
    # comm is the basename exec'd (cut to 15): the file itself may carry a suffix behind a link (Debian's
    # alternatives: /usr/sbin/slurmstepd -> /etc/alternatives/slurmstepd -> /usr/sbin/slurmstepd-wlm)
    if ident.get("trusted") and not base.startswith(comm):
        ident = {**ident, "trusted": False, "why": f"runs {exe}, not a file named {comm}"}
    if ident.get("trusted") and ident.get("uid") is not None:
        seen["by_uid"].setdefault(str(ident["uid"]), ident["pid"])
    elif len(seen["untrusted"]) < 5:
        seen["untrusted"].append({k: ident.get(k) for k in ("pid", "uid", "exe", "why")})


def scan_processes(paths: HostPaths, verify: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """One pass over /proc/<pid>/stat: the command names running (daemons) and the processes in D state.

    For each process whose name is one of ``verify`` (daemon names, cut to comm's 15 characters), also who runs it
    and what (``process_identity``, under ``daemons``): the daemons check believes the kernel's exe link and uid,
    not the name. Only those few processes cost more than the one stat read."""
    names: set[str] = set()
    want = {v[:15] for v in verify}
    daemons: dict[str, dict[str, Any]] = {}
    dstate: list[dict[str, Any]] = []
    try:
        pids = [d for d in os.listdir(paths.proc_root) if d.isdigit()]
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    root = paths.proc_root + "/"
    for d in pids:
        try:  # os.open/os.read: a third of open()'s cost, which matters over a thousand processes
            fd = os.open(root + d + "/stat", os.O_RDONLY)
            try:
                raw = os.read(fd, 512)
            finally:
                os.close(fd)
        except OSError:
            continue  # exited meanwhile
        lp, rp = raw.find(b"("), raw.rfind(b")")
        if lp < 0 or rp < 0:
            continue
        comm = raw[lp + 1:rp].decode(errors="replace")
        names.add(comm)
        if comm in want:
            _note_daemon(daemons.setdefault(comm, {"by_uid": {}, "untrusted": []}), comm,
                         process_identity(paths.proc_root, int(d)))
        if raw[rp + 2:rp + 3] == b"D":
            dstate.append({"pid": int(d), "comm": comm})
    return {"names": sorted(names), "dstate": dstate, "count": len(pids), "daemons": daemons}


def gather_hardware(paths: HostPaths) -> dict[str, Any]:
    """Online CPUs (sysfs cpu/online ranges) and physical memory (MemTotal)."""
    online = _read(os.path.join(paths.sys_root, "devices/system/cpu/online"))
    cpus = None
    if online:
        try:
            cpus = sum(int(b) - int(a) + 1 if a else 1 for a, _, b in
                       (r.partition("-") if "-" in r else ("", "", r) for r in online.split(",")))
        except ValueError:
            cpus = None
    return {"cpus": cpus, "online": online, **gather_memory(paths)}


# Clock skew a stamped age may carry without changing a verdict: a verdict first seen here is at least its stamped
# age (this node's clock minus the writer's stamp) less this old. Skews beyond NTP's usual failures (minutes) exist.
BMC_SKEW_ALLOWANCE_S = 600.0
BMC_SEEN_FILE = "bmc-seen.json"


def gather_bmc_verdict(node_state_dir: str | None, now: float, remember: bool = True) -> dict[str, Any]:
    """The node's BMC verdict file (``bmc.json`` in its state dir, monitor/bmc.py ``write_verdict``) and its age.

    The age is judged on this node's clock alone: how long this node has seen that same verdict (``bmc-seen.json``:
    the verdict's stamp and when this node first saw it), at least the stamped age less ``BMC_SKEW_ALLOWANCE_S``
    (``now`` minus the writer's ``time``, which compares two machines' clocks). Before, a verdict stamped more than
    300 s ahead of this node's clock was unreadable, so a node whose clock ran 6 minutes behind the management
    host's turned every failed fan into a WARN; and a writer's clock far ahead cannot keep a drain fresh for ever
    either, since a verdict that does not change goes stale after max_age_s of this node's time. ``remember``: keep
    the sighting (a read-only ``check`` does not write)."""
    if not node_state_dir:
        return {"absent": True, "why": "no state dir"}
    path = os.path.join(node_state_dir, "bmc.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {"absent": True, "why": f"no {path}"}
    except (OSError, ValueError) as exc:
        return {"read_error": f"{path}: {getattr(exc, 'strerror', None) or exc}"}
    import math

    if not isinstance(doc, dict) or not isinstance(doc.get("time"), (int, float)) or isinstance(doc["time"], bool) \
            or not math.isfinite(doc["time"]):
        return {"read_error": f"{path}: not a BMC verdict (no time)"}
    if not isinstance(doc.get("findings", []), list):
        return {"read_error": f"{path}: not a BMC verdict (findings is not a list)"}
    node = os.path.basename(os.path.normpath(node_state_dir))
    if doc.get("node") not in (None, node):
        return {"read_error": f"{path}: the verdict of {doc.get('node')!r}, not {node!r}"}
    stamp = float(doc["time"])
    stamped_age = now - stamp
    seen_path = os.path.join(node_state_dir, BMC_SEEN_FILE)
    seen: dict[str, Any] = {}
    try:
        with open(seen_path) as f:
            seen = json.load(f)
    except (OSError, ValueError):
        seen = {}
    first = seen.get("first_seen") if isinstance(seen, dict) and seen.get("time") == stamp else None
    if not isinstance(first, (int, float)) or isinstance(first, bool) or not math.isfinite(first) or first > now:
        first = now  # a new verdict (or this node's clock stepped back past its sighting): seen from now on
        if remember:
            from slurmkit.health.state import atomic_write

            try:
                atomic_write(seen_path, json.dumps({"time": stamp, "first_seen": now}), durable=False)
            except OSError:
                pass  # not remembered: the next run sees it anew (fresh again), the stamped age still bounds it
    age = max(now - float(first), stamped_age - BMC_SKEW_ALLOWANCE_S, 0.0)
    out = {**doc, "path": path, "age_s": round(age, 1), "seen_s": round(now - float(first), 1),
           "stamped_age_s": round(stamped_age, 1)}
    if abs(stamped_age) > 300 and now - float(first) < abs(stamped_age):
        out["clock_note"] = (f"stamped {abs(stamped_age):.0f}s {'ahead of' if stamped_age < 0 else 'behind'} this "
                             "node's clock: the age is this node's own time since it first saw the verdict")
    return out


def gather_pci_numa(paths: HostPaths) -> dict[str, Any]:
    """NUMA node of every NVIDIA GPU (PCI vendor 0x10de, class 0x03xx) and every HCA (/sys/class/infiniband)."""
    gpus: dict[str, int | None] = {}
    for dev in glob.glob(os.path.join(paths.sys_root, "bus/pci/devices/*")):
        if _read(os.path.join(dev, "vendor")) != "0x10de" or not (_read(os.path.join(dev, "class")) or "").startswith(
                "0x03"):
            continue
        v = _read(os.path.join(dev, "numa_node"))
        gpus[os.path.basename(dev)] = int(v) if v is not None and v.lstrip("-").isdigit() else None
    hcas: dict[str, int | None] = {}
    for dev in glob.glob(os.path.join(paths.sys_root, "class/infiniband/*")):
        v = _read(os.path.join(dev, "device", "numa_node"))
        hcas[os.path.basename(dev)] = int(v) if v is not None and v.lstrip("-").isdigit() else None
    return {"gpus": gpus, "hcas": hcas}


# --- what NHC / AzNHC configurations check besides (issue 35 item 5) ---------------------------------------------

def gather_inodes(paths_to_check: tuple[str, ...]) -> dict[str, Any]:
    """Inodes per path (statvfs: f_files total, f_favail free to ordinary users, as df -i counts them)."""
    out: dict[str, Any] = {}
    for p in paths_to_check:
        try:
            st = os.statvfs(p)
        except OSError as exc:
            out[p] = {"error": exc.strerror or str(exc)}
            continue
        out[p] = {"inodes": st.f_files, "free": st.f_favail}
    return out


def gather_swap(paths: HostPaths) -> dict[str, Any]:
    """SwapTotal and SwapFree (kB) from /proc/meminfo."""
    text = _read(os.path.join(paths.proc_root, "meminfo")) or ""
    vals: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("SwapTotal", "SwapFree") and rest.split() and rest.split()[0].isdigit():
            vals[key] = int(rest.split()[0])
    return {"total_kb": vals.get("SwapTotal"), "free_kb": vals.get("SwapFree")}


IFF_UP = 0x1  # include/uapi/linux/if.h: the interface is administratively up (ip link set up)


def gather_interfaces(paths: HostPaths, names: tuple[str, ...]) -> dict[str, Any]:
    """Each named interface under /sys/class/net: present, its flags (IFF_UP), operstate (RFC 2863's, the kernel's
    Documentation/networking/operstates.rst), carrier and type (1 Ethernet, 32 InfiniBand: IPoIB)."""
    base = os.path.join(paths.sys_root, "class", "net")
    out: dict[str, Any] = {}
    for n in names:
        d = os.path.join(base, n)
        if not os.path.isdir(d):
            out[n] = {"present": False}
            continue
        flags = _read(os.path.join(d, "flags")) or ""
        try:
            up = bool(int(flags, 16) & IFF_UP)
        except ValueError:
            up = None
        # carrier reads EINVAL on an interface that is down: None then
        out[n] = {"present": True, "admin_up": up, "operstate": _read(os.path.join(d, "operstate")),
                  "carrier": _read(os.path.join(d, "carrier")), "type": _read(os.path.join(d, "type"))}
    return out


def gather_dmi(paths: HostPaths, fields: tuple[str, ...]) -> dict[str, Any]:
    """The named /sys/class/dmi/id attributes (what dmidecode reads from the SMBIOS tables, as the kernel keeps
    them); ``absent`` on a machine without DMI (some ARM servers, containers without /sys/class/dmi)."""
    base = os.path.join(paths.sys_root, "class", "dmi", "id")
    if not os.path.isdir(base):
        return {"absent": True}
    return {"fields": {f: _read(os.path.join(base, f)) for f in fields}}


_NVME_NS_RE = re.compile(r"^nvme\d+n1$")


def gather_nvme(paths: HostPaths) -> dict[str, Any]:
    """The NVMe namespaces nvme<N>n1 (AzNHC counts /dev/nvme<N>n1; sysfs lists the same block devices) and each
    controller's state (/sys/class/nvme/nvme<N>/state: live, resetting, dead, ...)."""
    try:
        blocks = os.listdir(os.path.join(paths.sys_root, "class", "block"))
    except OSError:
        blocks = []
    ctrls: dict[str, Any] = {}
    cdir = os.path.join(paths.sys_root, "class", "nvme")
    for c in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
        ctrls[c] = {"state": _read(os.path.join(cdir, c, "state")), "model": _read(os.path.join(cdir, c, "model"))}
    return {"namespaces": sorted(b for b in blocks if _NVME_NS_RE.match(b)), "controllers": ctrls}


def _online_cpus(paths: HostPaths) -> int | None:
    online = _read(os.path.join(paths.sys_root, "devices/system/cpu/online"))
    if not online:
        return None
    try:
        return sum(int(b) - int(a) + 1 if a else 1 for a, _, b in
                   (r.partition("-") if "-" in r else ("", "", r) for r in online.split(",")))
    except ValueError:
        return None


def gather_load(paths: HostPaths) -> dict[str, Any]:
    """/proc/loadavg's 1, 5 and 15 minute averages and the online CPUs (the per_cpu limits' divisor)."""
    f = (_read(os.path.join(paths.proc_root, "loadavg")) or "").split()
    try:
        avg = [float(x) for x in f[:3]]
    except ValueError:
        avg = []
    if len(avg) != 3:
        return {"error": "/proc/loadavg unreadable"}
    return {"load": avg, "cpus": _online_cpus(paths)}


def gather_user_procs(paths: HostPaths, min_uid: int, exempt: frozenset[int]) -> dict[str, Any]:
    """The processes of ordinary users (real uid >= ``min_uid``, not in ``exempt``) and whose job each is in
    (``job_of_pid``: Slurm's job cgroup or a real slurmstepd ancestor, never the process's own claims), with the
    jobs that still run here (``running_jobs``). Only the status file of each process is read for the uid; the
    cgroup and ancestry only for an ordinary user's."""
    root = paths.proc_root
    try:
        pids = [int(d) for d in os.listdir(root) if d.isdigit()]
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    live = running_jobs(root)
    memo: dict[int, str | None] = {}
    procs: list[dict[str, Any]] = []
    for pid in pids:
        uids = proc_uids(root, pid)
        if not uids or uids[0] < min_uid or uids[0] in exempt:
            continue
        job = job_of_pid(root, pid, memo)
        if proc_uids(root, pid) != uids:
            continue  # exited (or exec'd a setuid program) meanwhile: not the process judged
        procs.append({"pid": pid, "uid": uids[0], "comm": _comm(root, pid), "job": job,
                      "running": job is not None and job in live})
    return {"procs": procs, "jobs": sorted(live, key=int), "scanned": len(pids)}


# test(1)'s file operators, by the names the files check takes (bash's test builtin, as NHC's check_file_test uses)
def _file_test(name: str, path: str) -> bool:
    import stat as st_

    if name == "symlink":
        try:
            return st_.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            return False
    if name in ("readable", "writable", "executable"):
        mode = {"readable": os.R_OK, "writable": os.W_OK, "executable": os.X_OK}[name]
        return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)
    try:
        s = os.stat(path)
    except OSError:
        return False
    m = s.st_mode
    return {"exists": True, "file": st_.S_ISREG(m), "dir": st_.S_ISDIR(m), "socket": st_.S_ISSOCK(m),
            "pipe": st_.S_ISFIFO(m), "block": st_.S_ISBLK(m), "char": st_.S_ISCHR(m), "nonempty": s.st_size > 0,
            "setuid": bool(m & st_.S_ISUID), "setgid": bool(m & st_.S_ISGID), "sticky": bool(m & st_.S_ISVTX),
            "owned": s.st_uid == os.geteuid(), "group_owned": s.st_gid == os.getegid()}[name]


FILE_MATCH_BYTES = 65536  # the head of a file the files check's match / no_match read


def gather_files(tests: tuple[dict[str, Any], ...], node: str) -> dict[str, Any]:
    """Each site file test: the operators that failed, and for match / no_match whether the file's head matched.
    No content goes into the result (a path a user controls could point anywhere: only yes or no comes back)."""
    import stat as st_

    out: list[dict[str, Any]] = []
    for t in tests:
        path = t["path"].replace("%n", node)
        failed = [name for name in t["test"] if not _file_test(name, path)]
        r: dict[str, Any] = {"path": path, "test": list(t["test"]), "not": t["not"], "failed": failed,
                             "exists": os.path.lexists(path)}
        if t.get("match") or t.get("no_match"):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
                try:
                    if not st_.S_ISREG(os.fstat(fd).st_mode):
                        r["read_error"] = "not a regular file"
                    else:
                        text = os.read(fd, FILE_MATCH_BYTES).decode(errors="replace")
                        if t.get("match"):
                            r["matched"] = re.search(t["match"], text, re.MULTILINE) is not None
                        if t.get("no_match"):
                            r["no_match_found"] = re.search(t["no_match"], text, re.MULTILINE) is not None
                finally:
                    os.close(fd)
            except OSError as exc:
                r["read_error"] = exc.strerror or str(exc)
        out.append(r)
    return {"tests": out}
