"""The second ``--remote`` transport: slurmrestd with a JWT (``--remote https://[USER@]HOST:PORT``), for ``gpusub
status``, ``cancel`` and ``wait`` from a machine with no Slurm and no ssh to the cluster (issue 34 item 3).

slurmrestd carries no files: the submission (which ships the tree) and ``logs`` (files in the run dir) need the ssh
transport. The token is the one ``scontrol token`` prints (``SLURM_JWT``, as Slurm's own commands read it), or
``--jwt-file FILE`` (a regular file of the user's own, not readable by group or others: a token is a password). It
is sent as ``X-SLURM-USER-TOKEN`` with ``X-SLURM-USER-NAME`` (the URL's user, else the local user's name), the
headers slurmrestd's rest_auth/jwt reads (src/slurmrestd/plugins/auth/jwt/jwt.c of slurm-22-05-8-1), and only over
https, or plain http to a loopback address (a token sent in the clear over a network is a token given away).

API versions: the newest the server lists (``GET /openapi/v3``) of those parsed here: v0.0.38 (22.05's
openapi/v0.0.38 plugin, src/plugins/openapi/v0.0.38/jobs.c: ``job_state`` a string, ``exit_code`` the wait(2)
status as one integer; 22.05 has no data_parser plugins at all) and the data_parser versions v0.0.39 (23.02 and
23.11, ``signal/signal_id``, src/plugins/data_parser/v0.0.39/parsers.c of slurm-23-11-9-1) to v0.0.45 (24.11 ships v0.0.40-42,
src/plugins/data_parser/ of slurm-24-11-5-1; 26.05 v0.0.42-45, of slurm-26-05-3-1: ``job_state`` a list of flags,
``exit_code`` an object with ``return_code`` and ``signal/id``, numbers as ``{set, infinite, number}``, parsers.c
PROCESS_EXIT_CODE_VERBOSE). The lab test runs v0.0.38 on the host's 22.05 (the cached 24.11/26.05 roots carry no
slurmrestd).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from slurmkit.errors import UsageError
from slurmkit.jobs.remote import RETRIES, RemoteError, clean

VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")  # newest first
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY"}


def is_url(text: str) -> bool:
    return text.startswith(("https://", "http://"))


def read_token(jwt_file: str | None, environ: Mapping[str, str]) -> str:
    """The JWT: ``--jwt-file`` (checked: a regular file of this user, mode without group/other bits), else
    ``$SLURM_JWT``."""
    if jwt_file:
        try:
            fd = os.open(jwt_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise UsageError(f"--jwt-file {jwt_file}: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise UsageError(f"--jwt-file {jwt_file}: must be a regular file of your own with mode 0600 or "
                                 f"narrower (it is {stat.filemode(st.st_mode)}, uid {st.st_uid}): a token is a "
                                 "password")
            text = os.read(fd, 65536).decode(errors="replace")
        finally:
            os.close(fd)
    else:
        text = environ.get("SLURM_JWT", "")
    token = text.strip()
    if token.startswith("SLURM_JWT="):  # `scontrol token` prints SLURM_JWT=<token>
        token = token.split("=", 1)[1]
    if not token:
        raise UsageError("--remote URL: no token: set SLURM_JWT (`scontrol token` on the cluster prints it) or "
                         "give --jwt-file FILE")
    if not re.fullmatch(r"[A-Za-z0-9_\-.=]+", token):
        raise UsageError("--remote URL: the token is no JWT (letters, digits and -_.= only)")
    return token


@dataclass
class RestRemote:
    """slurmrestd at ``url``; each request retried after a connection failure, as the ssh transport's calls."""

    url: str
    token: str
    user: str
    retries: int = RETRIES
    timeout: float = 30.0
    err: IO[str] | None = None
    sleep: Callable[[float], None] = time.sleep
    _version: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, token: str, environ: Mapping[str, str], **kw: Any) -> RestRemote:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("https", "http") or not u.hostname:
            raise UsageError(f"--remote {url!r}: expected https://[USER@]HOST[:PORT]")
        if u.scheme == "http" and not _loopback(u.hostname):
            raise UsageError(f"--remote {url!r}: plain http sends the token in the clear: https, or http only to "
                             "a loopback address (an ssh tunnel's)")
        if u.password is not None or (u.path not in ("", "/")) or u.query or u.fragment:
            raise UsageError(f"--remote {url!r}: [USER@]HOST[:PORT] only (no password, path or query)")
        user = urllib.parse.unquote(u.username) if u.username else (environ.get("USER") or environ.get("LOGNAME"))
        if not user:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        netloc = u.hostname if ":" not in u.hostname else f"[{u.hostname}]"
        base = f"{u.scheme}://{netloc}" + (f":{u.port}" if u.port else "")
        return cls(url=base, token=token, user=user, **kw)

    def __str__(self) -> str:
        return self.url

    def request(self, method: str, path: str) -> Any:
        req = urllib.request.Request(self.url + path, method=method, headers={
            "X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token, "Accept": "application/json"})
        delay = 1.0
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - scheme checked
                    body = resp.read()
                break
            except urllib.error.HTTPError as exc:  # slurmrestd's answer: its errors[] say why
                body = exc.read()
                try:
                    data = json.loads(body)
                except ValueError:
                    data = None
                if isinstance(data, dict) and (data.get("jobs") is not None or data.get("errors")):
                    return data
                raise RemoteError(f"{self.url}{path}: HTTP {exc.code} {clean(exc.reason or '')}") from exc
            except (urllib.error.URLError, OSError) as exc:
                why = clean(str(getattr(exc, "reason", exc)))
                if attempt == self.retries:
                    raise RemoteError(f"{self.url}: the connection failed {attempt + 1} times, last: {why}") from exc
                if self.err is not None:
                    self.err.write(f"gpusub: {self.url}: connection failed ({why}); retrying in {delay:g}s "
                                   f"({attempt + 1}/{self.retries})\n")
                self.sleep(delay)
                delay = min(delay * 2, 15.0)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise RemoteError(f"{self.url}{path}: no JSON back") from exc

    def version(self) -> str:
        if self._version is None:
            spec = self.request("GET", "/openapi/v3")
            paths = spec.get("paths", {}) if isinstance(spec, dict) else {}
            found = [v for v in VERSIONS if f"/slurm/{v}/job/{{job_id}}" in paths]
            if not found:
                raise RemoteError(f"{self.url}: slurmrestd offers none of the API versions gpusub reads "
                                  f"({', '.join(VERSIONS)})")
            self._version = found[0]
        return self._version

    def status(self, job_ids: Sequence[str]) -> list[dict[str, object]]:
        rows = []
        for jid in job_ids:
            if not re.fullmatch(r"[0-9]+(_[0-9]+)?", jid):
                raise UsageError(f"{jid!r}: not a job id")
            data = self.request("GET", f"/slurm/{self.version()}/job/{jid}")
            jobs = data.get("jobs") or [] if isinstance(data, dict) else []
            if not jobs:
                rows.append({"job_id": jid, "state": "UNKNOWN", "source": "slurmrestd", "finished": False,
                             "note": _errors(data)})
                continue
            rows.append(job_row(jid, jobs[-1]))
        return rows

    def cancel(self, job_id: str) -> None:
        """DELETE of the job: slurm_kill_job2(SIGKILL, KILL_FULL_JOB) (jobs.c of 22.05), as scancel. No --signal:
        slurmrestd signals the whole job with it (KILL_FULL_JOB), not the batch shell alone as `gpusub cancel
        --signal` does, so the steps would get USR2 twice."""
        if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
            raise UsageError(f"{job_id!r}: not a job id")
        row = self.status([job_id])[0]
        if row["state"] == "UNKNOWN":
            raise RemoteError(f"job {job_id}: not known to slurmctld ({row.get('note') or 'no record'})")
        if row["finished"]:
            raise RemoteError(f"job {job_id} already ended ({row['state']}): nothing to cancel")
        data = self.request("DELETE", f"/slurm/{self.version()}/job/{job_id}")
        if isinstance(data, dict) and data.get("errors"):
            raise RemoteError(f"{self.url}: cancel {job_id}: {_errors(data)}")

    def wait(self, job_id: str, poll: Callable[[], float] | None = None,
             on_change: Callable[[dict[str, object]], None] | None = None) -> dict[str, object]:
        from slurmkit.jobs.monitor import Backoff

        nap = poll or Backoff(first=1.0, cap=30.0, fast_cap=5.0, fast_for=120.0)
        last = None
        while True:
            row = self.status([job_id])[0]
            if (row["state"], row.get("restarts")) != last and on_change is not None:
                on_change(row)
            last = (row["state"], row.get("restarts"))
            if row["finished"] or row["state"] == "UNKNOWN":
                return row
            self.sleep(nap())


def _errors(data: object) -> str:
    errs = data.get("errors") if isinstance(data, dict) else None
    return clean("; ".join(str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
                           for e in errs or []))


def _number(v: object) -> int:
    """An integer, or data_parser's ``{"set": true, "infinite": false, "number": N}``."""
    if isinstance(v, dict):
        return int(v.get("number") or 0) if v.get("set", True) and not v.get("infinite") else 0
    try:
        return int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def job_row(job_id: str, j: Mapping[str, Any]) -> dict[str, object]:
    """One job of slurmrestd's answer as gpusub's status fields (JobStatus's names)."""
    st = j.get("job_state")
    states = [str(s) for s in st] if isinstance(st, list) else [str(st or "UNKNOWN")]
    state = next((s for s in states if s in TERMINAL), states[0] if states else "UNKNOWN")
    ec = j.get("exit_code")
    if isinstance(ec, dict):  # data_parser: return_code and signal/id
        sig = ec.get("signal")
        # v0.0.39 (23.02-23.11, DUMP_FUNC(JOB_EXIT_CODE)): signal/signal_id, a plain integer; v0.0.40+: signal/id
        sid = (sig.get("id", sig.get("signal_id")) if isinstance(sig, dict) else 0)
        code, signal = _number(ec.get("return_code")), _number(sid)
    else:  # v0.0.38: the wait(2) status (WEXITSTATUS, WTERMSIG)
        raw = _number(ec)
        code, signal = (raw >> 8) & 0xFF, raw & 0x7F
    return {"job_id": job_id, "state": state, "source": "slurmrestd", "nodes": str(j.get("nodes") or ""),
            "reason": str(j.get("state_reason") or ""), "exit_code": f"{code}:{signal}",
            "restarts": _number(j.get("restart_cnt")), "finished": state in TERMINAL}


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
