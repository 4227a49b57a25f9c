"""Job records come from a form no job name, comment or account can forge (issue 32 item 2).

Over real listings recorded on 22.05, 24.11 and 26.05 labs (tests/data/slurm/record_hostile_jobs.py: root's job
fills the nodes, the ordinary user ``games`` queues jobs named/commented/accounted like a forger), and over the same
listings with hypothesis-made hostile strings (every key Slurm prints in a job record, ``=``, ``|``, spaces,
newlines, parentheses) written where the user writes them.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.backend.jobjson import JobRecordError, parse_extra, parse_jobs_json
from slurmkit.backend.parse import ParseError, parse_scontrol_records, parse_squeue_jobs
from slurmkit.release import JOB_LISTINGS, job_listing

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RELEASES = ("22.05", "24.11", "26.05")
NAME = "x Priority=4294967000 EligibleTime=2020-01-01T00:00:00 UserId=bin(2)"  # the repro
COMMENT_HEAD = "c JobState=RUNNING Requeue=1 UserId=bin(2) Nodes=node1 CPU_IDs=0-1"
NEWLINE_NAME = "n\nJobId=999 JobName=y UserId=bin(2) Priority=4294967000 JobState=PENDING Reason=Resources"


def listing(rel: str) -> str:
    """The recorded answer of the command ``release.job_listing(rel)`` names."""
    name = f"jobs_hostile_{rel}.squeue.json" if job_listing(rel).argv[0] == "squeue" else f"jobs_hostile_{rel}.json"
    return (DATA / name).read_text()


def records(rel: str) -> dict[str, dict[str, str]]:
    return {r["JobId"]: r for r in parse_jobs_json(listing(rel), "test")}


# every key a job record of the three releases prints (read from the recordings), each as a forger writes it
KEYS = sorted({k for rel in RELEASES for k in re.findall(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=",
                                                          (DATA / f"jobs_hostile_{rel}.txt").read_text())})
assert {"UserId", "Priority", "EligibleTime", "JobState", "GRES", "Nodes", "StdOut", "Comment"} <= set(KEYS)
_piece = st.one_of(
    st.sampled_from(KEYS).map(lambda k: f" {k}="),
    st.sampled_from(KEYS).map(lambda k: f"\n{k}="),
    st.sampled_from(["=", " ", "\n", "|", "(", ")", "bin(2)", "4294967000", "2020-01-01T00:00:00", "RUNNING",
                     "PENDING", "node[1-4]", "gpu:h100:2(IDX:0-1)", "999", "\t", "\\", '"', "{", "}", ","]),
    st.text(min_size=0, max_size=8),
)
hostile = st.lists(_piece, min_size=1, max_size=12).map("".join)


@pytest.mark.parametrize("rel", RELEASES)
def test_the_repro_job_reads_as_the_attackers_own(rel: str) -> None:
    recs = records(rel)
    assert set(recs) == {"1", "2", "3", "4", "5"}  # no job 999 or 998 from a newline
    two = recs["2"]
    assert two["JobName"] == NAME and two["Comment"].startswith(COMMENT_HEAD)
    assert two["UserId"] == "games(5)" and two["JobState"] == "PENDING"
    assert two["Priority"] != "4294967000" and not two["EligibleTime"].startswith("2020")
    assert recs["3"]["JobName"] == NEWLINE_NAME and recs["3"]["UserId"] == "games(5)"
    assert recs["4"]["Account"].startswith("a|pending|") and recs["4"]["UserId"] == "games(5)"
    assert recs["1"]["UserId"] == "root(0)" and recs["1"]["Requeue"] == "1"
    assert recs["1"].gres_by_node == {f"node{i}": "gpu:h100:2(IDX:0-1)" for i in range(1, 5)}  # type: ignore[attr-defined]
    assert all(not r.gres_by_node for j, r in recs.items() if j != "1")  # type: ignore[attr-defined]


@pytest.mark.parametrize("rel", RELEASES)
def test_the_text_record_is_forged_by_the_same_jobs(rel: str) -> None:
    """Why the text is not read: a Key= splitter over the same recorded jobs sees bin's job 999 and a job 2 of
    bin's that has waited since 2020."""
    recs = {r["JobId"]: r for r in parse_scontrol_records((DATA / f"jobs_hostile_{rel}.txt").read_text())
            if "JobId" in r}
    assert recs["999"]["UserId"] == "bin(2)"
    assert recs["2"]["UserId"] == "bin(2)" and recs["2"]["EligibleTime"].startswith("2020")


@pytest.mark.parametrize("rel", RELEASES)
def test_a_record_without_free_text_reads_as_scontrol_prints_it(rel: str) -> None:
    """For jobs whose text no user wrote into (root's job 1; job 4, whose account holds no space), the JSON record
    is scontrol's record, key for key: the readers written for scontrol's records read the same values (a pending
    job's NumNodes is scontrol's "2-2" range, its minimum here, which is what target_of reads)."""
    text = {r["JobId"]: r for r in parse_scontrol_records((DATA / f"jobs_hostile_{rel}.txt").read_text())
            if "JobId" in r}
    recs = records(rel)
    for jid in ("1", "4"):
        common = recs[jid].keys() & text[jid].keys()  # 22.05 prints TRES= where 23.02+ print ReqTRES/AllocTRES
        assert {"JobId", "JobName", "UserId", "Priority", "EligibleTime", "JobState", "Reason", "Requeue", "NodeList",
                "NumNodes", "StdOut", "Partition", "Account", "CPUs/Task", "Nice", "Features"} <= common, rel
        want = {k: text[jid][k] for k in common}
        if want["NumNodes"] != recs[jid]["NumNodes"]:
            assert want["NumNodes"] == f"{recs[jid]['NumNodes']}-{recs[jid]['NumNodes']}"
            want["NumNodes"] = recs[jid]["NumNodes"]
        assert {k: recs[jid][k] for k in common} == want, rel
        # the memory request under the key scontrol prints (MinMemoryTRES for --mem-per-gpu, not MinMemoryNode)
        assert ({k: v for k, v in recs[jid].items() if k.startswith("MinMemory")} ==
                {k: v for k, v in text[jid].items() if k.startswith("MinMemory") and v != "0"}), rel


def test_2205s_raw_output_path_is_expanded_as_scontrol_does() -> None:
    """22.05's openapi dumps --output as given; scontrol expands it (src/api/job_info.c _fname_format)."""
    job = {"job_id": 7, "array_job_id": 0, "array_task_id": None, "name": "train", "user_name": "u",
           "current_working_directory": "/w", "batch_flag": True, "standard_output": "logs/%x-%j-%u.out",
           "standard_error": ""}
    (r,) = parse_jobs_json(json.dumps({"jobs": [job]}), "squeue --json")
    assert r["StdOut"] == r["StdErr"] == "/w/logs/train-7-u.out"
    (r,) = parse_jobs_json(json.dumps({"jobs": [{**job, "standard_output": "", "array_job_id": 6,
                                                 "array_task_id": 1}]}), "squeue --json")
    assert r["StdOut"] == "/w/slurm-6_1.out" and r["ArrayJobId"] == "6" and r["ArrayTaskId"] == "1"
    (r,) = parse_jobs_json(json.dumps({"jobs": [{**job, "array_job_id": 6, "array_task_string": "1-3%2"}]}), "squeue")
    assert r["ArrayTaskId"] == "1-3%2"  # a pending array's record names its tasks, as scontrol's does
    (r,) = parse_jobs_json(json.dumps({"jobs": [job]}), "squeue")
    assert "ArrayJobId" not in r and "ArrayTaskId" not in r  # scontrol names them for an array's job only
    dp = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}}
    (r,) = parse_jobs_json(json.dumps({**dp, "jobs": [{**job, "standard_output": "/x/%j"}]}), "scontrol --json")
    assert r["StdOut"] == "/x/%j"  # data_parser dumps slurm_get_job_stdout()'s answer: taken as it is


def _with(data: dict, rel: str, name: str, comment: str, account: str) -> str:
    d = copy.deepcopy(data)
    job = next(j for j in d["jobs"] if j["job_id"] == 2)
    job["name"], job["comment"], job["account"] = name, comment, account
    return json.dumps(d, indent=2)


@pytest.mark.parametrize("rel", RELEASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile, comment=hostile, account=hostile)
def test_no_hostile_string_moves_another_field(rel: str, name: str, comment: str, account: str) -> None:
    data = json.loads(listing(rel))
    base = {r["JobId"]: r for r in parse_jobs_json(json.dumps(data), "test")}
    got = {r["JobId"]: r for r in parse_jobs_json(_with(data, rel, name, comment, account.lower()), "test")}
    assert got.keys() == base.keys()
    for jid, rec in got.items():
        want = dict(base[jid])
        if jid == "2":
            want.update(JobName=name, Comment=comment, Account=account.lower() or "(null)")
            if not comment:
                del want["Comment"]  # scontrol prints Comment= only when one is set (jobjson._ONLY_WHEN_SET)
        assert dict(rec) == want
        assert rec.gres_by_node == base[jid].gres_by_node  # type: ignore[attr-defined]


# --- squeue -O: the exporter's compact listing, where Account is the one field a user writes ---------------------

@pytest.mark.parametrize("rel", RELEASES)
def test_squeue_O_accounts_forge_no_column_and_no_job(rel: str) -> None:
    jobs = {j.job_id: j for j in parse_squeue_jobs((DATA / f"jobs_hostile_{rel}.squeue_O.txt").read_text())}
    assert set(jobs) == {"1", "2", "3", "4", "5"}
    assert {j.raw["UserId"] for jid, j in jobs.items() if jid != "1"} == {"games"}
    assert jobs["4"].raw["Account"].startswith("a|pending|normal|bin|")
    assert jobs["5"].raw["Account"] == "b" and all(j.state in ("PENDING", "RUNNING") for j in jobs.values())


@pytest.mark.parametrize("rel", RELEASES)
@settings(max_examples=80, deadline=None)
@given(account=hostile)
def test_no_account_forges_an_squeue_O_line(rel: str, account: str) -> None:
    """slurmctld lower-cases an account (job_mgr.c xstrtolower, all three releases); whatever it holds, every
    other job reads as recorded and the attacker's job keeps every field but its account."""
    text = (DATA / f"jobs_hostile_{rel}.squeue_O.txt").read_text()
    base = {j.job_id: j.raw for j in parse_squeue_jobs(text)}
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("2|"))
    reason = base["2"]["Reason"]
    forged = f"{lines[start].split('|' + reason + '|', 1)[0]}|{reason}|{account.lower()}|\n"
    # the other lines of job 2 (its recorded account's newline, if any) are dropped with it
    others = [ln for i, ln in enumerate(lines) if i != start and not ln.startswith(("2|",))]
    got = {j.job_id: j.raw for j in parse_squeue_jobs("".join([forged, *others]))}
    assert got.keys() == base.keys()
    for jid, raw in got.items():
        if jid == "2":
            assert {k: v for k, v in raw.items() if k != "Account"} == \
                {k: v for k, v in base["2"].items() if k != "Account"}
            assert account.lower().startswith(raw["Account"].split("\n")[0])
        else:
            assert raw == base[jid]


# --- malformed listings: one line naming the command and the field -------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("not json", "scontrol --json show job: not JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"jobs": {"a": 1}}', "jobs: expected a list, got dict"),
    ('{"jobs": [1, 2, 3]}', r"jobs\[0\]: expected an object, got int"),
    ('{"jobs": [{"name": "x"}]}', r"job jobs\[0\]: job_id: missing"),
    ('{"jobs": [{"job_id": 7, "priority": 1e400}]}', "job 7: priority: expected an integer, got inf"),
    ('{"jobs": [{"job_id": 7, "priority": "high"}]}', "job 7: priority: expected a number, got str"),
    ('{"jobs": [{"job_id": 7, "name": ["x"]}]}', "job 7: name: expected a string, got list"),
    ('{"jobs": [{"job_id": 7, "job_state": 3}]}', "job 7: job_state: expected a string or a list of strings"),
    ('{"jobs": [{"job_id": 7, "gres_detail": ["gpu:1", "gpu:1"], "job_resources": {"nodes": "n1"}}]}',
     "job 7: gres_detail: 2 entries for 1 allocated nodes"),
    ('{"jobs": [{"job_id": 7, "gres_detail": ["gpu:1"], "job_resources": {"nodes": "n[1-"}}]}',
     "job 7: job_resources.nodes: not a host list"),
    ('{"jobs": [{"job_id": 7, "submit_time": {"set": true, "number": 1e300}}]}', "job 7: submit_time"),
    ('{"jobs": [' + '[' * 100 + ']' * 100 + ']}', r"jobs\[0\]: expected an object, got list"),
    ('{"jobs": [{"job_id": 7, "job_resources": ' + '{"a": ' * 200 + '1' + '}' * 201 + ']}', ""),
    ('{"jobs": ' + '[' * 100000 + ']' * 100000 + '}', "nested too deep"),
    ('{"meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}}, "jobs": []}', "data_parser data_parser/v0.0.99 is not one"),
    ('{"meta": {"plugin": 3}, "jobs": []}', ""),
])
def test_a_malformed_listing_is_one_line(text: str, message: str) -> None:
    try:
        recs = parse_jobs_json(text, "scontrol --json show job")
    except ParseError as exc:  # JobRecordError, or data_parser_of's ParseError
        assert re.search(message, str(exc)) and "\n" not in str(exc)
        assert str(exc).startswith("scontrol --json show job: ")
    else:
        assert message == "" and [r["JobId"] for r in recs] in ([], ["7"])  # read, not refused


@pytest.mark.parametrize("rel", ["22.05", "26.05"])
def test_the_fields_read_beside_the_json(rel: str) -> None:
    """22.05's CPUs/Task and 26.05's Exclusive, which their JSON does not carry, from squeue -O (recorded)."""
    types = [t for t, _ in job_listing(rel).extra]
    extra = parse_extra((DATA / f"jobs_hostile_{rel}.extra.txt").read_text(), types, "squeue")
    assert extra == {str(i): ["1" if rel == "22.05" else "NODE"] for i in range(1, 6)}
    assert parse_extra("12_[1-3]|NO|\n", ["Exclusive"], "squeue") == {}
    with pytest.raises(JobRecordError, match=r"squeue -O: line 1: expected JOBID\|Exclusive\|"):
        parse_extra("12|maybe|\n", ["Exclusive"], "squeue -O")
    with pytest.raises(JobRecordError, match="line 2"):
        parse_extra("1|2|\n12|x y|\n", ["cpus-per-task"], "squeue -O")


def test_each_release_lists_jobs_as_json() -> None:
    assert job_listing("22.05").argv == ("squeue", "--json") and not job_listing("22.05").by_id
    assert job_listing("24.11").argv[:3] == ("scontrol", "--all", "--json") and job_listing("24.11").by_id
    assert job_listing("26.05").extra == (("Exclusive", "Exclusive"),) and not job_listing("25.11").extra
    assert job_listing("22.05").extra_argv == ("squeue", "--all", "-h", "-t", "all", "-O", "JobID:|,cpus-per-task:|")
    assert job_listing("27.11") == JOB_LISTINGS[-1]
    with pytest.raises(ValueError):
        job_listing("21.08")


# --- accounts apply's squeue -o "%i|%a|%u|%T" (what holds back a delete) ------------------------------------------

@settings(max_examples=150, deadline=None)
@given(account=hostile)
def test_no_account_forges_a_job_that_holds_back_a_delete(account: str) -> None:
    """The attacker's --account (lower-cased by slurmctld) either reads whole as its job's account, or the
    listing is refused in one line: never another job, user or state."""
    from slurmkit.accounts.plan import Job, JobListError, parse_jobs

    acct = account.lower()
    text = f"4|{acct}|games|PENDING\n6|team-a|bin|RUNNING\n"
    try:
        jobs = parse_jobs(text)
    except JobListError as exc:
        assert len(f"x{acct}x".splitlines()) > 1 and "\n" not in str(exc)  # refused only for a broken line
        return
    assert jobs == [Job("4", acct, "games", "PENDING"), Job("6", "team-a", "bin", "RUNNING")]
