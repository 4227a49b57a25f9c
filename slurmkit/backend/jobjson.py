"""Job records from Slurm's JSON job listings: fields no job's user can forge (issue 32 item 2).

``scontrol -o show job`` prints a job's name, comment, paths and account verbatim between the other fields' ``Key=``
(and keeps their newlines), so ``-J "x Priority=4294967000 UserId=bin(2)"`` reads, to a ``Key=`` splitter, as a job
of bin's that has waited since 2020; JSON quotes every string. Every root reader of job records (defrag plan/run/
watch, ``CLIBackend.job()``/``jobs()`` and what reads them: status, monitor, nodes, elastic, the exporter's fallback)
takes them from here. Which command lists jobs as JSON on which release: ``release.JOB_LISTINGS``.

A ``JobRecord`` is a dict under ``scontrol show job``'s key names (``JobId``, ``UserId`` as ``name(uid)``,
``Priority``, ``EligibleTime`` as local ISO time, ``Requeue`` 1/0, ...), so the readers written for scontrol's
records read it unchanged, plus ``gres_by_node`` (``scontrol -d``'s per-node GRES, from ``gres_detail``).

Both JSON dialects are read (recorded: tests/data/slurm/jobs_hostile_{22.05,24.11,26.05}*):
- 22.05 ``squeue --json`` (openapi/v0.0.38, src/plugins/openapi/v0.0.38/jobs.c _dump_job_info at slurm-22-05-8-1):
  numbers are plain (null for NO_VAL), ``job_state`` a string, ``shared`` a string or null, ``exit_code`` an int
  (the wait status), ``job_resources.allocated_nodes[].nodename``;
- data_parser v0.0.39+ (23.02-26.05: src/plugins/data_parser/v0.0.4x/parsers.c): numbers may be
  ``{"set", "infinite", "number"}``, ``job_state`` and ``shared`` lists of flags, ``exit_code`` a
  ``{"return_code", "signal"}`` object, ``job_resources.nodes.allocation[].name``.
In both, ``gres_detail[i]`` is the GRES of the i-th node of ``job_resources`` (the node_bitmap order that
``scontrol -d`` walks: src/api/job_info.c, gres_detail_str[rel_node_inx], 22.05 and 24.11).

Anything else than these shapes is a ``JobRecordError``: one line naming the command, the job and the field.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence

from slurmkit import hostlist
from slurmkit.backend.parse import ParseError


class JobRecordError(ParseError):
    """A job listing that is not one of the JSON shapes slurmkit reads: ``<command>: job <id>: <field>: <why>``."""


class JobRecord(dict[str, str]):
    """One job under ``scontrol show job``'s key names; ``gres_by_node`` is ``scontrol -d``'s per-node GRES."""

    gres_by_node: dict[str, str]

    def __init__(self, fields: Iterable[tuple[str, str]] = (), gres_by_node: dict[str, str] | None = None):
        super().__init__(fields)
        self.gres_by_node = dict(gres_by_node or {})


class _Job:
    """Typed reads of one job object; every failure names the command, the job and the field."""

    def __init__(self, what: str, obj: object, index: int, raw_paths: bool = False):
        self.raw_paths = raw_paths  # 22.05's openapi: --output/--error as given, not expanded
        if not isinstance(obj, dict):
            raise JobRecordError(f"{what}: jobs[{index}]: expected an object, got {type(obj).__name__}")
        self.what, self.obj = what, obj
        jid = obj.get("job_id")
        self.jid = str(jid) if isinstance(jid, int) and not isinstance(jid, bool) else f"jobs[{index}]"

    def fail(self, key: str, why: str) -> JobRecordError:
        return JobRecordError(f"{self.what}: job {self.jid}: {key}: {why}")

    def text(self, key: str) -> str:
        v = self.obj.get(key)
        if v is None:
            return ""
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {type(v).__name__}")
        return v

    def num(self, key: str, v: object = None, *, raw: bool = False) -> int | None:
        """An integer, 22.05's plain one (null: unset) or data_parser's {"set", "infinite", "number"}; None when
        unset, -1 when infinite."""
        if not raw:
            v = self.obj.get(key)
        if isinstance(v, dict):
            if v.get("infinite") is True:
                return -1
            if v.get("set") is False:
                return None
            v = v.get("number")
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(key, f"expected a number, got {type(v).__name__}")
        if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
            raise self.fail(key, f"expected an integer, got {v!r}")
        if abs(int(v)) > 2**64:
            raise self.fail(key, f"number out of range: {v!r}")
        return int(v)

    def flags(self, key: str) -> list[str]:
        """22.05's string (or null) or data_parser's list of strings."""
        v = self.obj.get(key)
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return list(v)
        raise self.fail(key, "expected a string or a list of strings")

    def obj_at(self, key: str) -> dict:
        v = self.obj.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(key, f"expected an object, got {type(v).__name__}")
        return v


def _time(j: _Job, key: str) -> str:
    """scontrol's form of a time: local ISO seconds, ``Unknown`` for unset/0, ``Unlimited`` for infinite
    (slurm_make_time_str(), src/common/parse_time.c)."""
    n = j.num(key)
    if n is None or n == 0:
        return "Unknown"
    if n < 0:
        return "Unlimited"
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(n))
    except (OverflowError, OSError, ValueError) as exc:
        raise j.fail(key, f"not a time: {n}") from exc


def _text_num(j: _Job, key: str, default: str = "0") -> str:
    n = j.num(key)
    return default if n is None else str(n)


def _exit_code(j: _Job) -> str:
    """``rc:signal`` as scontrol prints ExitCode (22.05: the wait status; data_parser: return_code and signal.id)."""
    v = j.obj.get("exit_code")
    if isinstance(v, dict):
        rc = j.num("exit_code.return_code", v.get("return_code"), raw=True) or 0
        sig = v.get("signal")
        sig_id = j.num("exit_code.signal.id", sig.get("id"), raw=True) if isinstance(sig, dict) else None
        return f"{rc}:{sig_id or 0}"
    n = j.num("exit_code")
    if n is None:
        return ""
    return f"{(n >> 8) & 0xFF}:{n & 0x7F}"


# job->shared as scontrol's OverSubscribe= (job_share_string(), src/scontrol/info_job.c at slurm-22-05-8-1 and
# slurm-24-11-5-1): 22.05's openapi writes "none"/"shared"/"user"/"mcs" or null (jobs.c _dump_job_info), data_parser
# the JOB_SHARED flag names "none"/"oversubscribe"/"user"/"mcs"/"topo" or [] (parsers.c PARSER_FLAG_ARRAY(JOB_SHARED))
_SHARED = {"none": "NO", "shared": "YES", "oversubscribe": "YES", "user": "USER", "mcs": "MCS", "topo": "TOPO"}


def _oversubscribe(j: _Job) -> str:
    flags = j.flags("shared")
    return _SHARED.get(flags[0], "OK") if flags else "OK"


def _alloc_nodes(j: _Job) -> list[str]:
    """The job's allocated nodes in ``gres_detail``'s order."""
    res = j.obj_at("job_resources")
    nodes = res.get("nodes")
    if isinstance(nodes, dict):  # data_parser: {"list": "node[1-2]", "allocation": [{"name": ...}]}
        alloc = nodes.get("allocation")
        names = [a.get("name") for a in alloc] if isinstance(alloc, list) and all(isinstance(a, dict) for a in alloc) \
            else None
        if names and all(isinstance(n, str) for n in names):
            return [str(n) for n in names]
        nodes = nodes.get("list")
    else:  # 22.05: "nodes": "node[1-2]", "allocated_nodes": [{"nodename": ...}]
        alloc = res.get("allocated_nodes")
        if isinstance(alloc, list) and alloc and all(isinstance(a, dict) and isinstance(a.get("nodename"), str)
                                                     for a in alloc):
            return [str(a["nodename"]) for a in alloc]
    if nodes in (None, ""):
        return []
    if not isinstance(nodes, str):
        raise j.fail("job_resources.nodes", "expected a host list")
    try:
        return hostlist.expand(nodes)
    except Exception as exc:  # noqa: BLE001 - any hostlist error is this field's
        raise j.fail("job_resources.nodes", f"not a host list: {nodes[:80]!r}") from exc


def _gres_by_node(j: _Job) -> dict[str, str]:
    detail = j.obj.get("gres_detail")
    if detail is None:
        return {}
    if not isinstance(detail, list) or not all(isinstance(x, str) for x in detail):
        raise j.fail("gres_detail", "expected a list of strings")
    if not detail:
        return {}
    nodes = _alloc_nodes(j)
    if len(nodes) < len(detail):
        raise j.fail("gres_detail", f"{len(detail)} entries for {len(nodes)} allocated nodes")
    out: dict[str, str] = {}
    for node, gres in zip(nodes, detail, strict=False):
        out[node] = gres
    return out


def _user(j: _Job, name_key: str, id_key: str) -> str:
    uid = j.num(id_key)
    return f"{j.text(name_key)}({'' if uid is None else uid})"


def _state(j: _Job) -> str:
    flags = j.flags("job_state")
    return flags[0].upper() if flags else "UNKNOWN"


def _reason(j: _Job) -> str:
    """scontrol's Reason=: the state description when there is one, whitespace as "_" ("ReqNodeNotAvail,_May_be_
    reserved_for_other_job"), else the reason's name (src/api/job_info.c slurm_sprint_job_info at slurm-22-05-8-1,
    src/scontrol/info_job.c at slurm-24-11-5-1 and slurm-26-05-3-1). Both JSON dialects give the two apart
    (state_description, state_reason)."""
    desc = j.text("state_description")
    if desc:
        return "".join("_" if c in " \t\n\v\f\r" else c for c in desc)  # C isspace()
    return j.text("state_reason") or "None"


def _nodes_text(j: _Job, key: str) -> str:
    v = j.text(key)
    return v or "(null)"


def _tres(j: _Job, key: str) -> str:
    return j.text(key) or "(null)"


# scontrol key -> how it is read from a job object (the fields slurmkit's readers use; each names its JSON key)
_FIELDS: tuple[tuple[str, Callable[[_Job], str]], ...] = (
    ("JobId", lambda j: _text_num(j, "job_id", "")),
    ("ArrayJobId", lambda j: _text_num(j, "array_job_id")),
    # a pending array's record names its tasks ("1-3%2": array_task_str), a task its number (job_info.c above)
    ("ArrayTaskId", lambda j: j.text("array_task_string") or _text_num(j, "array_task_id", "N/A")),
    ("JobName", lambda j: j.text("name")),
    ("UserId", lambda j: _user(j, "user_name", "user_id")),
    ("GroupId", lambda j: _user(j, "group_name", "group_id")),
    ("Priority", lambda j: _text_num(j, "priority")),
    ("Nice", lambda j: _text_num(j, "nice")),
    ("Account", lambda j: j.text("account") or "(null)"),
    ("QOS", lambda j: j.text("qos") or "(null)"),
    ("JobState", _state),
    ("Reason", _reason),
    ("Requeue", lambda j: "1" if j.obj.get("requeue") is True else "0"),
    ("Restarts", lambda j: _text_num(j, "restart_cnt")),
    ("ExitCode", _exit_code),
    ("SubmitTime", lambda j: _time(j, "submit_time")),
    ("EligibleTime", lambda j: _time(j, "eligible_time")),
    ("StartTime", lambda j: _time(j, "start_time")),
    ("EndTime", lambda j: _time(j, "end_time")),
    ("Partition", lambda j: j.text("partition")),
    ("ReqNodeList", lambda j: _nodes_text(j, "required_nodes")),
    ("ExcNodeList", lambda j: _nodes_text(j, "excluded_nodes")),
    ("NodeList", lambda j: j.text("nodes")),
    ("BatchHost", lambda j: j.text("batch_host")),
    ("NumNodes", lambda j: _text_num(j, "node_count", "1")),
    ("NumCPUs", lambda j: _text_num(j, "cpus")),
    ("NumTasks", lambda j: _text_num(j, "tasks", "1")),
    ("CPUs/Task", lambda j: _text_num(j, "cpus_per_task", "1")),
    ("ReqTRES", lambda j: _tres(j, "tres_req_str")),
    ("AllocTRES", lambda j: _tres(j, "tres_alloc_str")),
    ("Features", lambda j: j.text("features") or "(null)"),
    ("TresPerJob", lambda j: _tres(j, "tres_per_job")),
    ("TresPerNode", lambda j: _tres(j, "tres_per_node")),
    ("TresPerTask", lambda j: _tres(j, "tres_per_task")),
    ("OverSubscribe", _oversubscribe),
    ("WorkDir", lambda j: j.text("current_working_directory")),
    ("Comment", lambda j: j.text("comment")),
    ("StdErr", lambda j: _std_path(j, "standard_error")),
    ("StdOut", lambda j: _std_path(j, "standard_output")),
)
# printed only when set (src/api/job_info.c at slurm-22-05-8-1, src/scontrol/info_job.c at slurm-24-11-5-1): left out
# when empty, as scontrol's record leaves them out
_ONLY_WHEN_SET = ("TresPerJob", "TresPerNode", "TresPerTask", "Comment", "BatchHost")
# data_parser versions whose job "shared" is add_removed (dumped as [] whatever the job asked: parsers.c of v0.0.45 at
# slurm-26-05-3-1; recorded): no OverSubscribe from them (release.JOB_LISTINGS reads 26.05's Exclusive beside)
_NO_SHARED = frozenset({"v0.0.45"})


def _std_path(j: _Job, key: str) -> str:
    """A job's stdout/stderr path as scontrol prints it. data_parser (23.02+) dumps slurm_get_job_stdout()/
    slurm_get_job_stderr()'s answer (parsers.c JOB_INFO_STDOUT, v0.0.39 .. v0.0.45); 22.05's openapi dumps the raw
    --output/--error (jobs.c: job->std_out), so here it is expanded as slurm_get_job_stdout() and _fname_format()
    do (src/api/job_info.c at slurm-22-05-8-1): %A %a %j %u %x, relative to WorkDir; unset: stderr follows stdout,
    a batch job's default is WorkDir/slurm-%j.out (slurm-%A_%a.out for an array task)."""
    v = j.text(key)
    if not j.raw_paths:
        return v
    if not v and key == "standard_error":
        v = j.text("standard_output")
        key = "standard_output"
    jid, array_id, task = j.num("job_id") or 0, j.num("array_job_id") or 0, j.num("array_task_id")
    work = j.text("current_working_directory")
    if not v:
        if j.obj.get("batch_flag") is not True:
            return ""
        return f"{work}/slurm-{array_id}_{task}.out" if array_id else f"{work}/slurm-{jid}.out"
    no_task = 4294967294  # NO_VAL: what %a prints for a job that is not an array's
    v = v.replace("%A", str(jid if task is None else array_id)).replace("%a", str(no_task if task is None else task))
    v = v.replace("%j", str(jid)).replace("%u", j.text("user_name")).replace("%x", j.text("name"))
    return v if v.startswith("/") else f"{work}/{v}"


def parse_jobs_json(text: str, what: str) -> list[JobRecord]:
    """A JSON job listing (``release.job_listing(...).argv``'s answer; ``what`` names the command) -> records."""
    from slurmkit.backend.parse import data_parser_of

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobRecordError(f"{what}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError as exc:
        raise JobRecordError(f"{what}: JSON nested too deep") from exc
    if not isinstance(data, dict):
        raise JobRecordError(f"{what}: expected a JSON object, got {type(data).__name__}")
    try:
        dialect = data_parser_of(data, what)
    except (AttributeError, TypeError) as exc:
        raise JobRecordError(f"{what}: meta: not an object of objects") from exc
    jobs = data.get("jobs")
    if jobs is None:
        jobs = []
    if not isinstance(jobs, list):
        raise JobRecordError(f"{what}: jobs: expected a list, got {type(jobs).__name__}")
    out = []
    for i, obj in enumerate(jobs):
        j = _Job(what, obj, i, raw_paths=dialect is None)
        if j.num("job_id") is None:
            raise j.fail("job_id", "missing")
        rec = JobRecord(((k, read(j)) for k, read in _FIELDS), _gres_by_node(j))
        if rec["ArrayJobId"] == "0":  # scontrol names ArrayJobId/ArrayTaskId for an array's job only
            del rec["ArrayJobId"], rec["ArrayTaskId"]
        for k in _ONLY_WHEN_SET:
            if rec[k] in ("", "(null)"):
                del rec[k]
        # scontrol prints MinMemoryTRES= when the job has a mem_per_tres (--mem-per-gpu), MinMemoryCPU= when
        # pn_min_memory has MEM_PER_CPU, else MinMemoryNode=, all from pn_min_memory (src/scontrol/info_job.c at
        # slurm-24-11-5-1, "If there is a mem_per_tres job->pn_min_memory will not be set"): the JSON's
        # memory_per_node is that same pn_min_memory (data_parser v0.0.42 parsers.c), the per-GPU value then
        per_tres = "TRES" if j.text("memory_per_tres") not in ("", "(null)") else None
        for key, name in (("memory_per_node", f"MinMemory{per_tres or 'Node'}"), ("memory_per_cpu", "MinMemoryCPU")):
            mb = j.num(key)
            if mb is not None and mb > 0:
                rec[name] = f"{mb}M"
        if dialect in _NO_SHARED:
            del rec["OverSubscribe"]
        out.append(rec)
    return out


def job_table(details: str | Sequence[JobRecord]) -> list[JobRecord]:
    """The job records a defrag step reads: those the backend listed (JSON), or -- for hand-written records in
    tests and for output recorded before JSON was read -- ``scontrol -o -d show job`` text, whose free-text fields
    are NOT to be trusted (never a live listing: ``CLIBackend.job_details`` gives records)."""
    if not isinstance(details, str):
        return list(details)
    from slurmkit.backend.parse import parse_scontrol_records

    alloc = re.compile(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)")
    out = []
    for line in details.splitlines():
        recs = parse_scontrol_records(line)
        if not recs or "JobId" not in recs[0]:
            continue
        gres: dict[str, str] = {}
        for m in alloc.finditer(line):
            for n in hostlist.expand(m.group(1)):
                gres[n] = m.group(2)
        out.append(JobRecord(recs[0].items(), gres))
    return out


# what each squeue -O type read beside the JSON may print (release.JOB_LISTINGS ``extra``): none is free text
_EXTRA_VALUES = {
    "Exclusive": re.compile(r"NO|NODE|USER|MCS|TOPO"),  # job_exclusive_display_string(), slurm-26-05-3-1
    "cpus-per-task": re.compile(r"\d+|N/A"),  # _print_job_cpus_per_task(), src/squeue/print.c
}


def parse_extra(text: str, types: Sequence[str], what: str) -> dict[str, list[str]]:
    """``squeue -h -O JobID:|,T1:|,...`` -> {job id: [v1, ...]} for plain job ids (an array's ``12_3`` or
    ``12_[1-3]`` is not the JSON's job_id: its record keeps what the JSON says); one line naming the line for
    output of another shape."""
    out: dict[str, list[str]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        f = line.split("|")
        if len(f) != len(types) + 2 or f[-1] or not all(_EXTRA_VALUES[t].fullmatch(v) for t, v in zip(types, f[1:-1],
                                                                                                     strict=False)):
            raise JobRecordError(f"{what}: line {n}: expected JOBID|{'|'.join(types)}|, got {line[:80]!r}")
        if f[0].isdigit():
            out[f[0]] = f[1:-1]
    return out
