"""Pure parsers of Slurm's machine-readable output. Tested on output recorded from the lab (tests/data/slurm/)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurmkit import hostlist
from slurmkit.backend import jsonread
from slurmkit.backend.jsonread import JSONReadError
from slurmkit.backend.records import parse_oneline, split_state, strip_reason_stamp
from slurmkit.errors import ParseError

# re-exported: callers and tests import them from here
__all__ = ["JSONReadError", "ParseError", "split_state", "strip_reason_stamp"]


# --- sbatch --------------------------------------------------------------------------------------------------

def parse_sbatch_parsable(out: str) -> str:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    line = out.strip().splitlines()[-1] if out.strip() else ""
    jobid = line.split(";", 1)[0].strip()
    if not re.fullmatch(r"\d+(_\d+)?", jobid):
        raise ParseError(f"unexpected sbatch --parsable output: {out.strip()!r}")
    return jobid


def parse_sbatch_test_only(err: str) -> str | None:
    """``sbatch --test-only`` (stderr): ``sbatch: Job 12 to start at 2026-11-30T01:02:03 using 4 processors ...``."""
    m = re.search(r"to start at (\S+)", err)
    return m.group(1) if m else None


# --- scontrol -o ---------------------------------------------------------------------------------------------

def parse_scontrol_oneline(line: str) -> dict[str, str]:
    """One ``scontrol -o show node|job`` record -> {Key: value} (see ``records.parse_oneline``)."""
    return parse_oneline(line)


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    return [parse_scontrol_oneline(line) for line in text.splitlines() if line.strip() and "=" in line]


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, unknown, future, completing ...
    flags: frozenset[str] = frozenset()  # DRAIN, NOT_RESPONDING ('*'), COMPLETING, REBOOT_REQUESTED, INVALID_REG ...
    reason: str = ""
    cpus: int = 0
    sockets: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    real_memory: int = 0
    gres: str = ""
    gres_used: str = ""
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    addr: str = ""
    alloc_cpus: int = 0
    spec_cores: int = 0  # CoreSpecCount (cores kept from jobs)
    mem_spec_mb: int = 0  # MemSpecLimit (MB kept from jobs)
    weight: int = 0  # scheduling Weight (0: not reported)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    @property
    def available(self) -> bool:
        """Can take new work: not down, not draining, responding."""
        return self.state in ("idle", "mixed", "allocated", "completing") and not self.drained and self.responding

    @property
    def total_gpus(self) -> int:
        return gres_gpu_count(self.gres)

    @property
    def used_gpus(self) -> int:
        return gres_gpu_count(self.gres_used)

    @property
    def free_gpus(self) -> int:
        return max(0, self.total_gpus - self.used_gpus)


def gres_gpu_count(gres: str) -> int:
    """``gpu:h100:8(S:0-1),shard:16`` -> 8; ``gpu:h100:2(IDX:0-1)`` -> 2; ``(null)`` -> 0."""
    total = 0
    for item in _split_gres(gres):
        head = item.split("(", 1)[0]
        fields = head.split(":")
        if fields[0] != "gpu":
            continue
        try:
            total += int(fields[-1])
        except ValueError:
            total += 1 if len(fields) == 1 else 0
    return total


def _split_gres(gres: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:h100:2(IDX:0,3)``)."""
    out, depth, cur = [], 0, ""
    for ch in gres or "":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return [x for x in out if x and x != "(null)"]


def _int(v: object) -> int:
    if isinstance(v, dict):  # data_parser's {"set": true, "infinite": false, "number": N}
        v = v.get("number") if v.get("set") else 0
    try:
        return int(v or 0)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def _csv(v: str | None) -> tuple[str, ...]:
    if not v or v == "(null)":
        return ()
    return tuple(x for x in v.split(",") if x)


def node_from_scontrol(rec: dict[str, str]) -> NodeInfo:
    base, flags = split_state(rec.get("State", "UNKNOWN"))
    reason = rec.get("Reason", "")
    if reason == "(null)" or reason == "None":
        reason = ""
    return NodeInfo(
        name=rec["NodeName"],
        state=base,
        flags=flags,
        reason=reason,
        cpus=_int(rec.get("CPUTot")),
        sockets=_int(rec.get("Sockets")),
        cores_per_socket=_int(rec.get("CoresPerSocket")),
        threads_per_core=_int(rec.get("ThreadsPerCore")),
        real_memory=_int(rec.get("RealMemory")),
        gres="" if rec.get("Gres") in (None, "(null)") else rec["Gres"],
        gres_used="" if rec.get("GresUsed") in (None, "(null)") else rec.get("GresUsed", ""),
        features=_csv(rec.get("AvailableFeatures") or rec.get("Features")),
        partitions=_csv(rec.get("Partitions")),
        addr=rec.get("NodeAddr", ""),
        alloc_cpus=_int(rec.get("CPUAlloc")),
        spec_cores=_int(rec.get("CoreSpecCount")),
        mem_spec_mb=_int(rec.get("MemSpecLimit")),
        weight=_int(rec.get("Weight")),
    )


def parse_scontrol_nodes(text: str) -> list[NodeInfo]:
    return [node_from_scontrol(r) for r in parse_scontrol_records(text) if "NodeName" in r]


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, REQUEUED ...
    reason: str = ""
    nodes: tuple[str, ...] = ()
    name: str = ""
    exit_code: str = ""
    restarts: int = 0
    stdout: str = ""
    stderr: str = ""
    batch_host: str = ""
    partition: str = ""
    start_time: str = ""
    end_time: str = ""
    raw: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"}
)


def job_from_scontrol(rec: dict[str, str]) -> JobInfo:
    nodelist = rec.get("NodeList", "")
    nodes = tuple(hostlist.expand(nodelist)) if nodelist and nodelist != "(null)" else ()
    return JobInfo(
        job_id=rec["JobId"],
        state=rec.get("JobState", "UNKNOWN").split()[0],
        reason=rec.get("Reason", ""),
        nodes=nodes,
        name=rec.get("JobName", ""),
        exit_code=rec.get("ExitCode", ""),
        restarts=_int(rec.get("Restarts")),
        stdout=rec.get("StdOut", ""),
        stderr=rec.get("StdErr", ""),
        batch_host=rec.get("BatchHost", ""),
        partition=rec.get("Partition", ""),
        start_time=rec.get("StartTime", ""),
        end_time=rec.get("EndTime", ""),
        raw=rec,
    )


def parse_scontrol_jobs(text: str) -> list[JobInfo]:
    return [job_from_scontrol(r) for r in parse_scontrol_records(text) if "JobId" in r]


# --- squeue -O: the live jobs, only the fields a cluster summary reads ---------------------------------------

# (squeue --Format type, the `scontrol show job` key it fills): squeue(1) -O of slurm-22-05-8-1 and slurm-24-11-5-1
# lists every one of these types for jobs (src/squeue/opts.c long-format table: JobID, State, Reason, Account, QOS,
# UserName, SubmitTime, NumNodes, NumTasks, tres-per-job, tres-per-node, tres-per-task). Each is written "Type:|":
# _parse_long_token reads size 0 and suffix "|", and _print_str prints a width-0 field whole, unpadded and uncut
# (src/squeue/opts.c and print.c, both releases), so "|" separates the values.
# Only Account is text a user writes (without AccountingStorageEnforce any --account is taken, "|" and newlines
# too: recorded in tests/data/slurm/jobs_hostile_*.squeue_O.txt, where "a|pending|normal|bin|..." shifted UserName
# to bin and "b\n999|pending|..." made a job 999 of its own); QOS and UserName are printed from slurmctld's records
# (qos_id, uid), the rest are numbers, times and enum names. So Account goes last, where the split leaves every "|"
# it holds to it, and a line whose State is not an upper-case state name is the rest of an account's newline:
# slurmctld lower-cases every account it takes (job_mgr.c xstrtolower(job_desc->account) in _job_create and
# update_job, at slurm-22-05-8-1, slurm-24-11-5-1 and slurm-26-05-3-1), so no account can write one.
SQUEUE_JOB_FIELDS = (("JobID", "JobId"), ("State", "JobState"), ("QOS", "QOS"),
                     ("UserName", "UserId"), ("SubmitTime", "SubmitTime"), ("NumNodes", "NumNodes"),
                     ("NumTasks", "NumTasks"), ("tres-per-job", "TresPerJob"), ("tres-per-node", "TresPerNode"),
                     ("tres-per-task", "TresPerTask"), ("Reason", "Reason"), ("Account", "Account"))
SQUEUE_JOB_FORMAT = ",".join(f"{t}:|" for t, _ in SQUEUE_JOB_FIELDS)
_SQUEUE_KEYS = tuple(k for _, k in SQUEUE_JOB_FIELDS)
# squeue's JobID: "12", an array task "12_3", a pending array "12_[1-3%2]", a het job component "12+1"
_SQUEUE_JOBID = re.compile(r"\d+(?:_(?:\d+|\[[0-9,%\-]+\]))?(?:\+\d+)?")
_SQUEUE_STATE = re.compile(r"[A-Z_]+")


def parse_squeue_jobs(text: str) -> list[JobInfo]:
    """``squeue -h -O SQUEUE_JOB_FORMAT`` -> JobInfo with ``raw`` under scontrol's key names (what a caller of
    ``parse_scontrol_jobs`` reads); squeue prints N/A for an unset TRES field, which counts as unset here too.
    A line that is not a job's (an account's newline: see SQUEUE_JOB_FIELDS) is skipped; output with no job line
    at all is a ParseError."""
    n = len(_SQUEUE_KEYS)
    out = []
    bad = None
    for line in text.splitlines():
        if not line:
            continue
        f = line.split("|", n - 1)
        if len(f) != n or not _SQUEUE_JOBID.fullmatch(f[0]) or not _SQUEUE_STATE.fullmatch(f[1]):
            bad = bad or line
            continue
        f[-1] = f[-1].removesuffix("|")
        raw = dict(zip(_SQUEUE_KEYS, f, strict=True))
        out.append(JobInfo(job_id=raw["JobId"], state=raw["JobState"], reason=raw["Reason"], raw=raw))
    if bad is not None and not out:
        raise ParseError(f"unexpected squeue -O line: {bad!r}")
    return out


# --- sinfo / squeue with -o formats --------------------------------------------------------------------------

# the reason (%E) is free text an admin typed, '|' included: it goes last and the split is bounded
SINFO_NODE_FORMAT = "%N|%T|%G|%c|%m|%P|%f|%E"


def parse_sinfo_nodes(text: str) -> list[NodeInfo]:
    """``sinfo -N -h -o '%N|%T|%G|%c|%m|%P|%f|%E'`` (a node appears once per partition: merged)."""
    by_name: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|", 7)
        if len(f) < 8:
            raise ParseError(f"unexpected sinfo line: {line!r}")
        name, state, gres, cpus, mem, part, feats, reason = f
        base, flags = split_state(state)
        part = part.rstrip("*")
        prev = by_name.get(name)
        parts = (prev.partitions if prev else ()) + ((part,) if part else ())
        by_name[name] = NodeInfo(
            name=name, state=base, flags=flags, reason="" if reason == "none" else reason,
            cpus=_int(cpus), real_memory=_int(mem), gres="" if gres == "(null)" else gres,
            features=_csv(feats), partitions=tuple(dict.fromkeys(parts)),
        )
    return list(by_name.values())


SQUEUE_FORMAT = "%i|%T|%D|%N|%r|%j|%P"


def parse_squeue(text: str) -> list[JobInfo]:
    """``squeue -h -o '%i|%T|%D|%N|%r|%j|%P'``."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|")
        if len(f) < 7:
            raise ParseError(f"unexpected squeue line: {line!r}")
        jid, state, _n, nodelist, reason, name, part = f[:7]
        nodes = tuple(hostlist.expand(nodelist)) if nodelist and nodelist != "(null)" else ()
        jobs.append(JobInfo(job_id=jid, state=state, reason=reason, nodes=nodes, name=name, partition=part))
    return jobs


# --- --json (openapi v0.0.38 in 22.05; filters ignored there: filter in Python) ---------------------------------

def parse_squeue_json(text: str, job_ids: Iterable[str] | None = None, states: Iterable[str] | None = None,
                      what: str = "squeue --json") -> list[JobInfo]:
    """Jobs of ``squeue --json``; every field read through ``jsonread`` (one line naming ``what`` and the field for
    anything that is not what squeue prints)."""
    doc = jsonread.loads(text, what)
    data_parser_of(doc, what)
    want_ids = set(job_ids) if job_ids is not None else None
    want_states = {s.upper() for s in states} if states is not None else None
    out = []
    for j in doc.items("jobs"):
        jid = j.ident("job_id", required=True)
        state = _state_str(j, "job_state")
        if want_ids is not None and jid not in want_ids:
            continue
        if want_states is not None and state not in want_states:
            continue
        out.append(
            JobInfo(
                job_id=jid, state=state, reason=j.str("state_reason"), nodes=j.hostlist("nodes"),
                name=j.str("name"), partition=j.str("partition"), restarts=j.int("restart_cnt", lo=0),
            )
        )
    return out


# The data_parser plugins whose node and job records slurmkit reads (the fields used are the same in each): every
# src/plugins/data_parser/ version from slurm-23-02-7-1 (v0.0.39) to slurm-26-05-3-1 (v0.0.42-v0.0.45). Releases
# drop old ones (25.11 ships v0.0.41-v0.0.44, 26.05 v0.0.42-v0.0.45), so asking for one by name (--json=v0.0.NN)
# would break on a later release; slurmkit takes the default and reads which one answered (meta.plugin.data_parser,
# 23.02's meta.plugins.data_parser: src/interfaces/data_parser.c) and refuses one it has never read. 22.05's
# sinfo --json (openapi/v0.0.38) names no data_parser.
KNOWN_DATA_PARSERS = frozenset(f"v0.0.{n}" for n in range(39, 46))


def data_parser_of(data: jsonread.Reader | dict, what: str) -> str | None:
    """The data_parser version a JSON answer carries ("v0.0.42"), None where it names none (22.05's openapi);
    ParseError (a JSONReadError), one line, for a version slurmkit does not read."""
    doc = data if isinstance(data, jsonread.Reader) else jsonread.Reader(data, what, "")
    meta = doc.obj("meta")
    plugin = meta.obj("plugin") if meta.has("plugin") else meta.obj("plugins")
    name = plugin.str("data_parser")
    if not name:
        return None
    version = name.rsplit("/", 1)[-1]
    if version not in KNOWN_DATA_PARSERS:
        raise JSONReadError(what, "", f"data_parser {name} is not one slurmkit reads (v0.0.39-v0.0.45); a newer "
                            "Slurm than this slurmkit knows")
    return version


def parse_nodes_json(text: str, names: Iterable[str] | None = None, what: str = "node JSON") -> list[NodeInfo]:
    """Nodes from any of Slurm's JSON node listings, one NodeInfo each (the same as ``parse_scontrol_nodes`` gives
    for the same nodes, except that a reason carries no ``[user@time]`` stamp):

    - ``{"nodes": [...]}``, one record per node: ``sinfo --json`` of 22.05 (openapi v0.0.38: ``state`` a string,
      ``state_flags`` a list, ``features`` a comma string) and ``scontrol --json show node`` of 23.02+
      (data_parser v0.0.39+: ``state`` a list, base state first, then flags; ``features`` a list);
    - ``{"sinfo": [...]}``, 23.02+'s ``sinfo --json``: one record per group of nodes in the same state and
      partition (``nodes.nodes`` lists the names, ``node.state`` the state, ``reason.description`` the reason).
    Recorded: tests/data/slurm/sinfo.json (22.05), tests/data/slurm/24.11/{sinfo,scontrol_show_node}.json.
    Every field is read through ``jsonread``: a wrong type, a number that is none (1e400, NaN), a missing name
    is one JSONReadError naming ``what`` (the command) and the field (``nodes[2].cpus``)."""
    doc = jsonread.loads(text, what)
    data_parser_of(doc, what)
    want = set(names) if names is not None else None
    out: dict[str, NodeInfo] = {}
    for n in doc.items("nodes"):
        name = n.str("name", required=True)
        base, flags = _json_state(n, "state", "state_flags")
        out[name] = NodeInfo(
            name=name, state=base, flags=flags, reason=n.str("reason"),
            cpus=n.int("cpus", lo=0), sockets=n.int("sockets", lo=0), cores_per_socket=n.int("cores", lo=0),
            threads_per_core=n.int("threads", lo=0), real_memory=n.int("real_memory", lo=0),
            gres=n.str("gres"), gres_used=n.str("gres_used"),
            features=n.strs("features") or n.strs("active_features"), partitions=n.strs("partitions"),
            addr=n.str("address"), alloc_cpus=n.int("alloc_cpus", lo=0),
            spec_cores=n.int("specialized_cores", lo=0), mem_spec_mb=n.int("specialized_memory", lo=0),
            weight=n.int("weight", lo=0),
        )
    for g in doc.items("sinfo"):
        base, flags = _json_state(g.obj("node"), "state", None)
        part = g.obj("partition").str("name")
        gres = g.obj("gres")
        members = g.obj("nodes").strs("nodes")
        # a group's reason is one node's: 24.11 put drained node7 ("admin maintenance") and node8 ("slurmkit: ...")
        # in one record with node7's reason (recorded). Trust it only for a group of one node.
        reason = g.obj("reason").str("description") if len(members) == 1 else ""
        for name in members:
            prev = out.get(name)
            parts = (prev.partitions if prev else ()) + ((part,) if part else ())
            out[name] = NodeInfo(
                name=name, state=base, flags=flags, reason=reason,
                cpus=g.obj("cpus").int("maximum", lo=0), sockets=g.obj("sockets").int("maximum", lo=0),
                cores_per_socket=g.obj("cores").int("maximum", lo=0),
                threads_per_core=g.obj("threads").int("maximum", lo=0),
                real_memory=g.obj("memory").int("maximum", lo=0),
                gres=gres.str("total"), gres_used=gres.str("used"),
                features=g.obj("features").strs("total"), partitions=tuple(dict.fromkeys(parts)),
            )
    return [n for name, n in out.items() if want is None or name in want]


parse_sinfo_json = parse_nodes_json  # the name callers and tests know


def _json_state(rec: jsonread.Reader, key: str, flags_key: str | None) -> tuple[str, frozenset[str]]:
    """22.05: ``"state": "idle"`` and ``"state_flags": ["DRAIN"]``; 23.02+: ``"state": ["IDLE", "DRAIN"]``."""
    states = [x.upper() for x in rec.str_or_strs(key)]
    base = (states[0] if states else "UNKNOWN").lower()
    more = rec.strs(flags_key) if flags_key else ()
    return base, frozenset([*states[1:], *(x.upper() for x in more)])


def _state_str(rec: jsonread.Reader, key: str) -> str:
    states = rec.str_or_strs(key)  # newer openapi versions give a list of states
    return states[0].upper() if states else "UNKNOWN"


# --- scontrol show topology ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SwitchRecord:
    name: str
    level: int
    nodes: list[str]
    switches: list[str]


@dataclass(frozen=True)
class BlockRecord:
    """One ``scontrol show topology`` line of topology/block (23.11+): a base block, or an aggregate of blocks."""

    name: str
    index: int
    nodes: list[str]
    size: int
    aggregated: bool = False


def parse_blocks(text: str) -> list[BlockRecord]:
    """topology/block's ``scontrol show topology``: ``BlockName=b1 BlockIndex=0 Nodes=node[1-4] BlockSize=4`` per
    base block and ``AggregatedBlock=b[1-2] BlockIndex=... Nodes=... BlockSize=8`` per higher BlockSizes level
    (src/plugins/topology/block/topology_block.c of slurm-24-11-5-1, topology_p_topology_print). Recorded:
    tests/data/slurm/24.11/scontrol_show_topology_block.txt."""
    out = []
    for rec in parse_scontrol_records(text):
        name = rec.get("BlockName") or rec.get("AggregatedBlock")
        if not name:
            continue
        nodes = rec.get("Nodes")
        out.append(
            BlockRecord(
                name=name, index=_int(rec.get("BlockIndex")),
                nodes=hostlist.expand(nodes) if nodes not in (None, "", "(null)") else [],
                size=_int(rec.get("BlockSize")), aggregated="AggregatedBlock" in rec,
            )
        )
    return out


def parse_topology(text: str) -> list[SwitchRecord]:
    """``scontrol show topology``: ``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-4]`` per line."""
    if "No topology information" in text:
        return []
    out = []
    for rec in parse_scontrol_records(text):
        if "SwitchName" not in rec:
            continue
        out.append(
            SwitchRecord(
                name=rec["SwitchName"],
                level=_int(rec.get("Level")),
                nodes=hostlist.expand(rec.get("Nodes", "")) if rec.get("Nodes") not in (None, "(null)") else [],
                switches=hostlist.expand(rec.get("Switches", "")) if rec.get("Switches") not in (None, "(null)") else [],
            )
        )
    return out


def parse_version(text: str) -> str:
    """``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` -> ``22.05.8``."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        raise ParseError(f"cannot read a Slurm version from {text.strip()!r}")
    return m.group(1)


# --- the queue and reservations, as placement needs them ----------------------------------------------------------

# squeue -t PD: job id, node count, partition(s), ReqNodeList (%n), ExcNodeList (%x), reservation, reason last (a
# pending reason can read "ReqNodeNotAvail, UnavailableNodes:node[1-2]": commas and colons, no '|'). The same
# format letters in squeue(1) of slurm-22-05-8-1 and slurm-24-11-5-1.
PENDING_FORMAT = "%i|%D|%P|%n|%x|%v|%r"


@dataclass(frozen=True)
class PendingJob:
    job_id: str  # "12" or a pending array's "12_[1-3]"
    nodes: int
    partitions: tuple[str, ...]
    req_nodes: tuple[str, ...]  # the job's --nodelist (ReqNodeList), expanded; () when Slurm chooses
    exc_nodes: tuple[str, ...]
    reservation: str
    reason: str

    @property
    def number(self) -> int:
        """The job id's number (an array's base id), for ordering by submission."""
        head = self.job_id.split("_", 1)[0].split("+", 1)[0]
        return int(head) if head.isdigit() else 0


def _hosts(v: str) -> tuple[str, ...]:
    return tuple(hostlist.expand(v)) if v and v not in ("(null)", "N/A") else ()


def parse_pending(text: str) -> list[PendingJob]:
    """``squeue -h -t PD -o PENDING_FORMAT``."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|", 6)
        if len(f) < 7:
            raise ParseError(f"unexpected squeue line: {line!r}")
        jid, n, parts, req, exc, resv, reason = f
        out.append(PendingJob(
            job_id=jid.strip(), nodes=_int(n), partitions=tuple(p for p in parts.split(",") if p),
            req_nodes=_hosts(req), exc_nodes=_hosts(exc), reservation="" if resv in ("(null)", "") else resv,
            reason=reason.strip(),
        ))
    return out


@dataclass(frozen=True)
class Reservation:
    name: str
    start: float  # epoch seconds (slurmctld's local time, as scontrol prints it)
    end: float
    nodes: tuple[str, ...]
    flags: frozenset[str]
    users: tuple[str, ...]
    accounts: tuple[str, ...]
    partition: str
    active: bool


def _epoch(v: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        return float("inf") if v.lower() in ("unknown", "unlimited", "infinite") else 0.0


def parse_mpi_list(text: str) -> list[str]:
    """``srun --mpi=list``: the MPI plugin types this srun can load, the specific pmix versions too (``pmix_v4``).
    Printed by plugrack_print_mpi_plugins() in src/common/plugrack.c of slurm-22-05-8-1 and slurm-24-11-5-1 alike:
    "MPI plugin types are...", one tab-indented type a line ("none" first), then "specific pmix plugin versions
    available: pmix_v4,pmix_v5" when there are any."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("\t") and line.strip():
            out.append(line.strip())
        elif line.startswith("specific pmix plugin versions available:"):
            out += [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return out


def parse_reservations(text: str) -> list[Reservation]:
    """``scontrol -o show reservation`` (text in 22.05 and 24.11; "No reservations in the system" when none)."""
    out = []
    for r in parse_scontrol_records(text):
        if "ReservationName" not in r:
            continue
        out.append(Reservation(
            name=r["ReservationName"], start=_epoch(r.get("StartTime", "")), end=_epoch(r.get("EndTime", "")),
            nodes=_hosts(r.get("Nodes", "")), flags=frozenset(f for f in r.get("Flags", "").split(",") if f),
            users=tuple(u for u in _csv(r.get("Users")) if u != "(null)"),
            accounts=tuple(a for a in _csv(r.get("Accounts")) if a != "(null)"),
            partition="" if r.get("PartitionName") in (None, "(null)") else r["PartitionName"],
            active=r.get("State", "").upper() == "ACTIVE",
        ))
    return out
