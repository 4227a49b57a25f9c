"""Issue 32 item 3: secrets are never readable, not even for a moment.

The journalled config writer (generate/rollout.py write_files, used by `conf generate` and `conf apply`) staged each
file 0644 in a 0755 staging dir, wrote and fsynced it, then chmod'ed slurmdbd.conf to 0600, and copied the file it
replaced with shutil.copy2 (0644 until its copystat); `conf apply` kept its rollout journal -- the whole base config,
the old StoragePass in it -- 0644 in a 0755 dir for as long as the rollout was pending. An ordinary user watching
the output dir with inotify opens each file the moment it appears and keeps the fd, which a later chmod does not
revoke. Measured before the fix: the reader below read StoragePass from 19 of 20 `conf generate` runs (the issue
measured 14 of 20); `cat` as any user read the pending journal's. After: none.

Real kernel, real users, no lab: root runs the writer in this process; the attacker (``games``) runs
inotify_reader.py with Debian's python beside it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from slurmkit.cli.conf import conf
from tests.conftest import needs
from tests.security.conftest import ATTACKER, USER_PYTHON, as_user
from tests.security.userfs import user_dir

ROOT = Path(__file__).resolve().parents[2]
READER = Path(__file__).with_name("inotify_reader.py")
RUNS = 20

pytestmark = needs(os.geteuid() == 0, "plays root and an unprivileged user: needs root")  # never skipped in CI


def _inventory(work: Path) -> Path:
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["accounting"] = {"host": "dbd1", "storage": {"host": "db1", "user": "slurm"}}
    p = work / "inventory.yaml"
    p.write_text(yaml.safe_dump(inv))
    return p


def _overlay(work: Path, password: str) -> Path:
    p = work / "site.yaml"
    p.write_text(f"slurmdbd_conf: {{StoragePass: {password}}}\n")
    return p


class Reader:
    """The attacker's inotify reader on ``top``, from its "ready" line until ``stop()``."""

    def __init__(self, work: Path, top: Path, marker: str) -> None:
        script = work / "reader.py"
        shutil.copy(READER, script)
        script.chmod(0o644)
        self.flag = work / "stop"
        self.proc = subprocess.Popen(["runuser", "-u", ATTACKER, "--", USER_PYTHON, str(script), str(top),
                                      str(self.flag), marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stderr.read()  # type: ignore[union-attr]

    def stop(self) -> dict:
        self.flag.touch()
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return json.loads(out)


def _generate(inventory: Path, out: Path, overlay: Path) -> None:
    r = CliRunner().invoke(conf, ["generate", str(inventory), "-o", str(out), "--overrides", str(overlay),
                                  "--no-real-parse"])
    assert r.exit_code == 0, r.output


def _secret_bytes(seen: dict) -> dict[str, int]:
    """Bytes the reader got from any file that holds the password: slurmdbd.conf (staged, saved, backed up) and
    the rollout journal."""
    return {p: n for p, n in seen["bytes_read"].items()
            if n and (Path(p).name == "slurmdbd.conf" or Path(p).name.startswith("journal.json"))}


def test_an_inotify_reader_beside_conf_generate_reads_no_password(open_tmp: Path) -> None:
    work = open_tmp
    out = work / "out"
    out.mkdir(mode=0o755)
    inventory = _inventory(work)
    marker = "pw" + secrets.token_hex(4)
    _generate(inventory, out, _overlay(work, f"{marker}-first-x"))  # so every run below replaces (and saves) one
    reader = Reader(work, out, marker)
    for i in range(RUNS):
        _generate(inventory, out, _overlay(work, f"{marker}-{i}-x"))
    seen = reader.stop()
    # not vacuous: it saw each run's staging dir appear, and it did read what it may (slurm.conf is 0644)
    assert seen["create_events"] >= RUNS, seen
    assert seen["bytes_read"].get(str(out / "slurm.conf"), 0) > 0, seen
    assert (out / "slurmdbd.conf").read_text().count(f"{marker}-{RUNS - 1}-x") == 1  # root wrote each password
    assert seen["secret_runs"] == [], f"the reader read the password of runs {seen['secret_runs']}: {seen}"
    assert _secret_bytes(seen) == {}, seen
    backups = out / ".slurmkit-backup"
    assert (backups.stat().st_mode & 0o777) == 0o700
    assert all((b.stat().st_mode & 0o777) == 0o700 for b in backups.iterdir())
    assert all((f.stat().st_mode & 0o777) == 0o600 for f in backups.glob("*/slurmdbd.conf"))


def test_a_pending_rollout_journal_is_root_s_alone(open_tmp: Path) -> None:
    """`conf apply` of a new StoragePass writes the files and leaves steps 2-3 (restart slurmdbd, verify) pending:
    their journal, with the base config the rollout started from, stays in DIR/.slurmkit-rollout meanwhile."""
    work = open_tmp
    out = work / "out"
    out.mkdir(mode=0o755)
    inventory = _inventory(work)
    marker = "pw" + secrets.token_hex(4)
    _generate(inventory, out, _overlay(work, f"{marker}-old-x"))
    reader = Reader(work, out, marker)
    r = CliRunner().invoke(conf, ["apply", str(inventory), "--to", str(out), "--overrides",
                                  str(_overlay(work, f"{marker}-new-x")), "--no-real-parse", "--allow-disruptive"])
    seen = reader.stop()
    assert r.exit_code == 0, r.output
    journal = out / ".slurmkit-rollout" / "journal.json"
    assert f"{marker}-old-x" in journal.read_text()  # the pending journal holds the old password (root reads it)
    assert seen["create_events"] > 0, seen
    assert seen["secret_runs"] == [] and _secret_bytes(seen) == {}, seen
    peek = as_user(ATTACKER, ["cat", str(journal)], check=False)
    assert peek.returncode != 0 and marker not in peek.stdout, peek.stdout
    assert (journal.parent.stat().st_mode & 0o777) == 0o700 and (journal.stat().st_mode & 0o777) == 0o600


def test_the_umask_never_widens_a_secret_and_a_wider_one_is_narrowed(tmp_path: Path) -> None:
    from slurmkit.generate.rollout import write_files

    old = os.umask(0)
    try:
        (tmp_path / "slurmdbd.conf").write_text("StoragePass=old\n")
        (tmp_path / "slurmdbd.conf").chmod(0o644)  # a hand-made file, too wide
        write_files({"slurmdbd.conf": "StoragePass=new\n", "slurm.conf": "ClusterName=x\n"}, tmp_path)
    finally:
        os.umask(old)
    assert (tmp_path / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "slurm.conf").stat().st_mode & 0o777 == 0o644  # a plain file keeps the mode it is given
    (saved,) = (tmp_path / ".slurmkit-backup").glob("*/slurmdbd.conf")
    assert saved.read_text() == "StoragePass=old\n" and saved.stat().st_mode & 0o777 == 0o644  # never wider
    assert (tmp_path / ".slurmkit-backup").stat().st_mode & 0o777 == 0o700
    assert saved.parent.stat().st_mode & 0o777 == 0o700


def test_a_staging_dir_planted_in_a_writable_output_dir_is_refused(open_tmp: Path) -> None:
    """An output dir others can write (``-o /tmp/x``): the attacker plants DIR/.slurmkit-txn with a journal that
    "rolls back" a file outside DIR to their own copy. Before: root's next write carried it out (os.replace of the
    attacker's file over ../victim.conf). After: refused in one line naming the dir, nothing outside touched."""
    work = open_tmp
    victim = work / "victim.conf"
    victim.write_text("root's\n")
    out = user_dir(work / "out", ATTACKER, 0o1777)
    txn = out / ".slurmkit-txn"
    as_user(ATTACKER, ["mkdir", "-p", str(txn / "old")])
    as_user(ATTACKER, [USER_PYTHON, "-c", "import json, sys; d = sys.argv[1]; "
                       "open(d + '/victim.conf', 'w').write('the attacker\\'s\\n'); "
                       "json.dump({'state': 'rollback', 'replace': ['../victim.conf'], 'remove': [], "
                       "'existed': ['../victim.conf']}, open(d + '/journal.json', 'w'))", str(txn)])
    r = _slurmkit("conf", "generate", str(_inventory(work)), "-o", str(out), "--no-real-parse")
    assert victim.read_text() == "root's\n"
    assert r.returncode != 0 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert f"cannot write {txn}: a directory of uid" in last and "not left by this writer" in last, r.stderr
    assert f"no file in {out} was changed" in last, r.stderr
    assert not (out / "slurm.conf").exists()
    # a symlink planted in its place is refused the same way (and is not followed)
    shutil.rmtree(txn)
    elsewhere = user_dir(work / "elsewhere", ATTACKER)
    as_user(ATTACKER, ["ln", "-s", str(elsewhere), str(txn)])
    r = _slurmkit("conf", "generate", str(_inventory(work)), "-o", str(out), "--no-real-parse")
    assert r.returncode != 0 and "a symlink, not left by this writer" in r.stderr, r.stderr
    assert list(elsewhere.iterdir()) == [] and txn.is_symlink()


def _slurmkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})

