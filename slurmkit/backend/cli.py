"""Backend over Slurm's command-line tools: machine-readable output only, every call through ``run()``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmkit.backend import parse
from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.jobjson import JobRecord, parse_extra, parse_jobs_json
from slurmkit.backend.parse import JobInfo, NodeInfo, SwitchRecord
from slurmkit.backend.run import run
from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.release import scontrol_json


class JobNotFound(SlurmkitError):
    pass


class CLIBackend:
    """``env`` is added to every command's environment (e.g. ``SLURM_CONF`` of a lab)."""

    def __init__(self, timeout: float = 20.0, env: Mapping[str, str] | None = None):
        self.timeout = timeout
        self.env = dict(env) if env else None
        self._version: str | None = None

    def _run(self, argv: Sequence[str], timeout: float | None = None, **kw):  # type: ignore[no-untyped-def]
        return run(argv, timeout or self.timeout, env=self.env, **kw)

    # --- facts -----------------------------------------------------------------------------------------------
    def version(self) -> str:
        """Slurm release of the installed clients: ``sinfo --version`` (needs no controller), remembered per
        sinfo binary (``_version_cache``): gpusub's node query waited on this one, every submit."""
        if self._version is None:
            binary, stamp = _sinfo_stamp(self.env)
            cached = _read_version_cache().get(binary) if binary else None
            if cached is not None and stamp is not None and cached[0] == list(stamp):
                self._version = str(cached[1])
                return self._version
            try:
                out = self._run(["sinfo", "--version"], timeout=5).stdout
            except SlurmCommandError:
                out = self._run(["slurmctld", "-V"], timeout=5).stdout  # clients without a config source fail above
                binary = None  # not sinfo's answer
            self._version = parse.parse_version(out)
            if binary and stamp is not None:
                _write_version_cache(binary, stamp, self._version)
        return self._version

    def features(self):  # type: ignore[no-untyped-def]
        from slurmkit.release import features_for

        return features_for(self.version())

    def nodes(self, names: Sequence[str] | None = None) -> list[NodeInfo]:
        if scontrol_json(self.version()):
            # every field per node, typed; the text form needs -d for GresUsed (the JSON implies it)
            nodes = parse.parse_nodes_json(self._run(["scontrol", "--json", "show", "node"]).stdout,
                                           what="scontrol --json show node")
        else:
            nodes = parse.parse_scontrol_nodes(self._run(["scontrol", "-o", "-d", "show", "node"]).stdout)
        if names is not None:
            want = set(names)
            nodes = [n for n in nodes if n.name in want]
        return nodes

    def node(self, name: str) -> NodeInfo:
        if scontrol_json(self.version()):
            nodes = parse.parse_nodes_json(self._run(["scontrol", "--json", "show", "node", name]).stdout,
                                           what=f"scontrol --json show node {name}")
        else:
            nodes = parse.parse_scontrol_nodes(self._run(["scontrol", "-o", "-d", "show", "node", name]).stdout)
        if not nodes:
            raise SlurmkitError(f"node {name!r} not found")
        return nodes[0]

    def topology(self) -> list[SwitchRecord]:
        res = self._run(["scontrol", "show", "topology"], check=False)
        if res.rc != 0:
            if "No topology" in res.stdout + res.stderr:
                return []
            raise SlurmCommandError(res.argv, res.rc, res.stderr)
        return parse.parse_topology(res.stdout)

    def blocks(self) -> list[parse.BlockRecord]:
        """topology/block's blocks (empty with any other plugin, and on releases before 23.11)."""
        res = self._run(["scontrol", "show", "topology"], check=False)
        return parse.parse_blocks(res.stdout) if res.rc == 0 else []

    def partitions(self) -> list[dict[str, str]]:
        out = self._run(["scontrol", "-o", "show", "partition"]).stdout
        return [r for r in parse.parse_scontrol_records(out) if "PartitionName" in r]

    def pending(self) -> list[parse.PendingJob]:
        """Every pending job, with its pin (ReqNodeList) and reason: what placement must not take from it."""
        out = self._run(["squeue", "-h", "-t", "PD", "-o", parse.PENDING_FORMAT]).stdout
        return parse.parse_pending(out)

    def reservations(self) -> list[parse.Reservation]:
        res = self._run(["scontrol", "-o", "show", "reservation"], check=False)
        if res.rc != 0:
            if "No reservations" in res.stdout + res.stderr:
                return []
            raise SlurmCommandError(res.argv, res.rc, res.stderr)
        return parse.parse_reservations(res.stdout)

    def mpi_plugins(self) -> list[str]:
        """``srun --mpi=list`` on this host (needs no controller, only the config): [] when srun cannot say."""
        res = self._run(["srun", "--mpi=list"], check=False)
        return parse.parse_mpi_list(res.stdout) if res.rc == 0 else []

    def update_job(self, job_id: str, **fields: str) -> None:
        """``scontrol update JobId=J Key=value ...`` (scontrol(1): ReqNodeList= clears a pending job's pin).
        Without SLURM_JOBID, as the batch shell sends it: called inside an allocation (a follower in salloc), scontrol
        looks up J's allocation after a NodeList/ReqNodeList update and, once J runs, writes slurm_job_J_resize.sh and
        .csh into the cwd (update_job.c _update_job_size, 22.05 and 24.11)."""
        self._run(["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())],
                  unset=("SLURM_JOBID",))

    def create_reservation(self, **fields: str) -> None:
        """``scontrol create reservation Key=value ...`` (scontrol(1) 22.05 and 24.11: ReservationName, StartTime,
        Duration, Nodes, Users, Flags)."""
        self._run(["scontrol", "create", "reservation", *(f"{k}={v}" for k, v in fields.items())])

    def update_reservation(self, name: str, **fields: str) -> None:
        """``scontrol update ReservationName=R Key=value ...`` (scontrol(1) 22.05 and 24.11, RESERVATIONS: "You
        cannot update the StartTime of a reservation in ACTIVE state" -- one that has not started yet can be)."""
        self._run(["scontrol", "update", f"ReservationName={name}", *(f"{k}={v}" for k, v in fields.items())])

    def delete_reservation(self, name: str) -> None:
        self._run(["scontrol", "delete", f"ReservationName={name}"])

    def job_details(self) -> list[JobRecord]:
        """Every job with its per-node allocation (``gres_by_node``), from the release's JSON job listing
        (``release.JOB_LISTINGS``): fields no job name or comment can forge."""
        return self._job_records()

    def _job_records(self, job_id: str | None = None) -> list[JobRecord]:
        from slurmkit.release import job_listing

        listing = job_listing(self.version())
        argv = [*listing.argv, *((job_id,) if job_id is not None and listing.by_id else ())]
        res = self._run(argv, check=False)
        if res.rc != 0:
            if job_id is not None and "Invalid job id" in res.stderr:
                return []
            raise SlurmCommandError(res.argv, res.rc, res.stderr)
        recs = parse_jobs_json(res.stdout, " ".join(listing.argv))
        if job_id is not None:
            recs = [r for r in recs if r.get("JobId") == str(job_id)]
        if listing.extra_argv and recs:
            types = [t for t, _ in listing.extra]
            extra = parse_extra(self._run(list(listing.extra_argv)).stdout, types, " ".join(listing.extra_argv))
            for r in recs:
                for (_t, key), v in zip(listing.extra, extra.get(r["JobId"], ()), strict=False):
                    r[key] = v
        return recs

    # --- jobs ------------------------------------------------------------------------------------------------
    def submit(self, request: SubmitRequest) -> str:
        res = self._run(request.command(), input=request.script, cwd=request.workdir, unset=request.env_unset)
        return parse.parse_sbatch_parsable(res.stdout)

    def test_only(self, request: SubmitRequest) -> str | None:
        res = self._run(["sbatch", "--test-only", *request.argv], input=request.script, cwd=request.workdir, check=False,
                        unset=request.env_unset)
        if res.rc != 0:
            raise SlurmCommandError(res.argv, res.rc, res.stderr)
        return parse.parse_sbatch_test_only(res.stderr)

    def jobs(self, job_ids: Sequence[str] | None = None) -> list[JobInfo]:
        """Queued and recently finished jobs (slurmctld keeps finished ones for MinJobAge), one call."""
        jobs = [parse.job_from_scontrol(r) for r in self._job_records()]
        if job_ids is not None:
            want = {str(j) for j in job_ids}
            jobs = [j for j in jobs if j.job_id in want]
        return jobs

    def live_jobs(self) -> list[JobInfo]:
        """Pending and running jobs of every partition (hidden ones too: squeue(1) --all), only the fields of
        ``parse.SQUEUE_JOB_FIELDS``: what `slurmkit exporter` reads, at a fraction of ``jobs()``'s cost at 20,000
        jobs (bench/exporter_bench.py)."""
        out = self._run(["squeue", "--all", "-h", "-t", "PENDING,RUNNING", "-O", parse.SQUEUE_JOB_FORMAT]).stdout
        return parse.parse_squeue_jobs(out)

    def job(self, job_id: str) -> JobInfo:
        recs = self._job_records(str(job_id))
        if not recs:
            raise JobNotFound(f"job {job_id} not found (finished more than MinJobAge ago, or never existed)")
        return parse.job_from_scontrol(recs[0])

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch:
            argv.append("--batch")
        self._run([*argv, str(job_id)])

    def requeue(self, job_id: str) -> None:
        self._run(["scontrol", "requeue", str(job_id)])

    # --- nodes -----------------------------------------------------------------------------------------------
    def drain(self, nodes: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={nodes}", "state=drain", f"reason={reason}"])

    def resume(self, nodes: str) -> None:
        self._run(["scontrol", "update", f"nodename={nodes}", "state=resume"])

    def reconfigure(self) -> None:
        self._run(["scontrol", "reconfigure"], timeout=max(self.timeout, 60))

    def show_config(self) -> str:
        """``scontrol show config`` as text (its HASH_VAL line compares the slurm.conf that SLURM_CONF names with the
        one slurmctld loaded)."""
        return str(self._run(["scontrol", "show", "config"], timeout=10).stdout)

    def ping(self) -> bool:
        res = self._run(["scontrol", "ping"], check=False, timeout=5)
        return res.rc == 0 and "UP" in res.stdout


# --- the Slurm version, per sinfo binary ------------------------------------------------------------------------
# One small JSON file per user: {real path of sinfo: [[size, mtime_ns, ctime_ns, inode, dev], version]}. An upgrade
# replaces the binary (a new inode and ctime): asked again. Only an ELF binary is remembered: a site's wrapper script
# may run another sinfo without changing itself. Any problem: ``sinfo --version``, as before.

def _version_cache_file() -> str:
    import os

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit", "slurm-version.json")


def _sinfo_stamp(env: Mapping[str, str] | None) -> tuple[str | None, tuple[int, ...] | None]:
    import os
    from shutil import which

    path = (env or {}).get("PATH") or os.environ.get("PATH")
    found = which("sinfo", path=path)
    if not found:
        return None, None
    real = os.path.realpath(found)
    try:
        with open(real, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return None, None
            st = os.fstat(fh.fileno())
    except OSError:
        return None, None
    return real, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _read_version_cache() -> dict[str, list[object]]:
    import json
    import os

    try:
        with open(_version_cache_file(), encoding="utf-8") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:  # only our own, unshared file
                return {}
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 2} if isinstance(data, dict) else {}


def _write_version_cache(binary: str, stamp: tuple[int, ...], version: str) -> None:
    import json
    import os

    data = _read_version_cache()
    data[binary] = [list(stamp), version]
    target = _version_cache_file()
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(os.path.dirname(target))
        tmp = f"{target}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, target)
    except OSError:
        pass


def default_backend(env: Mapping[str, str] | None = None, timeout: float = 20.0) -> CLIBackend:
    """The CLI backend runs everywhere; pyslurm is used only when its adapter says it matches (see pyslurm.py)."""
    return CLIBackend(timeout=timeout, env=env)
