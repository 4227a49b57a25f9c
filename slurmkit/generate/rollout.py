"""Writing config safely, the semantic diff between two config sets, the rollout plan, and drift.

Pure except ``write_files`` (the one writer: temp file, fsync, rename, backup of what it replaces).
What each kind of change needs comes from slurm.conf(5)/gres.conf(5)/scontrol(1) (anchors §5 "Rollout"):
most keys take ``scontrol reconfigure``; ports, hosts, auth and plugin types need daemon restarts; changing
the number of GRES device records or a node's CPU/memory geometry needs the nodes drained first; SelectType
changes can lose running jobs. From 23.11 a reconfigure restarts the daemons itself (keeping the old config
if the new one fails) and from 24.11 new nodes need only a reconfigure.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat as statmod
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurmkit import hostlist, safefs
from slurmkit.errors import SlurmkitError
from slurmkit.generate import confparse as cp
from slurmkit.generate import slurmdefaults
from slurmkit.generate.sidekeys import SECRET_KEYS, has_secret
from slurmkit.generate.versions import features_for
from slurmkit.model.cluster import Cluster

RECONFIGURE, RESTART, DRAIN, PUSH = "reconfigure", "restart", "drain", "push"
_RANK = {PUSH: 0, RECONFIGURE: 1, RESTART: 2, DRAIN: 3}
BACKUP_DIR = ".slurmkit-backup"
# every file slurmkit may write into a config directory (read_dir reads these; stale ones are removed by apply)
MANAGED_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", "topology.yaml", "job_submit.lua",
                 "slurmdbd.conf", "plugstack.conf", "job_container.conf", "acct_gather.conf",
                 "slurmkit-prolog", "slurmkit-epilog", "slurmkit-health", "slurmkit-suspend", "slurmkit-resume",
                 "slurmkit-resume-fail", "slurmkit.yaml")
# Files written with a fixed mode, owned by the user their SlurmUser= line names (when written as root and that user
# exists here): slurmdbd refuses its file otherwise (src/slurmdbd/read_config.c at slurm-22-05-8-1 and
# slurm-24-11-5-1: fatal "slurmdbd.conf file %s should be 600 is %o accessible for group or others" and "slurmdbd.conf
# not owned by SlurmUser %s!=%s"; slurm-26-05-3-1 also takes 640). It holds the database password.
PRIVATE_FILES = {"slurmdbd.conf": 0o600}
# acct_gather.conf holds a password where the site gives one (acct_gather.conf(5) EnergyIPMIPassword "Password for
# BMC access", ProfileInfluxDBPass, 22.05-26.05): then it is never written readable by others (it was 644, the
# BMC password for anyone on the host). 600 owned by slurm.conf's SlurmUser: slurmctld reads it as that user, slurmd
# and slurmstepd as root. A site's own mode without the others' bits (640 root:slurm) is kept.
SECRET_FILES = ("acct_gather.conf",)


class WriteError(SlurmkitError):
    """A config directory could not be updated; says whether every file is back as it was."""

    def __init__(self, directory: Path, exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else directory
        if TXN_DIR in where.parts:  # the staged copy of NAME failed to become DIR/NAME: name the target
            where = directory / where.name
        state = pending(directory)
        after = (f"an interrupted write is pending in {directory / TXN_DIR} ({state}); the next apply finishes it"
                 if state and state != FOREIGN else f"no file in {directory} was changed")
        super().__init__(f"cannot write {where}: {exc.strerror or exc}; {after}")


# --------------------------------------------------------------------------------------------------------------
# writing: all-or-nothing across files
#
# Why a journal and not a symlink switch: slurmctld and slurmd read their files by path under /etc/slurm (or
# $SLURM_CONF's directory), and that directory also holds files slurmkit does not own (slurmdbd.conf,
# plugstack.conf, job_container.conf, site scripts), is often a package-owned directory, an NFS mount or a
# configless cache. Turning /etc/slurm into a symlink to versioned directories would move those files too and
# fight packaging and mounts; symlinking each file would change what `ls -l` and config management see. So the
# files stay plain files in place and the set changes through a journal:
#   1. stage: under DIR/.slurmkit-txn/ write every new file (new/NAME) and a copy of every file it replaces or
#      removes (old/NAME), each fsynced; nothing in DIR itself has changed yet;
#   2. commit point: journal.json (the names to replace and remove, which existed before) is written to a temp
#      name, fsynced and renamed into place;
#   3. swap: rename each new/NAME over DIR/NAME, unlink each removed name, fsync DIR;
#   4. finish: old/ becomes DIR/.slurmkit-backup/<UTC time>/ (one rename), the journal and staging dir go.
# An error in step 3 (an immutable file, EPERM, EIO) marks the journal "rollback" and puts every old file back.
# A crash (SIGKILL, power loss) is repaired by ``recover`` at the start of the next write: no journal -> the
# half-staged dir is deleted (DIR untouched); journal "commit" -> roll forward (the staged files are complete and
# were validated); journal "rollback" -> finish the rollback. Between a crash and the next run the directory can
# hold a mix; `conf diff`/`apply` say so and `apply` repairs it first.

TXN_DIR = ".slurmkit-txn"
_JOURNAL = "journal.json"


def _step(what: str) -> None:
    """Called between the steps of a write; fault-injection tests replace it to kill the process there."""


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, body: str, mode: int, uid: int | None = None) -> None:
    # created with its final mode and owner by the open (issue 32 item 3): a file chmod'ed after its write was
    # readable by anyone who opened it meanwhile -- an inotify watcher of the directory read StoragePass that way
    safefs.write_new(path, body, mode, uid=-1 if uid is None else uid)


def _copy_durable(src: Path, dst: Path) -> None:
    safefs.copy_new(src, dst)  # the old file's mode and owner from the open on (shutil.copy2 chmods after the copy)


def _backup_dir(d: Path) -> Path:
    """DIR/.slurmkit-backup/<UTC time>[.n]: n above every one of that second (pruning may have removed lower
    ones: a name used again would sort as the oldest)."""
    stem = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = d / BACKUP_DIR
    taken = [p.name.partition(".")[2] for p in root.glob(stem + "*")] if root.is_dir() else []
    if not taken:
        return root / stem
    n = max(int(x) if x.isdigit() else 0 for x in taken) + 1
    return root / f"{stem}.{n}"


FOREIGN = "not slurmkit's"


def pending(directory: str | Path) -> str | None:
    """What an interrupted write left in ``directory`` ("commit", "rollback", "staging", "cleanup"), or None;
    ``FOREIGN`` for a staging dir no writer of slurmkit's left (a symlink, a file, another user's directory)."""
    txn = Path(directory) / TXN_DIR
    try:
        st = os.lstat(txn)
    except FileNotFoundError:
        return None
    if not statmod.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return FOREIGN
    j = txn / _JOURNAL
    if not j.is_file():
        return "staging" if (txn / "new").exists() else "cleanup"
    try:
        return str(json.loads(j.read_text()).get("state", "commit"))
    except (ValueError, OSError):
        return "commit"


def recover(directory: str | Path) -> str | None:
    """Finish an interrupted write: roll forward a committed one, roll back one that was rolling back, drop a
    half-staged one. Returns what was done, in words, or None when nothing was pending."""
    d = Path(directory)
    state = pending(d)
    if state is None:
        return None
    txn = d / TXN_DIR
    _own_txn(txn)
    if state in ("staging", "cleanup"):
        shutil.rmtree(txn)
        if state == "cleanup":
            return "removed what a finished write left behind"
        return "dropped a write that was interrupted while staging (no file had changed)"
    journal = _journal_of(txn)
    if state == "rollback":
        _roll_back(d, txn, journal)
        shutil.rmtree(txn)
        return "finished rolling back an interrupted write (the previous files are in place)"
    _roll_forward(d, txn, journal)
    _finish(d, txn, journal)
    return "finished an interrupted write (the new files are in place)"


def _own_txn(txn: Path) -> None:
    """An interrupted write's staging dir is finished only when this writer's user made it: a directory or symlink
    someone else put there (a writable output dir) would steer root's renames and unlinks (its journal names the
    files, its old/ holds what a rollback puts back)."""
    st = os.lstat(txn)
    if not statmod.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        what = ("a symlink" if statmod.S_ISLNK(st.st_mode) else f"a directory of uid {st.st_uid}"
                if statmod.S_ISDIR(st.st_mode) else "not a directory")
        raise OSError(errno.EPERM, f"{what}, not left by this writer (look at it, then remove it)", str(txn))


def _journal_of(txn: Path) -> dict:
    """The staging dir's journal, each name in it a plain file name (as write_files checked them)."""
    journal = json.loads((txn / _JOURNAL).read_text())
    for key in ("replace", "remove", "existed"):
        for name in journal.get(key, []):
            if not isinstance(name, str) or "/" in name or name.startswith(".") or not name:
                raise OSError(errno.EINVAL, f"journal names {name!r}, not a file of the directory", str(txn / _JOURNAL))
    return journal


def _roll_forward(d: Path, txn: Path, journal: dict) -> None:
    for name in journal["replace"]:
        staged = txn / "new" / name
        if staged.exists():  # else: already renamed into place before the interruption
            _step(f"rename {name}")
            os.replace(staged, d / name)
    for name in journal["remove"]:
        _step(f"remove {name}")
        try:
            os.unlink(d / name)
        except FileNotFoundError:
            pass
    _fsync_dir(d)


def _roll_back(d: Path, txn: Path, journal: dict) -> None:
    existed = set(journal["existed"])
    for name in [*journal["replace"], *journal["remove"]]:
        saved = txn / "old" / name
        if name in existed:
            if not saved.exists():
                continue  # restored before an interruption
            if (d / name).is_file() and (d / name).read_bytes() == saved.read_bytes():
                saved.unlink()  # never replaced (e.g. the immutable file that stopped the swap)
            else:
                os.replace(saved, d / name)
        elif (d / name).exists() and not (txn / "new" / name).exists():
            os.unlink(d / name)  # a file this write added
    _fsync_dir(d)


def _finish(d: Path, txn: Path, journal: dict) -> Path | None:
    bdir = None
    old = txn / "old"
    if journal.get("backup") and old.is_dir() and any(old.iterdir()):
        bdir = _backup_dir(d)
        safefs.private_dir(bdir.parent)  # 0700: the saved files include the old slurmdbd.conf
        _step("backup")
        os.rename(old, bdir)
    _step("cleanup")
    shutil.rmtree(txn / "new", ignore_errors=True)
    shutil.rmtree(txn / "old", ignore_errors=True)
    (txn / _JOURNAL).unlink()
    shutil.rmtree(txn)
    _fsync_dir(d)
    return bdir


def write_files(files: Mapping[str, str], directory: str | Path, executable: Iterable[str] = (),
                backup: bool = True, remove: Iterable[str] = (), keep: int | None = None) -> Path | None:
    """Write ``files`` into ``directory`` and delete ``remove`` there, all or nothing (see the section comment).
    Replaced and removed files are kept in ``DIR/.slurmkit-backup/<UTC time>/``; returns that dir (None if
    nothing was replaced). An interrupted earlier write is finished first. ``keep``: how many backup
    directories to keep (the oldest beyond that are deleted; the inventory's rollout.keep_backups, default 20)."""
    d = Path(directory)
    for name in [*files, *remove]:
        if "/" in name or name.startswith(".") or name in ("", ".."):
            raise ValueError(f"refusing to write {name!r} outside {d}")
    try:
        d.mkdir(parents=True, exist_ok=True)
        with _locked(d):
            bdir = _write_locked(files, d, set(executable), backup, list(remove))
            if bdir is not None:
                prune_backups(d, KEEP_BACKUPS if keep is None else keep)
            return bdir
    except OSError as exc:
        raise WriteError(d, exc) from exc


def _write_locked(files: Mapping[str, str], d: Path, execs: set[str], backup: bool, remove: list[str]) -> Path | None:
    recover(d)
    replace = [n for n in files if not ((d / n).is_file() and (d / n).read_bytes() == files[n].encode()
                                        and _mode_ok(d / n, n in execs))]
    gone = [n for n in remove if n not in files and (d / n).is_file()]
    if not replace and not gone:
        return None
    existed = [n for n in [*replace, *gone] if (d / n).is_file()]
    txn = d / TXN_DIR
    try:
        os.mkdir(txn, 0o700)  # recover() removed any earlier one; a name planted meanwhile fails here (EEXIST)
        safefs.private_dir(txn)
        safefs.private_dir(txn / "new")
        safefs.private_dir(txn / "old")
        for name in replace:
            mode = 0o755 if name in execs else 0o644
            if (d / name).exists():
                mode = ((d / name).stat().st_mode & 0o777) | (0o111 if name in execs else 0)
            mode = PRIVATE_FILES.get(name, mode)
            uid = _owner(files[name]) if name in PRIVATE_FILES else None
            if _exposed_secret(name, files[name], mode):
                mode, uid = 0o600, _owner(files.get("slurm.conf", ""))
            _step(f"stage {name}")
            _write_durable(txn / "new" / name, files[name], mode, uid)
        for name in existed:
            _step(f"save {name}")
            _copy_durable(d / name, txn / "old" / name)
        _fsync_dir(txn / "new")
        _fsync_dir(txn / "old")
        journal = {"state": "commit", "replace": replace, "remove": gone, "existed": existed, "backup": backup}
        _write_durable(txn / (_JOURNAL + ".tmp"), json.dumps(journal), 0o600)
        _step("commit")
        os.replace(txn / (_JOURNAL + ".tmp"), txn / _JOURNAL)
        _fsync_dir(txn)
    except BaseException:
        shutil.rmtree(txn, ignore_errors=True)  # nothing in DIR has changed
        raise
    try:
        _roll_forward(d, txn, journal)
    except OSError:
        journal["state"] = "rollback"
        _write_durable(txn / (_JOURNAL + ".tmp"), json.dumps(journal), 0o600)
        os.replace(txn / (_JOURNAL + ".tmp"), txn / _JOURNAL)
        _roll_back(d, txn, journal)
        shutil.rmtree(txn)
        raise
    return _finish(d, txn, journal)


KEEP_BACKUPS = 20


def prune_backups(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` backup directories (names sort by time: %Y%m%dT%H%M%SZ[.n])."""

    def key(p: Path) -> tuple[str, int]:
        stem, _, n = p.name.partition(".")
        return stem, int(n) if n.isdigit() else 0

    root = directory / BACKUP_DIR
    if not root.is_dir():
        return []
    dirs = sorted((p for p in root.iterdir() if p.is_dir()), key=key)
    gone = dirs[:max(0, len(dirs) - max(1, keep))]
    for p in gone:
        shutil.rmtree(p)
    return gone


def _exposed_secret(name: str, body: str, mode: int) -> bool:
    """A SECRET_FILES file holding a password, at a mode others may read."""
    return name in SECRET_FILES and bool(mode & 0o007) and has_secret(body)


def _mode_ok(path: Path, executable: bool) -> bool:
    st = path.stat()
    if _exposed_secret(path.name, path.read_text(errors="replace"), st.st_mode & 0o777):
        return False
    if path.name in PRIVATE_FILES:
        return (st.st_mode & 0o777) == PRIVATE_FILES[path.name] and _owner(path.read_text(errors="replace")) in (None, st.st_uid)
    return not executable or bool(st.st_mode & 0o111)


def _owner(body: str) -> int | None:
    """The uid a PRIVATE_FILES file must belong to: its SlurmUser's, when this process can give files away (root)
    and that user exists here; None otherwise (the file stays the writer's: `conf generate` output, a test)."""
    import pwd

    if os.geteuid() != 0:
        return None
    user = cp.parse_settings(body, "slurmdbd.conf").get("slurmuser", ("", "slurm"))[1]
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


class _locked:
    """One writer per directory at a time (flock on the directory itself)."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.fd = -1

    def __enter__(self) -> None:
        import fcntl

        self.fd = os.open(self.d, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing drops the lock


def stale_files(directory: str | Path, files: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Files slurmkit writes that are in ``directory`` but not in the new set ``files``: (those slurmkit wrote,
    to remove; those it did not write, left alone). 25.05+ loads topology.yaml whenever it exists, so a
    topology removed from the inventory must take the file with it."""
    d = Path(directory)
    ours, foreign = [], []
    for name in MANAGED_FILES:
        p = d / name
        if name in files or not p.is_file() or name in SIDE_FILES:
            # a side file the inventory no longer asks for stays: no daemon reads it unasked (slurm.conf names the
            # plugin), and removing slurmdbd.conf would take the running slurmdbd's next start with it
            continue
        text = p.read_text(errors="replace")
        if name.startswith("slurmkit-") or "generated by slurmkit" in "\n".join(text.splitlines()[:3]):
            ours.append(name)
        else:
            foreign.append(name)
    return ours, foreign


def keep_line_ends(files: Mapping[str, str], directory: str | Path) -> dict[str, str]:
    """``files`` with CRLF line ends where the file they replace in ``directory`` has them on every line: read_dir
    reads text (CRLF as LF), and writing LF back would change every line of a site's CRLF file for a one-line
    edit. Slurm reads either (src/common/parse_config.c _strip_cr_nl at slurm-22-05-8-1, slurm-24-11-5-1,
    slurm-26-05-3-1 strips a line's trailing CR and LF)."""
    d = Path(directory)
    out = dict(files)
    for name, text in files.items():
        p = d / name
        if "/" in name or not p.is_file() or p.is_symlink():
            continue
        raw = p.read_bytes()
        if b"\r\n" in raw and raw.count(b"\n") == raw.count(b"\r\n"):
            out[name] = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return out


def read_dir(directory: str | Path, names: Iterable[str] | None = None) -> dict[str, str]:
    """The Slurm config files (and slurmkit's hook wrappers) present in ``directory``."""
    d = Path(directory)
    wanted = names or MANAGED_FILES
    return {n: (d / n).read_text() for n in wanted if (d / n).is_file()}


# --------------------------------------------------------------------------------------------------------------
# semantic diff


@dataclass(frozen=True)
class Change:
    file: str
    subject: str  # "SelectType", "NodeName=gpu[001-004]", "PartitionName=train" ...
    old: str
    new: str
    action: str  # push | reconfigure | restart | drain
    reason: str
    nodes: str = ""  # hostlist of nodes to drain/restart, when the change is node-local
    scope: str = ""  # which daemons (Rule.scope); "" = as the action implies

    def line(self) -> str:
        what = f"{self.old or '(absent)'} -> {self.new or '(absent)'}"
        return f"[{self.action}] {self.file}: {self.subject}: {what}  ({self.reason})"


# slurm.conf keys and node changes -> what a change needs, one table per release. Each entry carries the sentence
# of that release's slurm.conf(5) (tag slurm-YY-MM-*-1, doc/man/man5/slurm.conf.5), faq.shtml or source that
# decides it. Keys not in a table take the release's default entry ("*").
#   scope: which daemons: "slurmctld", "slurmd", "all"; "stop-all" is the FAQ's procedure (stop slurmctld, write
#   every node's files, restart every slurmd, start slurmctld); "jobs" means running jobs are affected too;
#   "reconfigure" (with DRAIN) means drain first, then `scontrol reconfigure` is enough.


@dataclass(frozen=True)
class Rule:
    action: str  # reconfigure | restart | drain
    scope: str
    doc: str  # the sentence beside the entry, with where it is


_DEFAULT_OLD = ('slurm.conf(5): "Changes to the configuration file take effect upon restart of Slurm daemons, daemon '
                'receipt of the SIGHUP signal, or execution of the command "scontrol reconfigure" unless otherwise noted."')
_CTLD_22 = 'slurm.conf(5) 22.05: "A restart of slurmctld is required for changes to this parameter to take effect."'
_BOTH_22 = ('slurm.conf(5) 22.05: "A restart of slurmctld and the slurmd daemons is required for changes to this '
            'parameter to take effect."')
_NODE_ADD_OLD = ('faq.shtml (24.11) #add_nodes: "The following procedure is recommended on Slurm 24.05 and older: Stop '
                 'the slurmctld daemon; Update the slurm.conf file on all nodes in the cluster; Restart the slurmd '
                 'daemons on all nodes; Restart the slurmctld daemon"')
_NODE_DEL_OLD = ('faq.shtml (24.11) #rem_nodes: "recommended on Slurm 24.05 and older: Drain node of all jobs; Stop the '
                 'slurmctld daemon; Update the slurm.conf file on all nodes in the cluster; Restart the slurmd daemons '
                 'on all nodes; Restart the slurmctld daemon" (24.05\'s FAQ said 23.11; 24.11 corrected it)')
_SELECT = ('slurm.conf(5) SelectType: "When changed, all job information (running and pending) will be lost, since the '
           'job state save format used by each plugin is different."')
_SWITCH_OLD = ('slurm.conf(5) 22.05: "All Slurm daemons, commands and running jobs must be restarted for a change in '
               'SwitchType to take effect."')
_AUTH = ('slurm.conf(5): "All Slurm daemons and commands must be terminated prior to changing the value of AuthType '
         'and later restarted."')
# StateSaveLocation holds every job's record: slurmctld recovers its state from the directory slurm.conf names when it
# starts (22.05: a restart; 23.11+ a reconfigure is a new slurmctld process, which reads the new, empty directory and
# starts with no jobs: slurm-24-11-5-1 src/slurmctld/controller.c uses slurm_conf.state_save_location as read, no
# reconfigure check keeps the old one). slurm.conf(5) RELOCATING CONTROLLERS (22.05, 24.11, 26.05): "1. Stop the
# Slurm daemons ... 3. Copy the files from the StateSaveLocation to the new controller ... There should be no loss of
# any pending jobs." Scope "state": plan_steps stops slurmctld, writes, copies, starts (a manual step: --execute
# refuses the plan, it cannot copy between hosts).
_STATE = ('slurm.conf(5) RELOCATING CONTROLLERS: "Stop the Slurm daemons ... Copy the files from the StateSaveLocation '
          'to the new controller"; slurmctld recovers jobs only from the directory it starts with')

RULES_22_05: dict[str, Rule] = {
    "*": Rule(RECONFIGURE, "all", _DEFAULT_OLD),
    "AccountingStorageEnforce": Rule(RESTART, "slurmctld", _CTLD_22),
    "AuthType": Rule(RESTART, "all", _AUTH),
    "CoreSpecPlugin": Rule(RESTART, "slurmd", 'slurm.conf(5) 22.05: "A restart of the slurmd daemons is required for changes to this parameter to take effect."'),
    "CredType": Rule(RESTART, "slurmctld", _CTLD_22),
    "GresTypes": Rule(RESTART, "all", 'slurm.conf(5) 22.05: "A restart of slurmctld and the slurmd daemons is required for this to take effect."'),
    "JobContainerType": Rule(RESTART, "slurmctld", _CTLD_22),
    "MaxJobCount": Rule(RESTART, "slurmctld", _CTLD_22),
    "MaxNodeCount": Rule(RESTART, "slurmctld", 'slurm.conf(5) 22.05: "The slurmctld daemon must be restarted for changes to this parameter to take effect."'),
    "PluginDir": Rule(RESTART, "all", _BOTH_22),
    "PowerPlugin": Rule(RESTART, "slurmctld", _CTLD_22),
    # slurm.conf(5) names only slurmctld, but slurmd loads the plugin once: src/slurmd/slurmd/slurmd.c _slurmd_init
    # calls slurm_proctrack_init() and _reconfigure() does not, so a slurmd left running tracks with the old plugin
    "ProctrackType": Rule(RESTART, "all", _CTLD_22 + "; slurmd.c (22.05) loads proctrack only at start (_slurmd_init)"),
    # not in slurm.conf(5), but slurmd loads its task plugin once: slurm-22-05-8-1 src/slurmd/slurmd/slurmd.c calls
    # slurmd_task_init() in _slurmd_init() only, never in _reconfigure(), so a reconfigured slurmd keeps the old one
    "TaskPlugin": Rule(RESTART, "all", "slurmd.c (22.05) loads the task plugin only at start (_slurmd_init; "
                                       "_reconfigure does not); slurmctld restarted with them as for ProctrackType"),
    "SchedulerType": Rule(RESTART, "slurmctld", _CTLD_22 + "; read_config.c keeps the old SchedulerType on reconfigure (ESLURM_INVALID_SCHEDTYPE_CHANGE)"),
    "SelectType": Rule(DRAIN, "jobs", 'slurm.conf(5) 22.05: "A restart of slurmctld and slurmd is required for changes to this parameter to take effect. When changed, all job information (running and pending) will be lost"'),
    "SelectTypeParameters": Rule(DRAIN, "jobs", _CTLD_22 + "; read_config.c _preserve_select_type_param: SelectTypeParameters cannot change on reconfigure"),
    "SlurmctldHost": Rule(RESTART, "slurmctld", _CTLD_22),
    "SlurmctldParameters": Rule(RESTART, "slurmctld", _CTLD_22),
    # slurmd and slurmstepd send to slurmctld on the SlurmctldPort of the config they loaded (slurm-22-05-8-1 and
    # slurm-24-11-5-1 src/common/slurm_protocol_api.c: the controller address is built from conf->slurmctld_port):
    # on the 22.05 lab, with slurmctld alone restarted on a new port, every slurmd logged "Unable to register:
    # Unable to contact slurm controller (connect failure)" and "Error sending prolog completion notification"
    "SlurmctldPort": Rule(RESTART, "all", _CTLD_22 + "; slurmd sends to it (slurm_protocol_api.c): restart slurmd too"),
    "SlurmdPort": Rule(RESTART, "all", _CTLD_22 + " (slurmd listens on it: restart slurmd too)"),
    "StateSaveLocation": Rule(RESTART, "state", _STATE),
    "SwitchType": Rule(DRAIN, "jobs", _SWITCH_OLD),
    "ClusterName": Rule(RESTART, "all", "slurmctld compares ClusterName with StateSaveLocation/clustername at start (controller.c _verify_clustername); a new name needs a fresh state or the old one back"),
    # not in slurm.conf(5), but the plugin is loaded once: its init returns at once when a context exists
    # (22.05 src/common/slurm_topology.c slurm_topo_init "if (g_context) goto done"), and controller.c main
    # calls priority_g_init / slurm_acct_storage_init / jobacct_gather_init / mpi_g_daemon_init at start only
    **{k: Rule(RESTART, "all", "22.05 source: the plugin is loaded once at daemon start; a reconfigure keeps the old one")
       for k in ("TopologyPlugin", "PriorityType", "AccountingStorageType", "JobAcctGatherType", "MpiDefault")},
    "node+": Rule(RESTART, "stop-all", _NODE_ADD_OLD),
    "node-": Rule(DRAIN, "stop-all", _NODE_DEL_OLD),
    "node~": Rule(DRAIN, "all", 'slurm.conf(5) NODE CONFIGURATION: "Changes in node configuration (e.g. adding nodes, changing their processor count, etc.) require restarting both the slurmctld daemon and the slurmd daemons."'),
}
# 23.02's slurm.conf(5) and FAQ carry the same sentences for every entry above.
RULES_23_02 = RULES_22_05

# 23.11: scontrol(1) reconfigure "operates by creating new processes for the daemons ... This will not be able to
# change the daemons' listening TCP port settings or authentication mechanism", and slurm.conf(5) dropped the
# per-key "A restart of slurmctld is required" sentences.
_DEFAULT_NEW = (_DEFAULT_OLD[:-1] + ' Changes to TCP listening settings will require a daemon restart." (23.11+); '
                'scontrol(1): "Starting in 23.11, this command operates by creating new processes for the daemons"')
_TCP = 'slurm.conf(5) 23.11+: "Changes to TCP listening settings will require a daemon restart."'
RULES_23_11: dict[str, Rule] = {
    "*": Rule(RECONFIGURE, "all", _DEFAULT_NEW),
    # slurm.conf(5) slurm-23-11-11-1 and slurm-24-11-5-1 add to AuthType (not in 22.05/23.02): running steps break
    "AuthType": Rule(DRAIN, "jobs", _AUTH + ' 23.11+: "Changes to this value will interrupt outstanding job steps and '
                                           'prevent them from completing."'),
    "SelectType": Rule(DRAIN, "jobs", _SELECT),
    "SwitchType": Rule(DRAIN, "jobs", 'slurm.conf(5) 23.11+: "All Slurm daemons, commands and running jobs must be restarted or reconfigured for a change in SwitchType to take effect. If running jobs exist at the time slurmctld is restarted with a new value of SwitchType, records of all jobs in any state may be lost."'),
    "SlurmctldPort": Rule(RESTART, "all", _TCP + "; slurmd sends to it (slurm_protocol_api.c): restart slurmd too"),
    "SlurmdPort": Rule(RESTART, "all", _TCP),
    "ClusterName": RULES_22_05["ClusterName"],
    "StateSaveLocation": RULES_22_05["StateSaveLocation"],
    "node+": Rule(RESTART, "stop-all", _NODE_ADD_OLD),
    "node-": Rule(DRAIN, "stop-all", _NODE_DEL_OLD),
    "node~": Rule(DRAIN, "reconfigure", RULES_22_05["node~"].doc + " (23.11+: a reconfigure restarts them)"),
}
# 24.05's slurm.conf(5) has the same sentences as 23.11's; its FAQ's "23.11 and newer" node removal by reconfigure
# was corrected to 24.11 in the 24.11 FAQ, which is what RULES_23_11 follows.
RULES_24_05 = RULES_23_11

_NODE_ADD_NEW = ('faq.shtml (24.11) #add_nodes: "The following procedure is sufficient on Slurm 24.11 and newer: Update '
                 'the slurm.conf file on all nodes in the cluster; Run scontrol reconfigure"')
_NODE_DEL_NEW = ('faq.shtml (24.11) #rem_nodes: "sufficient on Slurm 24.11 and newer: Drain node of all jobs; Update the '
                 'slurm.conf file on all nodes in the cluster; Run scontrol reconfigure"')
RULES_24_11: dict[str, Rule] = {
    **RULES_23_11,
    "node+": Rule(RECONFIGURE, "all", _NODE_ADD_NEW),
    "node-": Rule(DRAIN, "reconfigure", _NODE_DEL_NEW),
    "node~": Rule(DRAIN, "reconfigure", 'slurm.conf(5) 24.11+ NODE CONFIGURATION: "Changes in node configuration (e.g. adding nodes, changing their processor count, etc.) require restarting or reconfiguring all slurmctld and slurmd daemons."'),
}
# 25.05 and 25.11: slurm.conf(5) and the FAQ keep 24.11's sentences for every entry.
RULES_25_05 = RULES_24_11
RULES_25_11 = RULES_24_11
# 26.05: slurm.conf(5) at slurm-26-05-3-1 keeps the same sentences ("Changes to TCP listening settings will require a
# daemon restart."; NODE CONFIGURATION "require restarting or reconfiguring all slurmctld and slurmd daemons"), and
# NamespaceType (25.11+, replacing JobContainerType) has no restart sentence: the default rule applies to it.
RULES_26_05 = RULES_24_11

RULES: dict[str, dict[str, Rule]] = {
    "22.05": RULES_22_05, "23.02": RULES_23_02, "23.11": RULES_23_11, "24.05": RULES_24_05,
    "24.11": RULES_24_11, "25.05": RULES_25_05, "25.11": RULES_25_11, "26.05": RULES_26_05,
}


def rules_for(version: str) -> dict[str, Rule]:
    """The table of ``version``'s release (a newer release than the tables gets the newest)."""
    from slurmkit.generate.versions import version_key

    known = sorted(RULES, key=version_key)
    best = known[0]
    for v in known:
        if version_key(v) <= version_key(version):
            best = v
    return RULES[best]


def rule(version: str, key: str) -> Rule:
    table = rules_for(version)
    for k, r in table.items():
        if k.lower() == key.lower():
            return r
    return table["*"]


_GEOMETRY = ("cpus", "sockets", "corespersocket", "threadspercore", "boards", "socketsperboard", "realmemory", "procs")
# the pre-SlurmctldHost spelling; parse_slurm_conf reads them into ``controllers`` when SlurmctldHost is absent
# (read_config.c _validate_and_set_defaults, 22.05-25.11)
_OLD_CONTROLLER_KEYS = frozenset({"slurmctldhost", "controlmachine", "backupcontroller", "controladdr", "backupaddr"})


def _controllers(conf: cp.SlurmConf) -> list[str]:
    """The controllers as SlurmctldHost lines spell them, ``host(addr)``. Old style: read_config.c
    _validate_and_set_defaults (22.05, 24.11) takes control_machine[0] from ControlMachine with control_addr[0] from
    ControlAddr, and [1] from BackupController/BackupAddr -- what SlurmctldHost=host(addr) sets (slurm.conf(5))."""
    if "slurmctldhost" in conf.settings or not conf.value("ControlMachine"):
        return conf.controllers
    out = []
    for host_key, addr_key in (("ControlMachine", "ControlAddr"), ("BackupController", "BackupAddr")):
        host, addr = conf.value(host_key), conf.value(addr_key)
        if host:
            out.append(f"{host}({addr})" if addr else host)
    return out


def _geometry(d: Mapping[str, str]) -> object:
    """The node's geometry as slurmctld computes it (confparse.node_geometry); the raw text where it is no number."""
    try:
        return cp.node_geometry(d)
    except ValueError:
        return tuple(sorted((k, v) for k, v in d.items() if k in _GEOMETRY))
_SLURMD_LOCAL = ("memspeclimit", "corespeccount", "cpuspeclist", "nodeaddr", "port", "nodehostname")


# Comma lists whose order Slurm does not read (each item is looked up on its own: xstrcasestr over the value in
# read_config.c and the plugins, 22.05 and 24.11); compared as sets of lower-case items. JobSubmitPlugins is not
# among them (the plugins run in the order given).
ORDER_FREE = frozenset({
    "taskplugin", "prologflags", "schedulerparameters", "slurmctldparameters", "slurmdparameters", "debugflags",
    "launchparameters", "communicationparameters", "priorityflags", "accountingstoragetres", "preemptparameters",
    "accountingstorageenforce", "privatedata", "propagateresourcelimitsexcept", "propagateresourcelimits", "grestypes",
    "healthchecknodestate", "selecttypeparameters", "taskpluginparam", "preemptmode", "authalttypes",
})


# Plugin lists whose loader takes a name with or without its type prefix: "if (xstrncmp(type, "task/", 5) == 0)
# type += 5; /* backward compatibility */" (22.05 src/slurmd/common/task_plugin.c:132, 24.11 src/interfaces/task.c:119),
# the same for "job_submit/" (22.05 src/slurmctld/job_submit.c:111, 24.11 src/interfaces/job_submit.c:109):
# TaskPlugin=affinity,cgroup is TaskPlugin=task/affinity,task/cgroup
_PLUGIN_PREFIX = {"taskplugin": "task/", "jobsubmitplugins": "job_submit/"}


def _setting(key: str, value: str, version: str) -> object:
    """A global value as the release reads it: unset = its default (slurmdefaults), order-free lists as sets."""
    v = value if value != "" else (slurmdefaults.default(key, version) or "")
    if key in _PLUGIN_PREFIX:
        v = ",".join(x.strip().removeprefix(_PLUGIN_PREFIX[key]) for x in v.split(",") if x.strip())
    if key in ORDER_FREE:
        return frozenset(x.strip().lower() for x in v.split(",") if x.strip())
    if key == "clustername":
        return v.lower()  # read_config.c _validate_and_set_defaults lower-cases it (22.05, 24.11)
    if key == "statesavelocation":
        # slurmctld joins it and a file name as "%s/job_state" (src/slurmctld/job_mgr.c, slurm-22-05-8-1,
        # slurm-24-11-5-1, slurm-26-05-3-1): a trailing, doubled or "." component is the same directory, never a move
        # (a move is the by-hand copy-state plan, which --execute refuses)
        return re.sub(r"/+", "/", "/".join(p for p in v.split("/") if p != ".")).rstrip("/") or v
    return slurmdefaults.SYNONYMS.get(v.upper(), v)


def _node_table(conf: cp.SlurmConf) -> dict[str, dict[str, str]]:
    """host -> its NodeName keys as slurmctld reads them: Features is Feature (read_config.c reads both), a key
    at its documented default is the same as absent (slurmdefaults.NODE_DEFAULTS)."""
    out: dict[str, dict[str, str]] = {}
    for rec in conf.nodes:
        d = rec.as_dict()
        if "features" in d:
            d["feature"] = d.pop("features")
        for k, dv in slurmdefaults.NODE_DEFAULTS.items():
            if d.get(k, dv) == dv:
                d.pop(k, None)
        # State= is mostly the initial state (UNKNOWN, DOWN, DRAIN, ...: slurmctld then keeps the saved one), but CLOUD
        # and FUTURE say what the node is: "Indicates the node exists in the cloud. Its initial state will be treated
        # as powered down" / "defined for future use and need not exist when the Slurm daemons are started"
        # (slurm.conf(5) NODE CONFIGURATION State, 22.05 and 24.11): those are part of the node's definition
        state = d.pop("state", "").upper()
        if state in ("CLOUD", "FUTURE"):
            d["state"] = state
        for h in hostlist.expand(rec.head):
            out[h] = d
    return out


def _gres_table(text: str, nodes: Iterable[str], files: Mapping[str, str] | None = None,
                release: str | None = None) -> dict[str, tuple[tuple[str, ...], ...]]:
    """node -> its gres.conf records, each as a sorted tuple of ``key=value`` (without NodeName); gres.conf's
    ``Include`` lines followed in ``files`` as slurmd reads them (gres.c parses gres.conf with s_p_parse_file(),
    which follows Include: a ParallelCluster head node's gres.conf holds only Include lines)."""
    all_nodes = list(nodes)
    out: dict[str, list[tuple[str, ...]]] = {}
    cache: dict[str, list[str]] = {}
    for rec in cp.expand_includes(text, "gres.conf", files or {}, [], line_keys=cp.GRES_LINE_KEYS, release=release):
        d = {k.lower(): v for k, v in rec.pairs}
        if "name" not in d:
            continue
        spec = d.pop("nodename", None)
        if spec is None:
            members = all_nodes
        else:
            if spec not in cache:
                cache[spec] = hostlist.expand(spec)
            members = cache[spec]
        item = tuple(f"{k}={v}" for k, v in sorted(d.items()))
        for h in members:
            out.setdefault(h, []).append(item)
    return {h: _per_device(v) for h, v in out.items()}


def _stanza(rec: cp.Record) -> dict[str, str]:
    """A PartitionName/NodeSet line as Slurm reads it: keys in any order and case, YES/NO in any case, a key at its
    documented default (slurmdefaults.PARTITION_DEFAULTS) the same as absent."""
    raw = {k.lower(): v for k, v in rec.pairs[1:]}
    if rec.kind == "partitionname":
        # OverSubscribe=EXCLUSIVE and 26.05's Exclusive=NODE (and the other spellings) are the same partition
        raw = slurmdefaults.partition_exclusivity(raw)
    out: dict[str, str] = {}
    for lk, v in raw.items():
        val = v.upper() if v.upper() in ("YES", "NO", "UNLIMITED", "INFINITE", "ALL", "UP") else v
        val = slurmdefaults.SYNONYMS.get(val, val)
        if rec.kind == "partitionname" and slurmdefaults.PARTITION_DEFAULTS.get(lk) == val:
            continue
        out[lk] = val
    return out


def _per_device(records: list[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """gres.conf records with File= ranges split into one record per device (gres.conf(5): "File=/dev/nvidia[0-3]"
    is four devices, the same as four lines), Count= of a split record dropped (it is the device count), sorted."""
    out: list[tuple[str, ...]] = []
    for r in records:
        d = dict(x.split("=", 1) for x in r)
        if "file" not in d:
            out.append(r)
            continue
        try:
            devs = cp.expand_files(d["file"])
        except ValueError:
            out.append(r)
            continue
        if d.get("count") not in (None, str(len(devs))):
            out.append(r)
            continue
        d.pop("count", None)
        for dev in devs:
            out.append(tuple(sorted(f"{k}={dev if k == 'file' else v}" for k, v in d.items())))
    return tuple(sorted(out))


def _devices(records: tuple[tuple[str, ...], ...]) -> int:
    n = 0
    for r in records:
        d = dict(x.split("=", 1) for x in r)
        if "multiplefiles" in d:
            n += 1
        elif "file" in d:
            n += len(cp.expand_files(d["file"]))
    return n


def semantic_diff(old: Mapping[str, str], new: Mapping[str, str], version: str | None = None) -> list[Change]:
    """Every difference between two config sets that matters to Slurm, each with what it needs."""
    ver = version or cp.header_version(new.get("slurm.conf", "")) or cp.header_version(old.get("slurm.conf", "")) or "22.05"
    feats = features_for(ver)
    changes: list[Change] = []
    # Include lines are followed on both sides (``old``/``new`` hold the included files by the name Slurm resolves)
    oc = cp.parse_slurm_conf(old.get("slurm.conf", ""), "slurm.conf", old, release=ver)
    nc = cp.parse_slurm_conf(new.get("slurm.conf", ""), "slurm.conf", new, release=ver)

    # The running files fail Slurm's own parse (an Include of a file that is gone, a glob): slurmctld and slurmd
    # are fatal on them at their next start or reconfigure (slurm-24-11-5-1 src/common/parse_config.c
    # s_p_parse_file: '"Include" failed in file', an error read_config.c _init_slurm_conf returns), so
    # the daemons cannot be running what DIR holds. That is never "nothing to do": the new files fix it, and only a
    # restart of slurmctld makes sure it reads them (what it loaded before the file broke is unknown from here).
    for problem in [p for p in oc.problems if p not in nc.problems]:
        where, _sep, what = problem.partition(": ")  # "slurm.conf:5: Include x.conf: file not found (...)"
        line = where.rsplit(":", 1)[-1]
        head, _sep, said = what.partition(": ") if what.startswith("Include ") else (f"line {line}", "", what)
        changes.append(Change(where.rsplit(":", 1)[0] if where.count(":") else "slurm.conf", head,
                              " ".join(said.split()), "", "restart",
                              "the files in DIR fail Slurm's parse (fatal at the next read: parse_config.c "
                              "s_p_parse_file); the daemons run files from before they broke", "", "slurmctld"))
    renamed = _namespace_rename(oc, nc, feats)
    if renamed is not None:
        changes.append(renamed)
    for key in sorted(set(oc.settings) | set(nc.settings)):
        if key in _OLD_CONTROLLER_KEYS and key not in ("slurmctldhost",):
            continue  # ControlMachine/BackupController are the controllers (compared as SlurmctldHost below)
        if renamed is not None and key in ("jobcontainertype", "namespacetype"):
            continue
        a = oc.value(key) if key != "slurmctldhost" else ",".join(_controllers(oc))
        b = nc.value(key) if key != "slurmctldhost" else ",".join(_controllers(nc))
        if a == b or (key != "slurmctldhost" and _setting(key, a, ver) == _setting(key, b, ver)):
            continue
        name = (nc.settings.get(key) or oc.settings[key])[0]
        r = rule(ver, name)
        nodes = "ALL" if r.scope == "jobs" else ""
        if r.scope == "state" and not a and oc.problems:
            # the running files fail Slurm's parse (above): StateSaveLocation may sit in the file that is gone, read
            # by slurmctld before it went -- the directory it runs with is not the default, it is unknown here
            a = UNKNOWN_STATE
        changes.append(Change("slurm.conf", name, a, b, r.action, r.doc, nodes, r.scope))

    on, nn = _node_table(oc), _node_table(nc)
    added = [h for h in nn if h not in on]
    removed = [h for h in on if h not in nn]
    if added:
        r = rule(ver, "node+")
        changes.append(Change("slurm.conf", "NodeName", "", hostlist.fold(added), r.action, r.doc, "", r.scope))
    if removed:
        r = rule(ver, "node-")
        changes.append(Change("slurm.conf", "NodeName", hostlist.fold(removed), "", r.action, r.doc,
                              hostlist.fold(removed), r.scope))
    # node changes take the release's "node~" scope (22.05: restart both daemons; 23.11+: drain, then a reconfigure
    # is enough): before, a geometry Change had no scope and a 24.11 RealMemory change was planned as restarts
    node_scope = rule(ver, "node~").scope
    grouped: dict[tuple[str, str, str, str, str, str], list[str]] = {}
    for h in nn:
        if h not in on:
            continue
        na, nb = on[h], nn[h]
        same_geometry = _geometry(na) == _geometry(nb)
        if not same_geometry:
            # what slurmctld makes of the node differs: name the fields that do (not every key spelled differently)
            ga_, gb_ = _geometry(na), _geometry(nb)
            if isinstance(ga_, cp.Geometry) and isinstance(gb_, cp.Geometry):
                fields = [f for f in ("cpus", "boards", "sockets", "cores_per_socket", "threads_per_core", "real_memory")
                          if getattr(ga_, f) != getattr(gb_, f)]
                ta = " ".join(f"{f}={getattr(ga_, f)}" for f in fields)
                tb = " ".join(f"{f}={getattr(gb_, f)}" for f in fields)
                grouped.setdefault(("geometry", ta, tb, DRAIN, rule(ver, "node~").doc, node_scope), []).append(h)
                same_geometry = True  # reported above as one change
        for k in sorted(set(na) | set(nb)):
            if na.get(k, "") == nb.get(k, ""):
                continue
            if k in _GEOMETRY and same_geometry:
                continue  # Boards x SocketsPerBoard = Sockets, implied CPUs, Procs=: what slurmctld makes is equal
            scope = ""
            if k in _GEOMETRY:
                act, why, scope = DRAIN, rule(ver, "node~").doc, node_scope
            elif k == "gres":
                oc_, nc_ = cp.gres_totals(cp.parse_gres(na.get(k, ""))), cp.gres_totals(cp.parse_gres(nb.get(k, "")))
                if oc_ != nc_:
                    act, why, scope = DRAIN, "GRES counts change: drain the nodes first; " + rule(ver, "node~").doc, node_scope
                else:
                    act, why = _gres_type_change(feats)
            elif k == "state":
                # a node becomes or stops being a CLOUD/FUTURE node: a change of the node's definition
                act, why, scope = rule(ver, "node~").action, rule(ver, "node~").doc, node_scope
            elif k in _SLURMD_LOCAL:
                act, why = _slurmd_restart(feats)
            else:
                act, why = RECONFIGURE, "scontrol reconfigure re-reads node attributes"
            grouped.setdefault((k, na.get(k, ""), nb.get(k, ""), act, why, scope), []).append(h)
    for (k, a_, b_, act, why, scope), hs in grouped.items():
        fold = hostlist.fold(hs)
        changes.append(Change("slurm.conf", f"NodeName={fold} {k}", a_, b_, act, why,
                              fold if act in (DRAIN, RESTART) else "", scope))

    for kind, orecs, nrecs in (("PartitionName", oc.partitions, nc.partitions), ("NodeSet", oc.nodesets, nc.nodesets)):
        od = {r.head: " ".join(f"{k}={v}" for k, v in r.pairs[1:]) for r in orecs}
        nd = {r.head: " ".join(f"{k}={v}" for k, v in r.pairs[1:]) for r in nrecs}
        on_ = {r.head: _stanza(r) for r in orecs}
        nn_ = {r.head: _stanza(r) for r in nrecs}
        for name in sorted(set(od) | set(nd)):
            if on_.get(name) != nn_.get(name):
                changes.append(Change("slurm.conf", f"{kind}={name}", od.get(name, ""), nd.get(name, ""), RECONFIGURE,
                                      "partitions and node sets change on reconfigure"))

    common = [h for h in nn if h in on]
    og, ng = _gres_table(old.get("gres.conf", ""), on, old, ver), _gres_table(new.get("gres.conf", ""), nn, new, ver)
    ggroup: dict[tuple[str, str, str, str, str], list[str]] = {}
    for h in common:
        ga, gb = og.get(h, ()), ng.get(h, ())
        if ga == gb:
            continue
        scope = ""
        if _devices(ga) != _devices(gb):
            act, why, scope = DRAIN, "number of GRES device files changes: drain first; " + rule(ver, "node~").doc, node_scope
            a_s, b_s = _summ(ga), _summ(gb)
        elif [_strip(r, "cores") for r in ga] != [_strip(r, "cores") for r in gb]:
            act, why = _slurmd_restart(feats)
            a_s, b_s = _gres_delta(ga, gb)
        else:
            act, why = RESTART, "Cores= changes need slurmctld and slurmd restarts"
            a_s, b_s = _gres_delta(ga, gb, "Cores=")
        ggroup.setdefault((a_s, b_s, act, why, scope), []).append(h)
    for (a_, b_, act, why, scope), hs in ggroup.items():
        fold = hostlist.fold(hs)
        changes.append(Change("gres.conf", f"NodeName={fold}", a_, b_, act, why, fold, scope))

    # cgroup.conf's Include lines followed as for gres.conf (a ParallelCluster cgroup.conf includes its own file)
    oo = cp.parse_settings(old.get("cgroup.conf", ""), "cgroup.conf", old, release=ver)
    no = cp.parse_settings(new.get("cgroup.conf", ""), "cgroup.conf", new, release=ver)
    for k in sorted(set(oo) | set(no)):
        a = oo[k][1] if k in oo else ""
        b = no[k][1] if k in no else ""
        if a != b:
            act, why = _slurmd_restart(feats)
            changes.append(Change("cgroup.conf", (no.get(k) or oo[k])[0], a, b, act, why))

    changes += _side_file_changes(old, new)
    for name in ("topology.conf", "topology.yaml"):
        a, b = _body(old.get(name, "")), _body(new.get(name, ""))
        if name == "topology.conf" and _topology_set(a) == _topology_set(b):
            continue
        if name == "topology.conf" and cp.topology_conf_unread(oc, ver, "topology.yaml" in old) and \
                cp.topology_conf_unread(nc, ver, "topology.yaml" in new):
            continue  # read by Slurm on neither side (confparse.topology_conf_unread): no change to the cluster
        if name == "topology.yaml" and _topology_yaml_key(a) == _topology_yaml_key(b) != "unreadable":
            continue
        if a != b:
            changes.append(Change(name, "topology", _count_lines(a), _count_lines(b), RECONFIGURE, "topology is re-read on reconfigure"))
    # slurmkit's own files (hook wrappers, inventory copy): only those we would write; extra files stay
    for name in sorted(new):
        if name.startswith("slurmkit") and _body(old.get(name, "")) != _body(new[name]):
            changes.append(Change(name, "file", "present" if name in old else "", "new", PUSH, "copy to every node; no Slurm action"))
    for name in sorted(old):
        if name.startswith("slurmkit") and name not in new:
            changes.append(Change(name, "file", "present", "", PUSH, "no longer generated: removed (with a backup)"))
    changes.sort(key=lambda c: (-_RANK[c.action], c.file, c.subject))
    return changes


_RENAME = ('src/common/read_config.c at slurm-25-11-0-1 and slurm-26-05-3-1 reads JobContainerType as NamespaceType '
           '("JobContainerType has been replaced with NamespaceType and will be removed in a future release") and '
           'namespace/tmpfs reads the same job_container.conf (read_jcconf.c): the same plugin, newly spelled; a '
           'reconfigure makes slurmctld read it (write it with, or after, the upgrade to 25.11+, never before: older '
           'releases do not know NamespaceType)')


def _namespace_rename(oc: cp.SlurmConf, nc: cp.SlurmConf, feats: object) -> Change | None:
    """JobContainerType=job_container/X -> NamespaceType=namespace/X on a 25.11+ target: one change, the rename."""
    if not getattr(feats, "namespace_type", False):
        return None
    old, new = oc.value("jobcontainertype"), nc.value("namespacetype")
    if not old or not new or oc.value("namespacetype") or nc.value("jobcontainertype"):
        return None
    if old.lower().replace("job_container/", "namespace/") != new.lower():
        return None
    return Change("slurm.conf", "NamespaceType", f"JobContainerType={old}", new, RECONFIGURE, _RENAME)


# The files beside slurm.conf that slurmkit writes from `accounting.storage` and `runtime:`, what a change to each
# needs (RESTART scope "slurmdbd" is its own step: restart-slurmdbd), and the sentence that decides it:
SIDE_FILES: dict[str, tuple[str, str, str, str]] = {
    # name: (action, scope, nodes, why)
    "slurmdbd.conf": (RESTART, "slurmdbd", "", 'slurmdbd.conf(5) (22.05, 24.11, 26.05): "Changes to the configuration '
                      'file take effect upon restart of SlurmDBD or daemon receipt of the SIGHUP signal"; "This file '
                      'should be only on the computer where SlurmDBD executes": copy it to the slurmdbd hosts only'),
    "plugstack.conf": (PUSH, "", "", 'spank(8) (22.05, 24.11, 26.05): "The SPANK config file is re-read on each job '
                       'launch, so editing the config file will not affect running jobs": new jobs only; copy to every '
                       'node and login node (srun reads it too)'),
    "job_container.conf": (DRAIN, "slurmd", "ALL", 'job_container.conf(5) (22.05, 24.11; namespace/tmpfs reads it in '
                           '26.05): "slurmd on the respective nodes will need to be restarted for changes to take '
                           'effect (scontrol reconfigure is not sufficient). Additionally this can be disruptive to jobs '
                           'already running on the node"'),
    "acct_gather.conf": (RESTART, "all", "ALL", 'acct_gather.conf(5) (22.05, 24.11, 26.05): "Changes to the '
                         'configuration file take effect upon restart of the Slurm daemons"'),
}


def _side_file_changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[Change]:
    out: list[Change] = []
    for name, (act, scope, nodes, why) in SIDE_FILES.items():
        a, b = _body(old.get(name, "")), _body(new.get(name, ""))
        if a == b or name not in new:  # one slurmkit does not write (any more) is the site's: left alone (stale_files)
            continue
        if name == "plugstack.conf":  # spank lines, not Key=Value
            # spank(8): "Comments are preceded with '#' and extend to the end of the line"; words split on blanks
            la = [" ".join(w) for w in (ln.split("#", 1)[0].split() for ln in a.splitlines()) if w]
            lb = [" ".join(w) for w in (ln.split("#", 1)[0].split() for ln in b.splitlines()) if w]
            if la != lb:
                out.append(Change(name, "plugins", "; ".join(la), "; ".join(lb), act, why, nodes, scope))
            continue
        sa, sb = cp.parse_settings(a, name), cp.parse_settings(b, name)
        for k in sorted(set(sa) | set(sb)):
            va = sa[k][1] if k in sa else ""
            vb = sb[k][1] if k in sb else ""
            if va != vb:
                if k in SECRET_KEYS:  # never print a password (StoragePass, acct_gather.conf's); only that it changes
                    va, vb = ("(set)" if va else ""), ("(changed)" if va and vb else "(set)" if vb else "")
                out.append(Change(name, (sb.get(k) or sa[k])[0], va, vb, act, why, nodes, scope))
    return out


def _slurmd_restart(feats: object) -> tuple[str, str]:
    if getattr(feats, "reconfigure_restarts", False):
        return RECONFIGURE, "read by slurmd at start; a 23.11+ reconfigure restarts slurmd"
    return RESTART, "read by slurmd at start: restart slurmd on the nodes"


def _gres_type_change(feats: object) -> tuple[str, str]:
    """A node's GRES type changes, counts equal. gres.conf(5) Type, 22.05 and 23.02: "A restart of the slurmctld and
    slurmd daemons is required for changes to the Type option to take effect."; 23.11+ (slurm-23-11-*-1, 24.11): "For
    changes to the Type option to take effect with a scontrol reconfig all affected slurmd daemons must be responding
    to the slurmctld. Otherwise a restart of the slurmctld and slurmd daemons is required." (before, 22.05 planned a
    reconfigure)"""
    if getattr(feats, "reconfigure_restarts", False):
        return RECONFIGURE, "GRES types change: gres.conf(5) 23.11+ reconfigure with every affected slurmd responding"
    return RESTART, "GRES types change: gres.conf(5) 22.05 \"A restart of the slurmctld and slurmd daemons is required\""


def _strip(rec: tuple[str, ...], key: str) -> tuple[str, ...]:
    return tuple(x for x in rec if not x.startswith(key + "="))


def _gres_delta(ga: tuple[tuple[str, ...], ...], gb: tuple[tuple[str, ...], ...], what: str = "") -> tuple[str, str]:
    """What changed between two hosts' per-device records, named: the records only one side has."""
    only_a = [" ".join(r) for r in ga if r not in gb]
    only_b = [" ".join(r) for r in gb if r not in ga]
    tag = f"{what} " if what else ""
    return tag + "; ".join(only_a), tag + "; ".join(only_b)


def _summ(records: tuple[tuple[str, ...], ...]) -> str:
    if not records:
        return ""
    return f"{len(records)} records, {_devices(records)} devices"


def _body(text: str) -> str:
    """File text without slurmkit's header comments (the inventory hash changes on every edit)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("# generated by slurmkit") and not line.startswith("# target:"))


def _topology_set(text: str) -> frozenset[tuple[tuple[str, str], ...]]:
    """topology.conf as topology/tree (and block) reads it: a set of records, keys in any order or case, a Nodes= or
    Switches= list by the names it holds (switch_record.c turns Nodes= into a node bitmap and Switches= into child
    records by name: ``m22-green-[0-1],m22-green-[2-4]`` is ``m22-green-[0-4]``)."""
    def val(k: str, v: str) -> str:
        if k in ("nodes", "switches"):
            try:
                return ",".join(sorted(set(hostlist.expand(v))))
            except (ValueError, SlurmkitError):  # a list Slurm cannot read: compared as written
                return v
        return v

    return frozenset(tuple(sorted((k.lower(), val(k.lower(), v)) for k, v in r.pairs))
                     for r in cp.parse_records(text, "topology.conf"))


def _topology_yaml_key(text: str) -> object:
    """topology.yaml as slurmctld reads it (topology.yaml(5)): each topology's name, default flag and content, node
    lists as sets (tree leaves, blocks, tori) or in order (rings: walked as written), key order and layout aside; a
    lone flat topology is what Slurm does without the file."""
    import yaml

    if not text.strip():
        return ()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return "unreadable"

    def hosts(v: object, ordered: bool = False) -> object:
        try:
            items = v if isinstance(v, list) else [v]
            # each comma item on its own (NodeSet sorts a whole list; a ring's order is its meaning)
            names = [h for x in items for it in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", str(x))
                     if it.strip() for h in hostlist.expand(it.strip())]
        except Exception:  # noqa: BLE001 - a value the hostlist parser refuses: compared as written
            return str(v)
        return tuple(names) if ordered else frozenset(names)

    def norm(v: object, key: str = "") -> object:
        if key in ("nodes", "children"):  # a hostlist string or a list of names: the same set of names
            return hosts(v)
        if isinstance(v, dict):
            return tuple(sorted((k, norm(x, k)) for k, x in v.items()))
        if isinstance(v, list):
            items = [norm(x, key) for x in v]
            return tuple(items) if key in ("block_sizes",) else frozenset(items) if all(
                isinstance(i, (str, int, tuple, frozenset)) for i in items) else tuple(items)
        return v

    if not isinstance(doc, list):
        return "unreadable"
    out = []
    for t in doc:
        if not isinstance(t, dict):
            return "unreadable"
        if "ring" in t and isinstance(t["ring"], dict):  # ring order is the ring
            rings = tuple((str(r.get("ring")), hosts(r.get("nodes"), ordered=True)) for r in t["ring"].get("rings") or []
                          if isinstance(r, dict))
            t = {**t, "ring": {"rings": rings}}
        out.append(norm(t))
    if len(doc) == 1 and doc[0].get("flat") is True:
        return ()
    return frozenset(out)


def _count_lines(text: str) -> str:
    return f"{len([ln for ln in text.splitlines() if ln.strip() and not ln.startswith('#')])} lines" if text else ""


# The rollout steps, as data: ``plan`` prints them and `conf apply --execute` (slurmkit/elastic/execute.py) carries
# out exactly these, one at a time. kinds: drain, stop-ctld, write, restart-slurmd, start-ctld, restart-ctld,
# reconfigure, verify, resume. ``nodes``: a hostlist, "ALL" (every node of the new config) or "".
DRAIN_STEP, STOP_CTLD, WRITE, RESTART_SLURMD, START_CTLD, RESTART_CTLD, RECONF, VERIFY, RESUME = (
    "drain", "stop-ctld", "write", "restart-slurmd", "start-ctld", "restart-ctld", "reconfigure", "verify", "resume")
RESTART_DBD = "restart-slurmdbd"
UNKNOWN_STATE = "(unknown: the files in DIR fail Slurm's parse)"  # Change.old of a StateSaveLocation they may hide
COPY_STATE = "copy-state"  # by hand: `conf apply --execute` refuses a plan with it (it cannot copy between hosts)


def step_head(text: str) -> str:
    """A plan step in a few words: its text before the first ':' or ' (' ("stop slurmctld (StateSaveLocation
    moves: ...)" -> "stop slurmctld"; "drain node[1-2]: scontrol ..." -> "drain node[1-2]")."""
    cut = [i for i in (text.find(":"), text.find(" (")) if i >= 0]
    return text[:min(cut)] if cut else text


@dataclass(frozen=True)
class Step:
    kind: str
    text: str
    nodes: str = ""


def _union(specs: Iterable[str]) -> str:
    """Hostlists as one set ("inf[01-04]", "inf[01-04],gpu1" -> "gpu1,inf[01-04]"); "ALL" wins."""
    specs = [s for s in specs if s]
    if "ALL" in specs:
        return "ALL"
    hosts: dict[str, None] = {}
    for s in specs:
        hosts.update(dict.fromkeys(hostlist.expand(s)))
    return hostlist.fold(hosts)


def plan_steps(changes: list[Change], version: str = "22.05") -> list[Step]:
    """The ordered rollout: drain -> push files -> restart or reconfigure -> verify -> resume. A change that needs
    a restart is never carried by a reconfigure (issue 20: a 22.05 reconfigure that changes the node count kills
    slurmctld, read_config.c "MaxNodeCount has changed ... slurmctld must be restarted")."""
    if not changes:
        return []
    feats = features_for(version)
    steps: list[Step] = []
    drain = _union(c.nodes for c in changes if c.action == DRAIN and c.nodes)
    if drain:
        targets = "ALL nodes" if drain == "ALL" else drain
        steps.append(Step(DRAIN_STEP, f"drain {targets}: scontrol update NodeName=<nodes> State=DRAIN Reason='slurmkit: "
                                      "config change'; wait until no jobs run there", drain))
    dbd = [c for c in changes if c.scope == "slurmdbd"]
    changes = [c for c in changes if c.scope != "slurmdbd"]
    write = Step(WRITE, "back up and write the new files on the controller and every node (or configless: the controller only)"
                 + ("; slurmdbd.conf (mode 600, owner SlurmUser) on the slurmdbd hosts only" if dbd else ""))
    restart = [c for c in changes if c.action in (RESTART, DRAIN) and c.scope != "reconfigure"]
    state = next((c for c in changes if c.scope == "state"), None)
    if state is not None:
        # StateSaveLocation moves (_STATE): slurmctld stopped before the write, the state copied, then started; every
        # other change rides along (slurmd restarted where one needs it, a reconfigure after for the rest)
        # unset: read_config.h DEFAULT_SAVE_STATE_LOC (slurmdefaults), "/var/spool" in 22.05, 24.11 and 26.05
        dflt = f"{slurmdefaults.default('StateSaveLocation', version) or '(the release default)'} (the default)"
        old, new = state.old or dflt, state.new or dflt
        what = f"StateSaveLocation {old}" if state.old != UNKNOWN_STATE else (
            "the StateSaveLocation slurmctld runs with (`scontrol show config` before step 1: the files in DIR fail "
            f"Slurm's parse, so they do not say; nothing to copy if it is {new} already)")
        # every controller: a backup takes control once the primary stops answering (slurm-24-11-5-1
        # src/slurmctld/backup.c run_backup) and, on the old files, would go on writing the old directory
        steps += [Step(STOP_CTLD, "stop slurmctld on every controller host, backup ones included (StateSaveLocation "
                                  "moves: none may write state meanwhile; a backup takes control when the primary "
                                  "stops answering)"), write,
                  Step(COPY_STATE, f"copy the state by hand on the controller: the files of {what} into {new}, "
                                   "owned by SlurmUser (slurm.conf(5) RELOCATING CONTROLLERS; without them slurmctld "
                                   "starts with no jobs)")]
        if any(c.scope not in ("slurmctld", "state") for c in restart):
            steps.append(Step(RESTART_SLURMD, "restart slurmd on every node", "ALL"))
        steps.append(Step(START_CTLD, "start slurmctld (the primary, then any backup)"))
        # and the changes a reconfigure carries: RECONFIGURE ones, and 23.11+'s drain + reconfigure node changes
        # (RULES_23_11 "node~", RULES_24_11 "node-": scope "reconfigure"), which starting slurmctld alone leaves unread
        # by the slurmds
        if any(c.action == RECONFIGURE or c.scope == "reconfigure" for c in changes):
            steps.append(Step(RECONF, "scontrol reconfigure (the slurmds read the other changes)"))
    elif any(c.scope == "stop-all" for c in changes):
        # the FAQ's order for node list changes before 24.11 (RULES_22_05 "node+" / "node-")
        # every controller: a backup takes control once the primary stops answering (backup.c run_backup) and
        # would run the old node list while the slurmds restart on the new one
        steps += [Step(STOP_CTLD, "stop slurmctld on every controller host, backup ones included (node list changes "
                                  "before 24.11: faq.shtml #add_nodes / #rem_nodes)"),
                  write, Step(RESTART_SLURMD, "restart slurmd on every node", "ALL"),
                  Step(START_CTLD, "start slurmctld (the primary, then any backup)")]
    elif restart:
        steps.append(write)
        ctld = any(c.scope != "slurmd" for c in restart)
        hosts = _union(c.nodes for c in restart if c.scope != "slurmctld" and c.nodes and c.nodes != "ALL")
        every = any(c.scope != "slurmctld" and (not c.nodes or c.nodes == "ALL") for c in restart)
        on = "every node" if every or not hosts else hosts
        target = "ALL" if every or not hosts else hosts
        if ctld and (every or hosts):
            steps += [Step(RESTART_CTLD, "restart slurmctld"),
                      Step(RESTART_SLURMD, f"restart slurmd on {on}", target)]
        elif ctld:
            steps.append(Step(RESTART_CTLD, "restart slurmctld"))
        else:
            steps.append(Step(RESTART_SLURMD, f"restart slurmd on {on}", target))
            if any(c.action == RECONFIGURE for c in changes):
                # slurm.conf changes of the reconfigure class beside a slurmd-only restart (a job_container.conf
                # change with JobContainerType/NamespaceType added, 23.11+): restarting slurmd does not make slurmctld
                # read them (seen on the 24.11 and 26.05 labs: `scontrol show config` kept NamespaceType=(null))
                steps.append(Step(RECONF, "scontrol reconfigure (slurmctld reads the slurm.conf changes)"))
    elif any(c.action != PUSH for c in changes):
        steps.append(write)
        steps.append(Step(RECONF, "scontrol reconfigure" + (" (23.11+: restarts the daemons, keeps the old config if the new one fails)" if feats.reconfigure_restarts else "")))
    else:  # only files read afresh by each job (plugstack.conf) or no daemon at all (slurmkit's own): no action
        steps.append(write)
    if dbd:
        # slurmctld queues its accounting messages while slurmdbd is away (slurm.conf(5) MaxDBDMsgs), so slurmdbd
        # restarts without draining anything; it goes after the write so it reads the new file
        steps.insert(steps.index(write) + 1, Step(RESTART_DBD, "restart slurmdbd (rollout.restart_slurmdbd) on the "
                                                              "slurmdbd hosts: it reads slurmdbd.conf at start"))
    # Nodes added by a reconfigure (24.11+, RULES_24_11 "node+"): the reconfigure restarts the slurmds that run, but
    # a new node's slurmd is not running (or exited: it was in no slurm.conf), so without this step --execute waited
    # at verify for nodes nothing had started. The stop-all procedure restarts every slurmd already.
    added = _union(c.new for c in changes if c.subject == "NodeName" and not c.old and c.scope != "stop-all")
    covered = any(s.kind == RESTART_SLURMD and s.nodes == "ALL" for s in steps)
    if added and not covered:
        steps.append(Step(RESTART_SLURMD, f"start slurmd on the new nodes {added} (they join once slurmctld knows them)",
                          added))
    steps.append(Step(VERIFY, "verify: slurmkit conf drift INVENTORY; sinfo -R shows no new slurmkit/INVAL reasons"))
    kept = _union(c.nodes for c in changes if c.action == DRAIN and c.nodes and not (c.subject == "NodeName" and not c.new))
    if kept:  # removed nodes are gone: nothing to resume there
        steps.append(Step(RESUME, "resume what was drained: scontrol update NodeName=<nodes> State=RESUME", kept))
    return steps


def plan(changes: list[Change], version: str = "22.05") -> list[str]:
    """``plan_steps`` as numbered lines."""
    if not changes:
        return ["nothing to do: the running files already match the inventory"]
    return [f"{i}. {s.text}" for i, s in enumerate(plan_steps(changes, version), 1)]


def worst(changes: list[Change]) -> str:
    return max((c.action for c in changes), key=_RANK.__getitem__, default=PUSH)


# --------------------------------------------------------------------------------------------------------------
# drift


@dataclass(frozen=True)
class Drift:
    nodes: str
    field: str
    expected: str
    actual: str

    def line(self) -> str:
        return f"{self.nodes}: {self.field}: inventory {self.expected or '(none)'}, cluster {self.actual or '(none)'}"


class NodeFacts(Protocol):
    """What drift needs of a node as Slurm reports it (the backend's NodeInfo has these fields)."""

    @property
    def name(self) -> str: ...
    @property
    def cpus(self) -> int: ...
    @property
    def sockets(self) -> int: ...
    @property
    def cores_per_socket(self) -> int: ...
    @property
    def threads_per_core(self) -> int: ...
    @property
    def real_memory(self) -> int: ...
    @property
    def gres(self) -> str: ...
    @property
    def features(self) -> tuple[str, ...]: ...


def drift(cluster: Cluster, nodes: Iterable[NodeFacts]) -> list[Drift]:
    """Inventory vs ``scontrol show node`` records: CPUs, sockets, cores, threads, RealMemory, Gres,
    Features. Findings with the same values are folded into one hostlist."""
    from slurmkit.generate.slurmconf import _node_gres  # the same Gres string the generator writes

    seen = {n.name: n for n in nodes}
    found: dict[tuple[str, str, str], list[str]] = {}
    for g in cluster.node_groups:
        want_gres = cp.parse_gres(_node_gres(g))
        for h in g.hostnames:
            n = seen.get(h)
            if n is None:
                found.setdefault(("node", "defined", "missing"), []).append(h)
                continue
            pairs = [
                ("CPUs", str(g.cpu.cpus), str(n.cpus)),
                ("Sockets", str(g.cpu.sockets), str(n.sockets)),
                ("CoresPerSocket", str(g.cpu.cores_per_socket), str(n.cores_per_socket)),
                ("ThreadsPerCore", str(g.cpu.threads_per_core), str(n.threads_per_core)),
                ("RealMemory", str(g.real_memory_mb), str(n.real_memory)),
                ("Features", ",".join(sorted(g.features)), ",".join(sorted(n.features))),
            ]
            have_gres = cp.parse_gres(n.gres)
            if have_gres != want_gres:
                pairs.append(("Gres", _gres_str(want_gres), _gres_str(have_gres)))
            for fld, e, a in pairs:
                if e != a:
                    found.setdefault((fld, e, a), []).append(h)
    known = set(cluster.all_hosts)
    extra = [h for h in seen if h not in known]
    if extra:
        found.setdefault(("node", "not in inventory", "present"), []).extend(extra)
    return [Drift(hostlist.fold(hs), f, e, a) for (f, e, a), hs in found.items()]


def _gres_str(g: Mapping[tuple[str, str], int]) -> str:
    return ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for (n, t), c in sorted(g.items()))
