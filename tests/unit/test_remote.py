"""gpusub --remote's pieces without a cluster: target syntax, the argv sent to the cluster, the ssh argv, what reaches
the local terminal, and the reconnect of ``logs -f`` (a real ssh stand-in on PATH that drops the first connection).
The whole path, with a real sshd and a real lab, is tests/integration/test_remote_lab.py."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from slurmkit.cli.gpusub_cmds import remote_args
from slurmkit.errors import UsageError
from slurmkit.jobs import remote as rmt


@pytest.mark.parametrize(("text", "user", "host", "port"), [
    ("login", None, "login", None),
    ("alice@login.cluster.org", "alice", "login.cluster.org", None),
    ("alice@10.0.0.5:2222", "alice", "10.0.0.5", 2222),
    ("[::1]:22", None, "::1", 22),
    ("bob@[fe80::1]", "bob", "fe80::1", None),
])
def test_targets(text: str, user: str | None, host: str, port: int | None) -> None:
    t = rmt.Target.parse(text)
    assert (t.user, t.host, t.port) == (user, host, port)


@pytest.mark.parametrize("text", ["", "a@b@c", "-oProxyCommand=x", "host:0", "host:70000", "host:22:1", "a b"])
def test_bad_targets_are_refused_with_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match="--remote"):
        rmt.Target.parse(text)


def test_remote_args_drop_the_remote_options_and_point_at_the_shipped_script() -> None:
    args = ["--remote", "login", "-N", "2", "--ssh-option=ControlPersist=1m", "--ssh-config", "/x/cfg",
            "../train.py", "--remote-token", "t1", "--time", "1:00:00", "-f", "--", "--remote", "keep", "-N", "9"]
    assert remote_args(args, "src/train.py") == ["-N", "2", "src/train.py", "--time", "1:00:00", "-f", "--",
                                                 "--remote", "keep", "-N", "9"]
    # an option's value that looks like a script is not the script; -N4 carries its own value
    assert remote_args(["-p", "gpu", "-N4", "--name", "x.py", "t.py", "a1"], "t.py") == [
        "-p", "gpu", "-N4", "--name", "x.py", "t.py", "a1"]


def test_tokens_and_remote_dirs() -> None:
    assert rmt.check_token("run-1.a+b_c") == "run-1.a+b_c"
    for bad in ("", ".hidden", "../up", "a/b", "x" * 129, "a b"):
        with pytest.raises(UsageError, match="--remote-token"):
            rmt.check_token(bad)
    with pytest.raises(UsageError, match="--remote-dir"):
        rmt.check_remote_dir("a\nb")
    tok = rmt.new_token("my train/job")
    assert rmt.TOKEN_RE.fullmatch(tok) and tok.startswith("my_train_job-")


def test_clean_keeps_text_and_drops_terminal_control() -> None:
    assert rmt.clean("ok\tx\r\n") == "ok\tx\r\n"
    assert rmt.clean("\x1b]0;pwned\x07\x1b[2J\x9bA") == "?]0;pwned??[2J?A"


def test_the_users_ssh_options_come_before_the_reuse_defaults(tmp_path: Path) -> None:
    r = rmt.Remote(rmt.Target.parse("al@h:2200"), ssh_config="/c", ssh_options=("ControlPath=/mine",),
                   environ={"SLURMKIT_STATE_DIR": str(tmp_path)})
    argv = r.argv("true")
    assert argv[:5] == ["ssh", "-F", "/c", "-o", "ControlPath=/mine"]  # ssh takes the first value: the user's
    assert f"ControlPath={tmp_path}/ssh/%C" in argv and argv[-4:] == ["-T", "al@h", "--", "true"]
    assert argv[argv.index("-p") + 1] == "2200"
    assert (tmp_path / "ssh").stat().st_mode & 0o777 == 0o700
    assert r.gpusub_cmd(["status", "1; rm -rf ~"]) == "gpusub status '1; rm -rf ~'; rc=$?; [ $rc -eq 255 ] && rc=254; exit $rc"


def _fake_ssh(tmp_path: Path, body: str) -> dict[str, str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "ssh").write_text("#!/bin/sh\n"
                              'for a in "$@"; do [ "$a" = -O ] && exit 0; [ "$a" = -N ] && exit 0; done\n' + body)
    os.chmod(bin_ / "ssh", 0o755)
    return {"PATH": f"{bin_}:/usr/bin:/bin", "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "N": str(tmp_path / "n")}


def test_logs_follow_reconnects_and_skips_what_it_printed(tmp_path: Path) -> None:
    # first connection: two lines, then the connection drops (ssh exits 255); the second prints the whole log again,
    # a third line more, and the remote gpusub's exit code
    env = _fake_ssh(tmp_path, 'n=$(cat "$N" 2>/dev/null || echo 0); echo $((n+1)) > "$N"\n'
                              'printf "one\\ntwo\\n"\n'
                              'if [ "$n" = 0 ]; then echo "Connection reset" >&2; exit 255; fi\n'
                              'printf "three \\033[31m\\n"; echo "gpusub: job 7 COMPLETED" >&2; exit 0\n')
    err, naps = io.StringIO(), []
    r = rmt.Remote(rmt.Target.parse("h"), environ=env, err=err, sleep=naps.append)
    out = io.StringIO()
    assert rmt.follow_logs(r, "7", out) == 0
    assert out.getvalue() == "one\ntwo\nthree ?[31m\n"
    assert "connection lost while following job 7 (Connection reset)" in err.getvalue()
    assert "gpusub: job 7 COMPLETED" in err.getvalue() and naps == [1.0]


def test_calls_give_up_after_the_retries_with_ssh_s_own_error(tmp_path: Path) -> None:
    env = _fake_ssh(tmp_path, 'echo "ssh: connect to host h port 22: Connection refused" >&2; exit 255\n')
    err, naps = io.StringIO(), []
    r = rmt.Remote(rmt.Target.parse("h"), environ=env, err=err, sleep=naps.append, retries=3)
    with pytest.raises(rmt.RemoteError, match="failed 4 times, last: ssh: connect to host h port 22: Connection "
                                              "refused"):
        r.status(["1"])
    assert naps == [1.0, 2.0, 4.0] and err.getvalue().count("reconnecting") == 3


def test_a_command_exit_code_is_not_taken_for_a_lost_connection(tmp_path: Path) -> None:
    env = _fake_ssh(tmp_path, 'echo "[]"; exit 1\n')
    r = rmt.Remote(rmt.Target.parse("h"), environ=env, sleep=lambda s: pytest.fail("retried"))
    assert r.status(["1"]) == []


def test_find_tree_places_script_and_cwd(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text("print(1)\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    with pytest.raises(UsageError, match="without a commit"):
        rmt.find_tree("train.py", str(repo / "src"))
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "x"], check=True, env=env)
    t = rmt.find_tree("train.py", str(repo / "src"))
    assert (t.kind, t.root, t.cwd_rel, t.script_rel) == ("git", str(repo.resolve()), "src", "train.py")
    t = rmt.find_tree(str(repo / "src" / "train.py"), str(tmp_path))  # cwd outside the tree: its top
    assert (t.cwd_rel, t.script_rel) == (".", "src/train.py")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "run.sh").write_text("true\n")
    t = rmt.find_tree("run.sh", str(plain))
    assert (t.kind, t.root, t.cwd_rel, t.script_rel) == ("rsync", str(plain.resolve()), ".", "run.sh")
    with pytest.raises(UsageError, match="no such file"):
        rmt.find_tree("missing.py", str(plain))


def test_reuse_off_starts_no_master(tmp_path: Path) -> None:
    # the stand-in records every call: with ControlMaster=no there is no -O check and no -N master, only the call
    env = _fake_ssh(tmp_path, "")
    Path(env["PATH"].split(":")[0], "ssh").write_text('#!/bin/sh\necho "$*" >> "$N"\n'  # no master answers
                                                       'case " $* " in *" -O "*) exit 255;; *" -N "*) exit 0;; esac\n'
                                                       'echo "[]"\n')
    for opts, calls in ((("ControlMaster=no",), 1), (("ControlPath none",), 1), ((), 3)):
        Path(env["N"]).unlink(missing_ok=True)
        r = rmt.Remote(rmt.Target.parse("h"), ssh_options=opts, environ=env)
        assert r.status(["1"]) == []
        lines = Path(env["N"]).read_text().splitlines()
        assert len(lines) == calls, lines  # (-O check, -N master,) the status call


def test_launch_options_become_gpusub_flags() -> None:
    flags = rmt.gpusub_flags({"nodes": 2, "time": "1:00:00", "exclusive": True, "hold": False, "cpu_bind": False,
                              "env": {"A": "1", "B": "x y"}, "sbatch_args": ["--nice=10"], "mem_per_gpu": "16G"})
    assert flags == ["--nodes", "2", "--time", "1:00:00", "--exclusive", "--no-cpu-bind", "--env", "A=1", "--env",
                     "B=x y", "--sbatch-arg", "--nice=10", "--mem-per-gpu", "16G"]
    # what gpusub's parser makes of them is what was meant
    from slurmkit.cli.gpusub_cmds import submit_cmd

    ctx = submit_cmd.make_context("gpusub", [*flags, "t.py"])
    assert (ctx.params["nodes"], ctx.params["exclusive"], ctx.params["cpu_bind"], ctx.params["env_pairs"]) == (
        2, True, False, ("A=1", "B=x y"))
    for bad in ({"run_dir": "/x"}, {"mem_per_gpu_mb": 100}, {"remote": "h"}):
        with pytest.raises(UsageError, match="no gpusub flag"):
            rmt.gpusub_flags(bad)


def test_launch_remote_refuses_a_callable_and_unknown_options() -> None:
    from slurmkit import launch

    with pytest.raises(UsageError, match="a script only"):
        launch.submit(print, remote="login")
    with pytest.raises(UsageError, match="unknown option"):
        launch.submit("t.py", remote="login", nodez=2)


def test_rest_rows_of_both_api_shapes() -> None:
    from slurmkit.jobs.rest import job_row

    # v0.0.38 (22.05 openapi plugin): a state string, the wait(2) status (exit 3 -> 768; SIGKILL -> 9)
    assert job_row("7", {"job_state": "FAILED", "exit_code": 768, "nodes": "node1", "restart_cnt": 1}) == {
        "job_id": "7", "state": "FAILED", "source": "slurmrestd", "nodes": "node1", "reason": "",
        "exit_code": "3:0", "restarts": 1, "finished": True}
    assert job_row("7", {"job_state": "CANCELLED", "exit_code": 9})["exit_code"] == "0:9"
    # data_parser (v0.0.40+): a list of state flags, numbers as {set, infinite, number}
    row = job_row("8", {"job_state": ["RUNNING", "REQUEUED"], "restart_cnt": 0,
                        "exit_code": {"status": ["PENDING"], "return_code": {"set": True, "infinite": False,
                                                                              "number": 0},
                                      "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}})
    assert (row["state"], row["exit_code"], row["finished"]) == ("RUNNING", "0:0", False)
    row = job_row("8", {"job_state": ["FAILED"], "exit_code": {"return_code": {"set": True, "number": 75},
                                                               "signal": {"id": {"set": True, "number": 0}}}})
    assert (row["state"], row["exit_code"], row["finished"]) == ("FAILED", "75:0", True)
    # v0.0.39 (23.02/23.11): signal/signal_id, a plain integer
    row = job_row("9", {"job_state": "CANCELLED", "exit_code": {"status": "SIGNALED", "return_code": 0,
                                                                "signal": {"signal_id": 15, "name": "TERM"}}})
    assert (row["state"], row["exit_code"]) == ("CANCELLED", "0:15")


def test_rest_urls_and_tokens_are_checked(tmp_path: Path) -> None:
    from slurmkit.jobs.rest import RestRemote, read_token

    r = RestRemote.parse("https://alice@login:6820", "t", {})
    assert (r.url, r.user) == ("https://login:6820", "alice")
    assert RestRemote.parse("http://[::1]:6820", "t", {"USER": "bob"}).url == "http://[::1]:6820"
    for bad, why in (("http://login:6820", "in the clear"), ("https://a:pw@login", "no password"),
                     ("https://login/slurm", "no password, path"), ("ftp://x", "expected https")):
        with pytest.raises(UsageError, match=why):
            RestRemote.parse(bad, "t", {})
    f = tmp_path / "tok"
    f.write_text("SLURM_JWT=abc.def-ghi_\n")
    os.chmod(f, 0o600)
    assert read_token(str(f), {}) == "abc.def-ghi_"
    os.chmod(f, 0o640)
    with pytest.raises(UsageError, match="mode 0600"):
        read_token(str(f), {})
    (tmp_path / "link").symlink_to(f)
    with pytest.raises(UsageError, match="--jwt-file"):
        read_token(str(tmp_path / "link"), {})  # O_NOFOLLOW: never a link to someone's file
    assert read_token(None, {"SLURM_JWT": "x.y.z"}) == "x.y.z"
    with pytest.raises(UsageError, match="no JWT"):
        read_token(None, {"SLURM_JWT": "x\r\nX-Evil: 1"})
    with pytest.raises(UsageError, match="no token"):
        read_token(None, {})


def test_remote_scripts_travel_on_one_line_and_run_as_written(tmp_path: Path) -> None:
    # csh/tcsh refuse a newline inside quotes: the command is one line; sh runs it as the script says
    cmd = rmt._sh('set -eu\nprintf "%s|" "$@"\necho "$1" > "$2"\n', "it's \"quoted\" $HOME", str(tmp_path / "o"))
    assert "\n" not in cmd
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    assert out == f"it's \"quoted\" $HOME|{tmp_path / 'o'}|"
    assert (tmp_path / "o").read_text() == "it's \"quoted\" $HOME\n"
