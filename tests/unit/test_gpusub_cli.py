"""gpusub's edge and its monitor against a fake Backend: dry-run, submit output, follow, status, one-line errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.parse import JobInfo, NodeInfo, SwitchRecord
from slurmkit.cli import gpusub_cmds as gpusub  # the click commands (gpusub.py is the entry point)
from slurmkit.errors import SlurmTimeout
from slurmkit.jobs.monitor import Backoff, follow, statuses
from slurmkit.jobs.spec import JobSpec
from slurmkit.jobs.submit import PreflightError, prepare, submit_job

ROOT = Path(__file__).resolve().parents[2]
LAB_INV = ROOT / "examples" / "lab.yaml"


class FakeBackend:
    """Answers like the lab; records what was submitted; scripted job states for follow()."""

    def __init__(self, states: Sequence[str] = ("RUNNING", "COMPLETED"), down: bool = False):
        self.submitted: list[SubmitRequest] = []
        self.tested: list[SubmitRequest] = []
        self.states = list(states)
        self.polls = 0
        self.down = down
        self.env = None

    def _check(self) -> None:
        if self.down:
            raise SlurmTimeout(["scontrol", "-o", "show"], 20)

    def partitions(self) -> list[dict[str, str]]:
        self._check()
        return [{"PartitionName": "gpu", "Default": "YES", "MaxTime": "1-00:00:00", "Nodes": "node[1-8]"}]

    def nodes(self, names: Sequence[str] | None = None) -> list[NodeInfo]:
        self._check()
        return [NodeInfo(name=f"node{i}", state="idle", gres="gpu:h100:8", partitions=("gpu",)) for i in range(1, 9)]

    def topology(self) -> list[SwitchRecord]:
        return [SwitchRecord("leaf1", 0, [f"node{i}" for i in range(1, 5)], []),
                SwitchRecord("leaf2", 0, [f"node{i}" for i in range(5, 9)], []),
                SwitchRecord("spine", 1, [f"node{i}" for i in range(1, 9)], ["leaf1", "leaf2"])]

    def test_only(self, request: SubmitRequest) -> str | None:
        self._check()
        self.tested.append(request)
        return "2026-11-30T01:02:03"

    def submit(self, request: SubmitRequest) -> str:
        self._check()
        self.submitted.append(request)
        return "42"

    def jobs(self, job_ids: Sequence[str] | None = None) -> list[JobInfo]:
        self._check()
        self.polls += 1
        state = self.states[min(self.polls - 1, len(self.states) - 1)]
        return [JobInfo(job_id="42", state=state, nodes=("node1", "node2"), exit_code="0:0")] \
            if job_ids is None or "42" in job_ids else []

    def job(self, job_id: str) -> JobInfo:
        from slurmkit.backend.cli import JobNotFound

        for j in self.jobs([job_id]):
            return j
        raise JobNotFound(f"job {job_id} not found")

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        self.cancelled = (job_id, signal, batch)


# the cluster the unit tests' jobs belong to: the run-dir index is per cluster (issue 25)
CLUSTER_KEY = "unit@ctl:6817"


def unit_slurm_conf(tmp_path: Path, name: str = "Unit", host: str = "ctl(10.0.0.1)", port: str | None = None) -> str:
    """A slurm.conf naming a cluster (what the index is keyed by); its path, for $SLURM_CONF."""
    p = tmp_path / f"slurm-{name}-{port or 'default'}.conf"
    p.write_text(f"ClusterName={name}\nSlurmctldHost={host}\n" + (f"SlurmctldPort={port}\n" if port else ""))
    return str(p)


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    e = {"SLURMKIT_INVENTORY": str(LAB_INV), "SLURMKIT_STATE_DIR": str(tmp_path / "state"),
         "GPUSUB_RUN_ROOT": str(tmp_path / "runs"), "SLURM_CONF": unit_slurm_conf(tmp_path)}
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


def test_dry_run_prints_script_and_argv_and_submits_nothing(env: dict[str, str], script: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpusub, "_backend", lambda: pytest.fail("a dry run with --no-query queries nothing"))
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "4", "--dry-run", "--no-query", "--explain",
                                                 "--", "--lr", "3e-4"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("#!/bin/bash\n")
    assert "# sbatch argv: sbatch --parsable" in res.output
    assert "--rdzv-id=\"$SLURM_JOB_ID\"" in res.output and "--switches=1@05:00" in res.output
    assert "no live node states: planned on an idle cluster; nothing pinned" in res.output
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in res.output.split("# environment", 1)[1]
    assert not Path(env["GPUSUB_RUN_ROOT"]).exists()


def _directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH") and "--output=" not in line]


def test_dry_run_is_the_submission(env: dict[str, str], script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 8: the default dry run plans on the same live states as the submission, so it shows the pin
    (--nodelist) the submission gets, not an offline --switches."""
    fake = FakeBackend()
    monkeypatch.setattr(gpusub, "_backend", lambda: fake)
    dry = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not fake.submitted and not fake.tested
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2"])
    assert res.exit_code == 0, res.output
    assert "#SBATCH --nodelist=node[1-2]" in _directives(dry.output)
    assert _directives(dry.output) == _directives(fake.submitted[0].script)


def test_dry_run_without_a_controller_plans_offline_and_says_so(env: dict[str, str], script: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpusub, "_backend", lambda: FakeBackend(down=True))
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "# warning: Slurm did not answer" in res.output and "--switches=1@05:00" in res.output
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--dry-run", "--query"])
    assert res.exit_code != 0 and "gpusub: error:" in res.output


def test_submit_prints_job_plan_log_and_writes_run_dir(env: dict[str, str], script: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend()
    monkeypatch.setattr(gpusub, "_backend", lambda: fake)
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--", "a b"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "submitted job 42"
    assert lines[1].startswith("plan: 2 node(s) x 8 GPU(s) = 16 process(es) on gpu via torchrun; 8 CPU(s) + 30.3 GiB "
                               "memory per node (1 CPU(s) + 3.8 GiB per GPU, inventory); placement: 2 nodes")
    assert "estimated start: 2026-11-30T01:02:03 (sbatch --test-only)" in res.output
    run_dir = Path(res.output.split("run dir: ", 1)[1].split()[0])
    assert f"log: {run_dir}/logs/42.r0.log" in res.output
    meta = json.loads((run_dir / "submit.json").read_text())
    assert meta["job_id"] == "42" and meta["sbatch_argv"] == ["sbatch", "--parsable"]
    assert (run_dir / "script.sh").read_text() == fake.submitted[0].script
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=3" in (run_dir / "env.txt").read_text()
    assert (Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / CLUSTER_KEY / "42").read_text().strip() == str(run_dir)
    assert meta["cluster"] == CLUSTER_KEY
    assert len(fake.submitted) == 1 and len(fake.tested) == 1


def test_missing_script_is_one_line_and_exit_2(env: dict[str, str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpusub, "_backend", FakeBackend)
    res = CliRunner().invoke(gpusub.submit_cmd, [str(tmp_path / "nope.py"), "-N", "2"])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "nope.py: no such file" in res.stderr


def test_controller_down_is_one_line_and_nothing_submitted(env: dict[str, str], script: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend(down=True)
    monkeypatch.setattr(gpusub, "_backend", lambda: fake)
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2"])
    assert res.exit_code == 1 and res.stderr.startswith("gpusub: error: scontrol -o show timed out")
    assert res.stderr.count("\n") == 1 and fake.submitted == []


def test_preflight_refuses_too_many_nodes_and_bad_partition(env: dict[str, str], script: Path) -> None:
    with pytest.raises(PreflightError, match="has 8 node"):
        prepare(JobSpec(script=str(script), nodes=9, topology="off"), FakeBackend(), environ=env)
    with pytest.raises(Exception, match="'cpu' does not exist"):
        prepare(JobSpec(script=str(script), partition="cpu"), FakeBackend(), environ=env)


def test_megatron_memory_error_blocks_unless_forced(env: dict[str, str], script: Path) -> None:
    args = ("--num-layers", "80", "--hidden-size", "8192", "--num-attention-heads", "64", "--seq-length", "4096")
    spec = JobSpec(script=str(script), nodes=1, launcher="megatron", args=args)
    with pytest.raises(PreflightError, match=r"need \d+\.\d GiB per GPU.*79\.6 GiB"):
        prepare(spec, FakeBackend(), environ=env)
    p = prepare(spec, FakeBackend(), environ=env, force=True)
    assert any(w.startswith("forced past:") for w in p.warnings), p.warnings


def test_submit_job_unpacks_and_follow_streams_until_done(env: dict[str, str], script: Path) -> None:
    fake = FakeBackend(states=("PENDING", "RUNNING", "RUNNING", "COMPLETED"))
    job_id, run_dir = submit_job(JobSpec(script=str(script), nodes=2), fake, environ=env)
    log = Path(run_dir) / "logs" / "42.r0.log"
    log.write_text("line one\npartial")
    out = io.StringIO()
    sleeps: list[float] = []
    st = follow(job_id, fake, out, environ=env, sleep=sleeps.append)
    assert st.state == "COMPLETED" and out.getvalue() == "line one\n"
    # backoff 0.25, 0.5, 1.0 between the four polls (one scontrol call each), napped in 0.2 s slices
    assert round(sum(sleeps), 6) == 1.75 and max(sleeps) <= 0.2 + 1e-9
    assert fake.polls == 4


def test_follow_polls_fast_once_the_step_has_exited(env: dict[str, str], script: Path) -> None:
    """Issue 25 (end to end): the batch script's exit record (attempts/<job>.r<N>.exit) means the job ends within
    moments: the nap is cut short and the next polls come 0.2 s apart, not after the rest of a 1-5 s backoff."""
    fake = FakeBackend(states=("RUNNING",) * 6 + ("COMPLETED",))
    _, run_dir = submit_job(JobSpec(script=str(script), nodes=2), fake, environ=env)
    record = Path(run_dir) / "attempts" / "42.r0.exit"
    record.parent.mkdir(parents=True, exist_ok=True)
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if fake.polls == 3 and len(sleeps) >= 2 and not record.exists():
            record.write_text("0\n")  # the step exits during the third nap

    st = follow("42", fake, io.StringIO(), run_dir=run_dir, environ=env, sleep=sleep)
    assert st.state == "COMPLETED" and fake.polls == 7
    # 0.25 + 0.5 (two polls), one 0.2 s slice of the third nap (1 s) until the record, then 0.2 before each of the
    # last three polls
    assert round(sum(sleeps), 6) == round(0.25 + 0.5 + 0.2 + 3 * 0.2, 6), sleeps


def test_follow_tolerates_a_few_failed_polls_then_raises(env: dict[str, str], script: Path) -> None:
    fake = FakeBackend()
    _, run_dir = submit_job(JobSpec(script=str(script), nodes=2), fake, environ=env)
    fake.down = True
    with pytest.raises(SlurmTimeout):
        follow("42", fake, io.StringIO(), run_dir=run_dir, environ=env, sleep=lambda s: None, max_poll_failures=2)


def test_statuses_one_call_for_many_jobs_and_run_dir_fallback(env: dict[str, str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend(states=("RUNNING",))
    monkeypatch.setattr("slurmkit.jobs.monitor._sacct", lambda ids, backend: {})
    rd = tmp_path / "r"
    (rd / "attempts").mkdir(parents=True)
    (rd / "attempts" / "7.r0.exit").write_text("3\n")
    idx = Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / CLUSTER_KEY
    idx.mkdir(parents=True)
    (idx / "7").write_text(str(rd))
    rows = statuses(["42", "7", "8"], fake, env)
    assert fake.polls == 1
    assert [(r.job_id, r.state, r.source) for r in rows] == [
        ("42", "RUNNING", "slurmctld"), ("7", "FAILED", "run dir"), ("8", "UNKNOWN", "unknown")]


def test_backoff_caps() -> None:
    b = Backoff(first=1, cap=4, fast_for=0)
    assert [b() for _ in range(5)] == [1, 2, 4, 4, 4]


def test_backoff_polls_fast_during_the_first_minute() -> None:
    """Issue 25: --follow saw a 4 s job end at 7.75 s (0.25 doubling to 5 s); now at most 1 s apart for 60 s of
    polling, then doubling on to the cap."""
    b = Backoff()
    first = [b() for _ in range(6)]
    assert first == [0.25, 0.5, 1.0, 1.0, 1.0, 1.0]
    while b.elapsed < 60:
        assert b() <= 1.0
    assert b() == 5.0


def test_help_imports_neither_jinja_nor_backend_nor_nvml() -> None:
    code = ("import sys; from slurmkit.cli import gpusub\n"
            "try:\n    gpusub.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('jinja2', 'yaml', 'pynvml', 'pyslurm', 'slurmkit.generate', 'slurmkit.backend.cli',"
            " 'slurmkit.jobs.render', 'ClusterShell') if m in sys.modules]\n"
            "assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_slurm_conf_parser_imports_neither_generator_nor_jinja_nor_yaml() -> None:
    """gpusub's tenant check reads slurm.conf on every submit (jobs/tenant.py start): the parser alone, not the
    generator package's Jinja2, PyYAML and inventory model (~40 % of a submit's CPU time when it did)."""
    code = ("import sys; from slurmkit.generate.confparse import parse_slurm_conf\n"
            "parse_slurm_conf('ClusterName=x\\nAccountingStorageType=accounting_storage/slurmdbd\\n')\n"
            "bad = [m for m in ('jinja2', 'yaml', 'slurmkit.generate.slurmconf', 'slurmkit.model.cluster')"
            " if m in sys.modules]\n"
            "assert not bad, bad\n"
            "from slurmkit.generate import generate, Overrides, EXECUTABLE_FILES  # still there, on demand\n"
            "assert callable(generate) and EXECUTABLE_FILES")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def _help_run(cache: Path, columns: str | None, check_click: bool) -> str:
    code = ("import sys\nfrom slurmkit.cli import gpusub\ngpusub.main(['--help'])\n"
            + ("assert 'click' not in sys.modules, 'click imported'\n" if check_click else ""))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["XDG_CACHE_HOME"] = str(cache)
    if columns is not None:
        env["COLUMNS"] = columns
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _click_help(columns: str | None) -> str:
    """click's own `gpusub --help`, no cache involved."""
    code = "from slurmkit.cli import gpusub_cmds\ngpusub_cmds.main(['--help'])\n"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_help_is_served_from_cache_without_click_and_equals_clicks(tmp_path: Path) -> None:
    """Issue 25 speed goal: `gpusub --help` <= 3x `python -c pass`; click's import was most of it. The second call
    prints the cached text without importing click, byte for byte what click prints, at each width."""
    for columns in (None, "60", "200"):
        want = _click_help(columns)
        first = _help_run(tmp_path, columns, check_click=False)  # miss: click renders and the text is cached
        second = _help_run(tmp_path, columns, check_click=True)
        assert first == want and second == want
    assert _help_run(tmp_path, "60", check_click=True) != _help_run(tmp_path, "200", check_click=True)


def test_help_cache_key_follows_commands_source(tmp_path: Path) -> None:
    """An edited gpusub_cmds.py (new option, new help string) is a miss: never a stale --help."""
    from slurmkit.cli import gpusub as entry

    key, path = entry._help_key()
    assert key and "gpusub_cmds.py" in key and "width=" in key
    entry._write_help(key, str(tmp_path / "h.txt"), "cached\n")
    assert entry._read_help(key, str(tmp_path / "h.txt")) == "cached\n"
    assert entry._read_help(key.replace("width=", "width=9"), str(tmp_path / "h.txt")) is None
    os.chmod(tmp_path / "h.txt", 0o666)  # a file others may write is never trusted
    assert entry._read_help(key, str(tmp_path / "h.txt")) is None


def test_terminal_columns_is_shutils(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from slurmkit.cli.gpusub import terminal_columns

    for value in (None, "0", "-3", "abc", "57", "300"):
        if value is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", value)
        assert terminal_columns() == shutil.get_terminal_size().columns, value


def test_template_loads_while_the_slurm_queries_wait(tmp_path: Path) -> None:
    """Issue 25 (submit time): Jinja2's import and the job template's load run while the live queries wait on
    slurmctld, not after them. The fake controller answers the partition query only once the template is loaded
    (10 s at most): a prepare() that loads it only after the queries would find it missing."""
    code = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
os.environ.update(SLURMKIT_INVENTORY={str(LAB_INV)!r}, XDG_CACHE_HOME={str(tmp_path / 'cache')!r},
                  SLURM_CONF={str(tmp_path / 'none.conf')!r})
from tests.unit.test_gpusub_cli import FakeBackend
from slurmkit.jobs.spec import JobSpec
from slurmkit.jobs.submit import prepare

class Slow(FakeBackend):
    def partitions(self):
        end = time.monotonic() + 10
        while time.monotonic() < end:
            t = sys.modules.get("slurmkit.templates")
            if t is not None and t.environment.cache_info().currsize and _loaded(t.environment("job_templates")):
                return super().partitions()
            time.sleep(0.01)
        raise SystemExit("the template was not loaded while the queries waited")

def _loaded(env):  # only once environment() is cached (never a second Environment made from this thread)
    return env.cache is not None and any("torchrun.sh.j2" in str(k) for k in list(env.cache.keys()))

script = {str(tmp_path / 'train.py')!r}
open(script, "w").write("print(1)\\n")
p = prepare(JobSpec(script=script, nodes=2), Slow(), cwd={str(tmp_path)!r}, test_only=False)
assert "torchrun" in p.job.request.script
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-500:]


def test_the_collector_is_off_for_the_short_call_and_back_on_for_follow(monkeypatch) -> None:
    """gpusub.main turns the cyclic GC off (startup speed); --follow / logs -f, which can run for hours, turn it on."""
    import gc

    import pytest

    from slurmkit.cli import gpusub, gpusub_cmds
    from slurmkit.jobs import monitor

    seen = {}

    def fake_main(args):  # type: ignore[no-untyped-def]
        seen["main"] = gc.isenabled()

    def fake_follow(*a, **k):  # type: ignore[no-untyped-def]
        seen["follow"] = gc.isenabled()
        return monitor.JobStatus("1", "COMPLETED", "slurmctld")

    monkeypatch.setattr(gpusub_cmds, "main", fake_main)
    try:
        gpusub.main(["x.py"])
        assert seen["main"] is False
        monkeypatch.setattr(monitor, "follow", fake_follow)
        monkeypatch.setattr(monitor, "exit_status", lambda st: 0)
        with pytest.raises(SystemExit):
            gpusub_cmds._follow_and_exit("1", None, None)
        assert seen["follow"] is True
    finally:
        gc.enable()
