"""gpusub's tenant preflight, the I/O half: is accounting enforced on the cluster ``$SLURM_CONF`` names, and what
do slurmctld (``scontrol show assoc_mgr``) and slurmdbd (``sacctmgr show assoc``, ``sacctmgr show qos`` for the
QOS MaxTRESPerUser) say about the user. The queries run in threads beside the rest of the preflight, slurmdbd's
answers cached per user for a minute (TenantQuery); ``accounts/quota.py`` judges."""

from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmkit.backend.run import run
from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:  # the judge is imported when a cluster enforces accounting (not on every submit: ~3 ms here)
    from slurmkit.accounts.quota import TenantCheck

TIMEOUT = 20.0


TTL = 60.0  # seconds a cached sacctmgr answer serves (below)


class TenantQuery:
    """Started with the user's name and the cluster's settings; ``result(...)`` waits for the queries.

    slurmctld's view (``scontrol show assoc_mgr``: associations, limits, use) is asked every time. The two slurmdbd
    queries (the user's associations with their QOS lists, the QOS's MaxTRESPerUser) cost ~0.28 s of wall on an
    accounting cluster (issue 34 item 7) and change when an admin edits accounts, not between two submits, so their
    answers are kept per user for TTL seconds (``$XDG_CACHE_HOME/slurmkit/gpusub-tenant.json``, 0600 in a 0700
    directory; only a file the user owns and nobody else can write is read). A cached answer is used only while the
    user's associations and the QOS that slurmctld reports are the ones it was saved beside; a job the check would
    refuse is checked again on fresh answers first (a cached answer never refuses a job); and the per-user QOS
    limit slurmctld shows beside the user's use wins over the cached one (accounts/quota.py). What a cached answer
    can miss for up to TTL seconds: an association's allowed/default QOS changed, or a per-user QOS limit where the
    user has no job in that QOS -- the account and QOS explained, a warning, never a refusal."""

    def __init__(self, env: Mapping[str, str], user: str, cluster: str, enforce: set[str], conf: str = ""):
        self.user, self.cluster, self.enforce = user, cluster, enforce
        self.uid = os.getuid()
        self.env = env
        self.key = f"{os.path.abspath(conf)}|{cluster}|{user}|{self.uid}"
        self._out: dict[str, str] = {}
        self._err: list[str] = []
        self._cached = _cache_get(self.key)
        self._threads = [threading.Thread(target=self._q, args=("mgr", ["scontrol", "-o", "show", "assoc_mgr",
                                                                         "flags=assoc,qos"]), daemon=True)]
        if self._cached is None:
            self._threads += self._dbd_threads()
        for t in self._threads:
            t.start()

    def _dbd_threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self._q, args=("assoc", ["sacctmgr", "-P", "-n", "show", "assoc", "where",
                                                             f"users={self.user}", f"cluster={self.cluster}",
                                                             "format=Account,Partition,QOS,DefaultQOS"]), daemon=True),
            threading.Thread(target=self._q, args=("qos", ["sacctmgr", "-P", "-n", "show", "qos",
                                                           "format=Name,MaxTRESPerUser"]), daemon=True),
        ]

    def _q(self, key: str, argv: list[str]) -> None:
        try:
            self._out[key] = run(argv, timeout=TIMEOUT, env=dict(self.env)).stdout
        except SlurmkitError as exc:
            self._err.append(exc.one_line())

    def _fresh(self) -> None:
        threads = self._dbd_threads()
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def result(self, account: str | None, qos: str | None, gpus: int) -> TenantCheck:
        from slurmkit.accounts.quota import TenantCheck, parse_assoc_mgr

        for t in self._threads:
            t.join()
        if self._err:
            return TenantCheck(warnings=[f"tenant limits not checked: {self._err[0]}"])
        assocs, qos_use = parse_assoc_mgr(self._out["mgr"])
        # what the cached answers were saved beside: the user's associations, the QOS slurmctld knows
        stamp = "|".join(sorted(f"{a.account}/{a.user}" for a in assocs if a.user == self.user)) + "#" + \
            "|".join(sorted(qos_use))
        cached = self._cached is not None and self._cached.get("stamp") == stamp
        if cached:
            assert self._cached is not None
            self._out["assoc"], self._out["qos"] = self._cached["assoc"], self._cached["qos"]
        elif self._cached is not None:  # the associations or QOS changed since: ask slurmdbd now
            self._fresh()
            if self._err:
                return TenantCheck(warnings=[f"tenant limits not checked: {self._err[0]}"])
        tc = self._judge(account, qos, gpus, assocs, qos_use)
        if cached and tc.errors:  # never refuse a job on a cached answer
            self._fresh()
            if self._err:
                return TenantCheck(warnings=[f"tenant limits not checked: {self._err[0]}"])
            cached = False
            tc = self._judge(account, qos, gpus, assocs, qos_use)
        if not cached:
            _cache_put(self.key, {"stamp": stamp, "assoc": self._out["assoc"], "qos": self._out["qos"]})
        return tc

    def _judge(self, account: str | None, qos: str | None, gpus: int, assocs, qos_use) -> TenantCheck:  # type: ignore[no-untyped-def]
        from slurmkit.accounts.quota import check, parse_qos_per_user, parse_user_qos

        limits = bool(self.enforce & {"limits", "safe", "all"})
        return check(self.user, self.cluster, account, qos, gpus, assocs, qos_use, parse_user_qos(self._out["assoc"]),
                     enforce_limits=limits, uid=self.uid, qos_per_user=parse_qos_per_user(self._out["qos"]))


# --- the per-user cache of slurmdbd's answers --------------------------------------------------------------------
# Only an optimisation: a file that cannot be read, or is not the user's own, is a miss; a failed write is ignored.

def _cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit", "gpusub-tenant.json")


def _cache_read() -> dict[str, Any]:
    import json

    try:
        fd = os.open(_cache_file(), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return {}
            data = json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache_get(key: str) -> dict[str, str] | None:
    import time

    e = _cache_read().get(key)
    if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("stamp", "assoc", "qos")):
        return None
    at = e.get("at")
    if not isinstance(at, (int, float)) or not 0 <= time.time() - at < TTL:
        return None
    return {k: e[k] for k in ("stamp", "assoc", "qos")}


def _cache_put(key: str, entry: dict[str, str]) -> None:
    import json
    import time

    now = time.time()
    data = {k: v for k, v in _cache_read().items()
            if isinstance(v, dict) and isinstance(v.get("at"), (int, float)) and now - v["at"] < TTL}
    data[key] = {**entry, "at": now}
    target = _cache_file()
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(os.path.dirname(target))
        tmp = f"{target}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, target)
    except OSError:
        pass


def start(env: Mapping[str, str] | None = None) -> TenantQuery | None:
    """None when the cluster enforces no associations (no slurmdbd, or AccountingStorageEnforce without
    associations/limits/qos): then no tenant can block a job."""
    from slurmkit.generate.confparse import parse_slurm_conf

    e = os.environ if env is None else env
    path = Path(e.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    try:
        conf = parse_slurm_conf(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError, SlurmkitError):
        return None
    if conf.value("AccountingStorageType") != "accounting_storage/slurmdbd":
        return None
    # slurm.conf(5) AccountingStorageEnforce (22.05 and 24.11): limits, qos and safe each imply associations
    enforce = {x.strip().lower() for x in conf.value("AccountingStorageEnforce").split(",") if x.strip()}
    if not enforce & {"associations", "limits", "qos", "safe", "all"}:
        return None
    cluster = conf.value("ClusterName").lower()
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None
    return TenantQuery(dict(env) if env is not None else {}, user, cluster, enforce, str(path))
