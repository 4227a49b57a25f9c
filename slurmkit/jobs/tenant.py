"""gpusub's tenant preflight, the I/O half: is accounting enforced on the cluster ``$SLURM_CONF`` names, and what
do slurmctld (``scontrol show assoc_mgr``) and slurmdbd (``sacctmgr show assoc``, ``sacctmgr show qos`` for the
QOS MaxTRESPerUser) say about the user. The three queries run in threads beside the rest of the preflight; ``accounts/quota.py`` judges."""

from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from slurmkit.backend.run import run
from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:  # the judge is imported when a cluster enforces accounting (not on every submit: ~3 ms here)
    from slurmkit.accounts.quota import TenantCheck

TIMEOUT = 20.0


class TenantQuery:
    """Started with the user's name and the cluster's settings; ``result(...)`` waits for both queries."""

    def __init__(self, env: Mapping[str, str], user: str, cluster: str, enforce: set[str]):
        self.user, self.cluster, self.enforce = user, cluster, enforce
        self.uid = os.getuid()
        self._out: dict[str, str] = {}
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=self._q, args=("mgr", ["scontrol", "-o", "show", "assoc_mgr", "flags=assoc,qos"], env),
                             daemon=True),
            threading.Thread(target=self._q, args=("assoc", ["sacctmgr", "-P", "-n", "show", "assoc", "where",
                                                             f"users={user}", f"cluster={cluster}",
                                                             "format=Account,Partition,QOS,DefaultQOS"], env),
                             daemon=True),
            threading.Thread(target=self._q, args=("qos", ["sacctmgr", "-P", "-n", "show", "qos",
                                                           "format=Name,MaxTRESPerUser"], env), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _q(self, key: str, argv: list[str], env: Mapping[str, str]) -> None:
        try:
            self._out[key] = run(argv, timeout=TIMEOUT, env=dict(env)).stdout
        except SlurmkitError as exc:
            self._err.append(exc.one_line())

    def result(self, account: str | None, qos: str | None, gpus: int) -> TenantCheck:
        from slurmkit.accounts.quota import (
            TenantCheck,
            check,
            parse_assoc_mgr,
            parse_qos_per_user,
            parse_user_qos,
        )

        for t in self._threads:
            t.join()
        if self._err:
            return TenantCheck(warnings=[f"tenant limits not checked: {self._err[0]}"])
        assocs, qos_use = parse_assoc_mgr(self._out["mgr"])
        limits = bool(self.enforce & {"limits", "safe", "all"})
        return check(self.user, self.cluster, account, qos, gpus, assocs, qos_use, parse_user_qos(self._out["assoc"]),
                     enforce_limits=limits, uid=self.uid, qos_per_user=parse_qos_per_user(self._out["qos"]))


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
    return TenantQuery(dict(env) if env is not None else {}, user, cluster, enforce)
