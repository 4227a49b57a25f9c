"""dcgm-exporter's HPC job mapping: which Slurm job holds each GPU, for dcgm-exporter's ``hpc_job`` label.

dcgm-exporter (``--hpc-job-mapping-dir`` / ``$DCGM_HPC_JOB_MAPPING_DIR``; README "How to include HPC jobs in metric
labels") reads, on every scrape, each file of that directory whose name is an integer: the file ``<gpu>`` lists the
ids of the jobs on DCGM's GPU ``<gpu>``, one per line, and every metric of that GPU is repeated once per job with
``hpc_job="<id>"`` (NVIDIA/dcgm-exporter internal/pkg/transformation/hpc.go: getGPUFiles skips a name strconv.Atoi
refuses, readFile takes one job per line; const.go hpcJobAttribute = "hpc_job"). A file whose name is not a number
(our temp files, ``.lock``) is ignored, so a file is replaced by renaming a temp file over it and dcgm-exporter never
reads one half-written.

DCGM numbers GPUs in NVML's enumeration order (its GPU id is the NVML index, the ``gpu`` label dcgm-exporter writes),
not by /dev/nvidia minor: the prolog maps the job's GPUs (SLURM_JOB_GPUS, gres indices -> minors, as the checks do)
to NVML indexes with this run's own device list.

The prolog adds its job to the files of the job's GPUs; the epilog removes its job from every file (not only its
GPUs': it needs no NVML, so a node whose driver fails still clears them) and removes a file left empty. A GPU shared
by jobs (gres/shard) lists each; a whole GPU names its one job (a stale id of a job whose epilog never ran is
replaced by the next job's prolog). Root writes in a directory that may be reachable by others: the directory is
created 0755 or, existing, refused where unsafe (a symlink, another owner, writable by others), files are created with their final mode
(0644: job ids are what squeue shows) (0600 under PrivateData) by O_CREAT|O_EXCL|O_NOFOLLOW and renamed into place; a symlink planted as a
GPU's file is never followed (read with O_NOFOLLOW: treated as empty, then replaced by the rename). Concurrent hooks
of jobs sharing a GPU take flock on the directory.

Standard library only: the node hooks import it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat

# dcgm-exporter documents no default directory (its flag's default is "", off); NVIDIA's GPU Operator, which
# deploys dcgm-exporter, points it at /var/lib/dcgm-exporter/job-mapping when HPC job mapping is on (its
# DefaultDCGMJobMappingDir), and SchedMD's Slurm Helm chart writes there (vendor.nvidia.dcgm.jobMappingDir): the
# default here, so a node where either runs needs no setting
DEFAULT_DIR = "/var/lib/dcgm-exporter/job-mapping"
FILE_MODE = 0o644
# under PrivateData=jobs or users (slurm.conf(5): other users' jobs hidden) which job holds which GPU is root's and
# dcgm-exporter's (it runs as root to reach DCGM) only, as the hook records are (state.record_mode)
PRIVATE_FILE_MODE = 0o600
DIR_MODE = 0o755
_JOB = re.compile(r"[0-9]{1,20}")
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(path: str) -> int:
    """The directory, created 0755 where missing; an existing one is used as it is (a site may keep it 0750 for
    dcgm-exporter's group) unless it is a symlink, not a directory, another user's, or writable by group or others
    (anyone could then plant or swap a GPU's file): refused, with the reason."""
    os.makedirs(os.path.dirname(path.rstrip("/")) or "/", mode=DIR_MODE, exist_ok=True)
    try:
        os.mkdir(path, DIR_MODE)
        created = True
    except FileExistsError:
        created = False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(exc.errno, "not a directory (a symlink or a file stands there)", path) from None
        raise
    try:
        st = os.fstat(fd)
        if created:
            os.fchmod(fd, DIR_MODE)  # the umask may have narrowed mkdir's mode: dcgm-exporter must read it
        elif st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}", path)
        elif stat.S_IMODE(st.st_mode) & 0o022:
            raise OSError(errno.EPERM, f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(dfd: int, name: str) -> list[str]:
    """The job ids in ``name`` (one per line); [] for a missing file, a symlink or anything not a regular file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EISDIR):
            return []
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    return [line.strip() for line in data.decode("ascii", "replace").splitlines() if line.strip()]


def _replace(dfd: int, name: str, jobs: list[str], mode: int = FILE_MODE) -> None:
    """``name`` holds exactly ``jobs`` (removed when none), atomically."""
    if not jobs:
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        return
    tmp = f".{name}.{os.getpid()}.tmp"  # not a number: dcgm-exporter skips it
    try:
        os.unlink(tmp, dir_fd=dfd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode, dir_fd=dfd)
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed the open's mode: dcgm-exporter may run as another user
        body = "".join(f"{j}\n" for j in jobs).encode()
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dfd)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a planted symlink itself, never its target


def _locked(path: str):  # type: ignore[no-untyped-def]
    dfd = _open_dir(path)
    fcntl.flock(dfd, fcntl.LOCK_EX)  # released with the fd
    return dfd


def add_job(path: str, job_id: str, gpus: list[int], mode: int = FILE_MODE, exclusive: bool = True) -> list[str]:
    """Add ``job_id`` to the file of each DCGM GPU id in ``gpus``; the names written. ``exclusive`` (no gres/shard
    on the node: Slurm gives a whole GPU to one job at a time): the file then names this job only, so the id of a
    job whose epilog never ran (killed, its node rebooted) does not label the next job's GPU. Raises ValueError for
    a job id that is not a number, OSError for a directory it must not use."""
    if not _JOB.fullmatch(job_id or ""):
        raise ValueError(f"job id {job_id!r} is not a number")
    dfd = _locked(path)
    try:
        done = []
        for g in sorted(set(gpus)):
            name = str(int(g))
            jobs = _read(dfd, name)
            if exclusive and jobs != [job_id]:
                _replace(dfd, name, [job_id], mode)
            elif not exclusive and job_id not in jobs:
                _replace(dfd, name, [j for j in jobs if _JOB.fullmatch(j)] + [job_id], mode)
            done.append(name)
        return done
    finally:
        os.close(dfd)


def remove_job(path: str, job_id: str, mode: int = FILE_MODE) -> list[str]:
    """Remove ``job_id`` from every GPU's file of the directory (a file left empty is removed); the names changed.
    Nothing to do where the directory does not exist."""
    if not _JOB.fullmatch(job_id or ""):
        raise ValueError(f"job id {job_id!r} is not a number")
    if not os.path.lexists(path):
        return []
    dfd = _locked(path)
    try:
        changed = []
        for name in sorted(os.listdir(dfd)):
            if not name.isdigit():
                continue
            jobs = _read(dfd, name)
            if job_id in jobs:
                _replace(dfd, name, [j for j in jobs if j != job_id and _JOB.fullmatch(j)], mode)
                changed.append(name)
        return changed
    finally:
        os.close(dfd)


def dcgm_ids(devices: list[dict[str, object]], minors: frozenset[int]) -> list[int]:
    """The NVML indexes (DCGM's GPU ids) of the devices whose minor is one of the job's; a device NVML lost (no
    minor) is not one DCGM reports either."""
    out = []
    for d in devices:
        if not isinstance(d, dict):
            continue
        idx, minor = d.get("index"), d.get("minor")
        if isinstance(idx, int) and isinstance(minor, int) and minor in minors and not d.get("lost"):
            out.append(idx)
    return out
