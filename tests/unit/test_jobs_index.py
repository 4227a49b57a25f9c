"""The job-id -> run-dir index is per cluster (issue 25 item 6): job ids repeat across clusters sharing a home
directory and across labs on one host, so `gpusub status|logs N` for a job slurmctld forgot must never answer
with another cluster's job, and an id this cluster never ran is UNKNOWN with a non-zero exit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.backend.parse import JobInfo
from slurmkit.cli import gpusub_cmds as gpusub  # the click commands (gpusub.py is the entry point)
from slurmkit.jobs.spec import JobSpec
from slurmkit.jobs.submit import submit_job
from tests.unit.test_gpusub_cli import LAB_INV, FakeBackend, unit_slurm_conf


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """As test_gpusub_cli's: the lab inventory, state and runs under tmp_path, a slurm.conf naming cluster `unit`."""
    e = {"SLURMKIT_INVENTORY": str(LAB_INV), "SLURMKIT_STATE_DIR": str(tmp_path / "state"),
         "GPUSUB_RUN_ROOT": str(tmp_path / "runs"), "SLURM_CONF": unit_slurm_conf(tmp_path)}
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


class ForgetfulBackend(FakeBackend):
    """slurmctld that has forgotten every job (older than MinJobAge); submits as job 5."""

    def jobs(self, job_ids: Sequence[str] | None = None) -> list[JobInfo]:
        return []

    def submit(self, request):  # type: ignore[no-untyped-def]
        self.submitted.append(request)
        return "5"


def _submit_finished_job(env: dict[str, str], tmp_path: Path, text: str = "job 5 ran here\n") -> Path:
    """gpusub submits job 5 on the cluster $SLURM_CONF names; its batch shell recorded exit 0 and a log."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    _, run_dir = submit_job(JobSpec(script=str(script), nodes=1), ForgetfulBackend(), environ=env)
    rd = Path(run_dir)
    (rd / "attempts" / "5.r0.exit").write_text("0\n")
    (rd / "logs" / "5.r0.log").write_text(text)
    return rd


@pytest.fixture()
def no_sacct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slurmkit.jobs.monitor._sacct", lambda ids, backend: {})
    monkeypatch.setattr(gpusub, "_backend", ForgetfulBackend)


@pytest.mark.usefixtures("no_sacct")
def test_a_forgotten_job_is_found_on_its_own_cluster(env: dict[str, str], tmp_path: Path) -> None:
    rd = _submit_finished_job(env, tmp_path)
    res = CliRunner().invoke(gpusub.status_cmd, ["5"])
    assert res.exit_code == 0 and res.output.startswith("5 COMPLETED") and f"run_dir={rd}" in res.output, res.output
    res = CliRunner().invoke(gpusub.logs_cmd, ["5"])
    assert res.exit_code == 0 and res.output == "job 5 ran here\n", res.output


@pytest.mark.parametrize("other", [
    {"name": "prod"},                     # another cluster sharing the home directory
    {"name": "unit", "port": "27002"},    # another lab: every lab is called `lab`, its controller differs
    {"name": "unit", "host": "ctl2"},
])
@pytest.mark.usefixtures("no_sacct")
def test_another_clusters_job_with_the_same_id_is_unknown(env: dict[str, str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          other: dict[str, str]) -> None:
    _submit_finished_job(env, tmp_path)
    monkeypatch.setenv("SLURM_CONF", unit_slurm_conf(tmp_path, **other))
    res = CliRunner().invoke(gpusub.status_cmd, ["5"])
    assert res.exit_code == 1 and res.output.startswith("5 UNKNOWN"), res.output
    assert "COMPLETED" not in res.output and "run_dir=" not in res.output
    res = CliRunner().invoke(gpusub.logs_cmd, ["5"])
    assert res.exit_code == 1 and "job 5 ran here" not in res.output, res.output
    assert res.output.startswith("gpusub: error: job 5: not known to slurmctld") and res.output.count("\n") == 1


@pytest.mark.usefixtures("no_sacct")
def test_an_id_never_submitted_is_unknown_and_says_which_cluster(env: dict[str, str]) -> None:
    res = CliRunner().invoke(gpusub.status_cmd, ["123456"])
    assert res.exit_code == 1
    assert res.output == ("123456 UNKNOWN reason=not in slurmctld, no accounting record, no run dir recorded for "
                          "123456 on cluster unit@ctl:6817 [unknown]\n")


@pytest.mark.usefixtures("no_sacct")
def test_an_index_entry_from_before_the_cluster_keys_is_not_trusted(env: dict[str, str], tmp_path: Path) -> None:
    """An entry written by an older gpusub (``jobs/<id>``) may be any cluster's job: never read, but named."""
    old = tmp_path / "old-run"
    (old / "attempts").mkdir(parents=True)
    (old / "attempts" / "9.r0.exit").write_text("0\n")
    idx = Path(env["SLURMKIT_STATE_DIR"]) / "jobs"
    idx.mkdir(parents=True)
    (idx / "9").write_text(f"{old}\n")
    res = CliRunner().invoke(gpusub.status_cmd, ["9"])
    assert res.exit_code == 1 and res.output.startswith("9 UNKNOWN"), res.output
    assert f"{idx / '9'} is from an older gpusub, its cluster unknown: not used" in res.output


def test_no_cluster_name_no_index_entry(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "nameless.conf"
    conf.write_text("SlurmctldHost=ctl\n")
    monkeypatch.setitem(env, "SLURM_CONF", str(conf))
    rd = _submit_finished_job(env, tmp_path)
    assert not (Path(env["SLURMKIT_STATE_DIR"]) / "jobs").exists()
    assert "cluster" not in json.loads((rd / "submit.json").read_text())


def test_the_backends_slurm_conf_names_the_cluster(env: dict[str, str], tmp_path: Path) -> None:
    """A library user's backend for a lab carries the lab's SLURM_CONF: the job is indexed under that cluster."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    backend = ForgetfulBackend()
    backend.env = {"SLURM_CONF": unit_slurm_conf(tmp_path, name="lab", host="localhost", port="27002")}
    submit_job(JobSpec(script=str(script), nodes=1), backend, environ=env)
    assert (Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / "lab@localhost:27002" / "5").is_file()


@pytest.mark.parametrize(("conf", "key"), [
    ("ClusterName=Prod\nSlurmctldHost=ctl1(10.1.0.1)\nSlurmctldHost=ctl2\n", "prod@ctl1:6817"),
    ("ClusterName=lab\nSlurmctldHost=localhost\nSlurmctldPort=27002-27003\n", "lab@localhost:27002-27003"),
    ("ClusterName=old\nControlMachine=head\n", "old@head:6817"),
    ("SlurmctldHost=ctl\n", None),
])
def test_cluster_key_from_slurm_conf(tmp_path: Path, conf: str, key: str | None) -> None:
    from slurmkit.jobs.rundir import cluster_key

    p = tmp_path / "slurm.conf"
    p.write_text(conf)
    assert cluster_key({"SLURM_CONF": str(p)}) == key


@pytest.mark.parametrize(("recording", "port"), [("scontrol_show_config.txt", "27000"),
                                              ("24.11/scontrol_show_config.txt", "27100")])
def test_cluster_identity_from_scontrol_show_config(recording: str, port: str) -> None:
    """Configless (no slurm.conf here): ``scontrol show config``, recorded from the 22.05 and 24.11 labs, gives the
    key the lab's slurm.conf gives (ClusterName=lab, SlurmctldHost=vm(127.0.0.1), SlurmctldPort=<port>)."""
    from slurmkit.jobs.rundir import _key, show_config_identity

    text = (Path(__file__).resolve().parents[1] / "data" / "slurm" / recording).read_text()
    assert show_config_identity(text) == ("lab", "vm(127.0.0.1)", port)
    assert _key(*show_config_identity(text)) == f"lab@vm:{port}"


@pytest.mark.usefixtures("no_sacct")
def test_a_job_id_is_never_a_path_into_the_index(env: dict[str, str], tmp_path: Path) -> None:
    secret = Path(env["SLURMKIT_STATE_DIR"]) / "secret"
    (secret.parent / "jobs").mkdir(parents=True)  # so that jobs/../secret resolves
    secret.write_text(f"{tmp_path}\n")
    res = CliRunner().invoke(gpusub.status_cmd, ["../secret"])
    assert res.exit_code == 1 and res.output.startswith("../secret UNKNOWN") and "older gpusub" not in res.output
