"""gpusub --remote over SSH on the real lab (issue 34 item 3): a "laptop" with no Slurm submits, follows, waits
for and cancels jobs through a login node's sshd.

The login node: Debian's openssh-server in its own UTS + mount namespaces (hostname ``login``), on a loopback port,
run as the ordinary user ``games`` (a non-root sshd lets in only the user it runs as), with its own host key, config
and authorized_keys in this test's directory; the namespace's /etc/passwd is a copy that gives ``games`` a login
shell and a home here (the host's /etc/passwd, /etc/ssh and root's ~/.ssh are never read or written). sshd's
``SetEnv`` gives sessions what a cluster's login node has: SLURM_CONF of the lab and a gpusub on PATH. The laptop
side runs with Slurm's commands on its PATH replaced by ones that record any call and fail, and an ssh config of its
own (``--ssh-config``): nothing of Slurm runs there.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_tcp_port, lab_run

pytestmark = [pytest.mark.lab, pytest.mark.releases]

USER = "games"  # a system account present on every Debian (uid 5); the login namespace gives it a shell and home
SLURM_CMDS = ("sbatch", "srun", "salloc", "squeue", "scontrol", "scancel", "sinfo", "sacct", "sacctmgr", "sstat")

TRAIN_V1 = "#!/bin/bash\necho \"train v1\"\n"
TRAIN_V2 = """#!/bin/bash
cd "$(dirname "$(readlink -f "$0")")"
echo "train v2 host=$(hostname) user=$(id -un) data=$(od -An -tx1 data.bin | tr -d ' \\n') extra=$(cat extra.txt) \
ignored=$([ -e junk.log ] && echo yes || echo no) args=$1"
exit "$2"
"""
SLEEPER = "#!/bin/bash\necho \"sleeper on $(hostname)\"\nsleep 300\n"


@dataclass
class Login:
    base: Path
    home: Path
    port: int
    sshd: subprocess.Popen
    ssh_config: Path
    env: dict[str, str]  # the laptop's environment
    marker: Path  # a laptop-side Slurm command writes here
    jobs: list[str]

    def gpusub(self, *args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", *args], env=self.env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)

    def popen(self, *args: str, cwd: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "slurmkit.cli.gpusub", *args], env=self.env, cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def descendants(self) -> list[tuple[int, str]]:
        """(pid, comm) of every process below the sshd listener: its sessions and what they run."""
        children: dict[int, list[tuple[int, str]]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
                children.setdefault(int(rest.split()[1]), []).append((int(d.name), comm))
        out, todo = [], [self.sshd.pid]
        while todo:
            for pid, comm in children.get(todo.pop(), []):
                out.append((pid, comm))
                todo.append(pid)
        return out

    def sessions(self) -> list[int]:
        """The sshd processes of the open connections (the shells they started are left alone: a connection that
        drops ends sshd's side of it, not what it ran)."""
        return [pid for pid, comm in self.descendants() if comm == "sshd"]


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited {proc.returncode}: {log.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"sshd did not listen on {port}: {log.read_text()}")


@pytest.fixture(scope="module")
def login(lab, tmp_path_factory) -> Iterator[Login]:  # type: ignore[no-untyped-def]
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    assert os.path.exists(sshd_bin), "no sshd: apt-get install openssh-server (tests/setup-env.sh installs it)"
    pw = pwd.getpwnam(USER)
    # /tmp, not pytest's root-only tmp: the login user and its jobs must reach their home
    base = Path(tempfile.mkdtemp(prefix="gpusub-remote-", dir="/tmp"))
    os.chmod(base, 0o755)
    home, etc = base / "home", base / "etc"
    (home / ".ssh").mkdir(parents=True)
    etc.mkdir()
    client = tmp_path_factory.mktemp("laptop")
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab-login", "-f", str(etc / "host_key")])
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "laptop", "-f", str(client / "id")])
    (home / ".ssh" / "authorized_keys").write_text((client / "id.pub").read_text())
    remote_bin = base / "bin"
    remote_bin.mkdir()
    # the cluster's gpusub (slurmkit installed there); $HOME/slow-submit makes a submission take 4 s (the drop test)
    (remote_bin / "gpusub").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --run-dir "*)\n'
        '  [ -e "$HOME/slow-submit" ] && sleep 4\n'
        # the submitter (this script's parent) killed before or after the real gpusub: no submit.rc is written
        '  [ -e "$HOME/die-before" ] && kill -9 $PPID && exit 9\n'
        f'  [ -e "$HOME/die-after" ] && {{ {sys.executable} -m slurmkit.cli.gpusub "$@"; kill -9 $PPID; exit 9; }} ;;\n'
        'esac\n'
        f'exec {sys.executable} -m slurmkit.cli.gpusub "$@"\n')
    os.chmod(remote_bin / "gpusub", 0o755)
    for p in (home, home / ".ssh", home / ".ssh" / "authorized_keys", etc / "host_key"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    os.chmod(home / ".ssh", 0o700)
    lines = [f"{USER}:x:{pw.pw_uid}:{pw.pw_gid}:{pw.pw_gecos}:{home}:/bin/sh" if line.split(":", 1)[0] == USER
             else line for line in Path("/etc/passwd").read_text().splitlines()]
    (etc / "passwd").write_text("\n".join(lines) + "\n")
    port = free_tcp_port(700)
    lab_path = lab.env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
    (etc / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {etc / 'host_key'}
PidFile none
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
AllowUsers {USER}
SetEnv SLURM_CONF={lab.conf} PATH={remote_bin}:{lab_path} PYTHONPATH={ROOT} SLURMKIT_STATE_DIR={home / 'state'}
""")
    log = base / "sshd.log"
    with open(log, "w") as logf:
        sshd = subprocess.Popen(
            ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
             f'hostname login && mount --bind "$1" /etc/passwd && {_reach(base)}exec setpriv --reuid {USER} '
             f'--regid {USER} --clear-groups {sshd_bin} -D -e -f "$2"', "sh", str(etc / "passwd"),
             str(etc / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
    jobs: list[str] = []
    try:
        _wait_port(port, sshd, log)
        host_pub = " ".join((etc / "host_key.pub").read_text().split()[:2])
        (client / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        cfg = client / "ssh_config"
        cfg.write_text(f"""\
Host login-lab
  HostName 127.0.0.1
  Port {port}
  User {USER}
Host *
  IdentityFile {client / 'id'}
  IdentitiesOnly yes
  UserKnownHostsFile {client / 'known_hosts'}
  StrictHostKeyChecking yes
  BatchMode yes
""")
        fake = client / "no-slurm"
        fake.mkdir()
        marker = client / "slurm-called"
        for cmd in SLURM_CMDS:
            (fake / cmd).write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\necho "no Slurm on the laptop" >&2\nexit 99\n')
            os.chmod(fake / cmd, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPUSUB"))}
        env.update(PATH=f"{fake}:/usr/bin:/bin", PYTHONPATH=str(ROOT), SLURMKIT_STATE_DIR=str(client / "state"),
                   GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@example.org")
        yield Login(base=base, home=home, port=port, sshd=sshd, ssh_config=cfg, env=env, marker=marker, jobs=jobs)
    finally:
        if jobs:
            lab_run(lab, ["scancel", *jobs], check=False)
        for sock in (client / "state" / "ssh").glob("*"):  # the ControlMasters this module's runs left
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "login-lab"], capture_output=True)
        # the sessions first, so that the listener reaps them, then the listener
        for pid, _ in reversed(Login(base, home, port, sshd, Path(), {}, Path(), []).descendants()):  # leaves first
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        sshd.terminate()
        sshd.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def _reach(base: Path) -> str:
    """Shell steps that let the login user run this interpreter: one under root's 0700 home (a pyenv build; CI's
    venv is made from Debian's python3) is moved, in the login namespace only, onto a tmpfs /root of mode 0755."""
    real = os.path.realpath(sys.base_prefix)
    if not real.startswith("/root/"):
        return ""
    top = "/root/" + real.split("/")[2]
    hold = base / "hold"
    return (f"mkdir -p {hold} && mount --bind {top} {hold} && mount -t tmpfs -o mode=0755 tmpfs /root && "
            f"mkdir -p {top} && mount --move {hold} {top} && ")


def _repo(path: Path, env: dict[str, str]) -> Path:
    """A laptop checkout: train.sh and data.bin committed, then edited (text and binary), an untracked file, and an
    ignored one."""
    (path / "scripts").mkdir(parents=True)
    (path / "scripts" / "train.sh").write_text(TRAIN_V1)
    os.chmod(path / "scripts" / "train.sh", 0o755)  # the srun launcher executes the script: its mode ships too
    (path / "scripts" / "data.bin").write_bytes(bytes([0, 1, 2, 255]))
    (path / ".gitignore").write_text("*.log\n")
    for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "v1"]):
        _run(["git", "-C", str(path), *argv], env=env)
    (path / "scripts" / "train.sh").write_text(TRAIN_V2)
    (path / "scripts" / "data.bin").write_bytes(bytes([0, 1, 2, 254, 7]))
    (path / "scripts" / "extra.txt").write_text("untracked-content\n")
    (path / "scripts" / "junk.log").write_text("ignored\n")
    return path


def _job_id(out: str) -> str:
    m = re.search(r"^submitted job ([0-9]+)$", out, re.M)
    assert m, out
    return m.group(1)


def _remote_line(out: str) -> tuple[str, str]:
    m = re.search(r"^remote: \S+?:(/\S+) \(token (\S+?);", out, re.M)
    assert m, out
    return m.group(1), m.group(2)


def _user_jobs(lab, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Every job of that name slurmctld knows, pending, running or recently finished (squeue --states=all)."""
    out = lab_run(lab, ["squeue", "-h", "--states=all", "-n", name, "-o", "%i %u"]).stdout.split("\n")
    return [line for line in out if line.strip()]


def test_remote_submit_ships_the_dirty_tree_and_follows_the_job(login: Login, lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(tmp_path / "proj", login.env)
    ssh = ("--ssh-config", str(login.ssh_config))
    res = login.gpusub("--remote", "login-lab", *ssh, "scripts/train.sh", "-N", "1", "--gpus-per-node", "1",
                       "--launcher", "srun", "--time", "5:00", "--name", "remote-dirty", "--", "hello world", "3",
                       cwd=repo)
    assert res.returncode == 0, res.stderr + res.stdout
    job = _job_id(res.stdout)
    login.jobs.append(job)
    run_root, token = _remote_line(res.stdout)
    assert run_root == str(login.home / "gpusub-remote" / token) and token.startswith("remote-dirty-")
    # the shipped tree: HEAD plus the binary diff plus the untracked file, without the ignored one
    tree = Path(run_root) / "tree"
    assert (tree / "scripts" / "train.sh").read_text() == TRAIN_V2
    assert (tree / "scripts" / "data.bin").read_bytes() == bytes([0, 1, 2, 254, 7])
    assert (tree / "scripts" / "extra.txt").read_text() == "untracked-content\n"
    assert not (tree / "scripts" / "junk.log").exists()
    assert b"GIT binary patch" in (Path(run_root) / "ship" / "tree.patch").read_bytes()
    # wait, on the other spelling of the target: exits with the job's own code (the script's exit 3)
    wait = login.gpusub("wait", "--remote", f"{USER}@127.0.0.1:{login.port}", *ssh, job, timeout=240)
    assert wait.returncode == 3, wait.stdout + wait.stderr
    assert re.search(rf"^{job} FAILED .*exit=3:0", wait.stdout, re.M), wait.stdout
    # a real job of the login user on a lab node, its log in the run dir on the cluster
    show = lab_run(lab, ["scontrol", "show", "job", job]).stdout
    assert f"UserId={USER}(" in show and re.search(rf"WorkDir={re.escape(str(tree))}$", show, re.M), show
    logs = login.gpusub("logs", "--remote", "login-lab", *ssh, job)
    assert logs.returncode == 0, logs.stderr
    assert (f"train v2 host=node1 user={USER} data=000102fe07 extra=untracked-content ignored=no "
            "args=hello world") in logs.stdout, logs.stdout
    st = login.gpusub("status", "--remote", "login-lab", *ssh, job)
    assert st.returncode == 0 and f"run_dir={run_root}/run" in st.stdout, st.stdout + st.stderr
    # the same token again: the run is found, nothing is shipped or submitted twice
    again = login.gpusub("--remote", "login-lab", *ssh, "--remote-token", token, "scripts/train.sh", "-N", "1",
                         "--gpus-per-node", "1", "--launcher", "srun", "--time", "5:00", "--name", "remote-dirty",
                         "--", "hello world", "3", cwd=repo)
    assert again.returncode == 0 and _job_id(again.stdout) == job, again.stdout + again.stderr
    assert "submitted before, not again" in again.stdout
    assert [j.split()[0] for j in _user_jobs(lab, "remote-dirty")] == [job]
    assert not login.marker.exists(), login.marker.read_text()


def test_a_dropped_connection_mid_submit_neither_orphans_nor_duplicates(login: Login, lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(tmp_path / "proj", login.env)
    (login.home / "slow-submit").touch()
    try:
        name = f"drop-{os.getpid()}"
        proc = login.popen("--remote", "login-lab", "--ssh-config", str(login.ssh_config), "scripts/train.sh",
                           "-N", "1", "--gpus-per-node", "1", "--launcher", "srun", "--time", "5:00", "--name", name,
                           "--follow", "--", "x", "0", cwd=repo)
        remote_dir = login.home / "gpusub-remote"
        end = time.monotonic() + 60
        while not list(remote_dir.glob(f"{name}-*/.submit")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert list(remote_dir.glob(f"{name}-*/.submit")), proc.communicate()
        killed = login.sessions()
        assert killed, "no ssh session to drop"
        for pid in killed:  # the connection drops: every sshd session process of the login node dies
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        (login.home / "slow-submit").unlink()
    assert proc.returncode == 0, out + err
    job = _job_id(out)
    login.jobs.append(job)
    assert "connection lost during the submission" in err, err
    assert [j.split() for j in _user_jobs(lab, name)] == [[job, USER]]
    # the submission was not cut short: --follow printed the job's log to its end and exited with its code (0)
    assert f"train v2 host=node1 user={USER} data=000102fe07" in out and f"job {job} COMPLETED" in err, out + err
    wait = login.gpusub("wait", "--remote", "login-lab", "--ssh-config", str(login.ssh_config), job, timeout=240)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    assert not login.marker.exists(), login.marker.read_text()


def test_remote_cancel_and_follow_and_a_plain_directory(login: Login, lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plain = tmp_path / "plain"  # no git work tree: shipped with rsync
    plain.mkdir()
    (plain / "sleep.sh").write_text(SLEEPER)
    os.chmod(plain / "sleep.sh", 0o755)
    ssh = ("--ssh-config", str(login.ssh_config))
    res = login.gpusub("--remote", "login-lab", *ssh, "sleep.sh", "-N", "1", "--gpus-per-node", "1", "--launcher",
                       "srun", "--time", "5:00", "--name", "remote-sleeper", cwd=plain)
    assert res.returncode == 0, res.stdout + res.stderr
    job = _job_id(res.stdout)
    login.jobs.append(job)
    run_root, _ = _remote_line(res.stdout)
    assert "tree rsync from" in res.stdout and (Path(run_root) / "tree" / "sleep.sh").read_text() == SLEEPER
    dry = login.gpusub("--remote", "login-lab", *ssh, "sleep.sh", "-N", "2", "--gpus-per-node", "1", "--launcher",
                       "srun", "--time", "5:00", "--dry-run", cwd=plain)
    assert dry.returncode == 0 and "# sbatch argv: sbatch " in dry.stdout, dry.stdout + dry.stderr
    assert re.search(r"/gpusub-remote/sleep-\S+/tree/sleep\.sh", dry.stdout), dry.stdout  # the shipped copy runs
    end = time.monotonic() + 60
    while "RUNNING" not in login.gpusub("status", "--remote", "login-lab", *ssh, job).stdout:
        assert time.monotonic() < end, "the sleeper never ran"
        time.sleep(0.5)
    cancel = login.gpusub("cancel", "--remote", "login-lab", *ssh, job)
    assert cancel.returncode == 0 and f"cancelled job {job}" in cancel.stdout, cancel.stdout + cancel.stderr
    follow = login.gpusub("logs", "-f", "--remote", "login-lab", *ssh, job, timeout=120)
    assert "sleeper on node" in follow.stdout and "CANCELLED" in follow.stderr, follow.stdout + follow.stderr
    assert follow.returncode != 0
    assert not login.marker.exists(), login.marker.read_text()


def test_the_api_handle_works_remotely(login: Login, lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from slurmkit.jobs.monitor import exit_status
    from slurmkit.jobs.remote import Remote, Target, submit_script

    repo = _repo(tmp_path / "proj", login.env)
    r = Remote(Target.parse("login-lab"), ssh_config=str(login.ssh_config), environ=login.env)
    opts = ["-N", "1", "--gpus-per-node", "1", "--launcher", "srun", "--time", "5:00", "--name", "remote-api"]
    job = submit_script(r, str(repo / "scripts" / "train.sh"), "from the api", "0", options=opts, cwd=str(repo))
    login.jobs.append(job.job_id)
    st = job.wait()
    assert st.state == "COMPLETED" and exit_status(st) == 0, st
    assert f"user={USER} data=000102fe07 extra=untracked-content ignored=no args=from the api" in job.logs()
    # the same token: the first call's job, not a second one
    again = submit_script(r, str(repo / "scripts" / "train.sh"), "from the api", "0", options=opts,
                          token=Path(job.run_root).name, cwd=str(repo))
    assert again.job_id == job.job_id and again.state == "COMPLETED"
    assert [j.split()[0] for j in _user_jobs(lab, "remote-api")] == [job.job_id]
    # launch.submit(remote=...): its options (JobSpec names) go as gpusub's flags; 2 nodes x 1 task
    from slurmkit import launch

    two = launch.submit(str(repo / "scripts" / "train.sh"), "via launch", "0", remote=r, nodes=2, gpus_per_node=1,
                        launcher="srun", time="5:00", name="remote-launch", env={"UNUSED": "1"})
    login.jobs.append(two.job_id)
    st = two.wait()
    assert st.state == "COMPLETED" and st.nodes == "node[1-2]", st
    hosts = sorted(re.findall(r"train v2 host=(\S+) .* args=via launch", two.logs()))
    assert hosts == ["node1", "node2"], two.logs()
    r.close()
    assert not login.marker.exists(), login.marker.read_text()


@pytest.mark.parametrize("when", ["die-after", "die-before"])
def test_a_submitter_killed_on_the_login_node_is_told_not_waited_for(login: Login, lab, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   when: str) -> None:
    repo = _repo(tmp_path / "proj", login.env)
    name = f"{when}-{os.getpid()}"
    (login.home / when).touch()
    try:
        res = login.gpusub("--remote", "login-lab", "--ssh-config", str(login.ssh_config), "scripts/train.sh", "-N",
                           "1", "--gpus-per-node", "1", "--launcher", "srun", "--time", "5:00", "--name", name, "--",
                           "x", "0", cwd=repo, timeout=90)
    finally:
        (login.home / when).unlink()
    jobs = _user_jobs(lab, name)
    if when == "die-after":  # sbatch ran and the run dir recorded the id: that job, once
        assert res.returncode == 0, res.stdout + res.stderr
        job = _job_id(res.stdout)
        login.jobs.append(job)
        assert "ended before its output was kept; its run dir recorded job" in res.stderr, res.stderr
        assert [j.split()[0] for j in jobs] == [job]
    else:
        assert res.returncode == 2 and "ended without a result" in res.stderr, res.stdout + res.stderr
        assert jobs == []
