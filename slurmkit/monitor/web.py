"""The exporter's HTTP(S) server: bounded in connections, threads, time and bytes, whatever the network sends.

One asyncio loop owns every socket (an idle connection costs an fd and a few hundred bytes, never a thread); the
scrape itself and bcrypt checks run on small thread pools. Each connection has ``request_timeout_s`` from accept
to a complete request head (the TLS handshake included: a slowloris client that trickles bytes is cut at the
deadline, not at its last byte), and ``request_timeout_s`` again to take the answer. At most ``max_connections``
are open (never more than the fd limit leaves room for): one over it closes the oldest connection still before
its request, of the peer address holding the most, so a flood from one host evicts its own connections before
another host's scrape. The answer is HTTP/1.1 with ``Connection: close`` (one request per connection).

``--web.config.file`` takes Prometheus' exporter-toolkit web configuration (docs/web-configuration.md of
prometheus/exporter-toolkit): ``tls_server_config`` (cert_file, key_file, client_auth_type, client_ca_file or
client_ca, client_allowed_sans, min_version, max_version, prefer_server_cipher_suites), ``http_server_config``
(headers; http2 is accepted and means nothing here: this server speaks HTTP/1.1) and ``basic_auth_users`` (bcrypt
hashes; the `bcrypt` package, ``pip install slurmkit[exporter]``). Keys the toolkit has and this server cannot
honour as written (cipher_suites and curve_preferences name Go's constants, rate_limit, inline cert/key) are
refused in one line rather than ignored. The file is read once, at start.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import io
import resource
import signal
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.client import parse_headers
from pathlib import Path
from typing import Any

from slurmkit.errors import UsageError

# exporter-toolkit's client_auth_type values (Go's crypto/tls ClientAuthType names) -> ssl's verify mode. The two
# that take a certificate without verifying it (RequestClientCert, RequireAnyClientCert) have no ssl equivalent and
# the toolkit's own doc calls every value but RequireAndVerifyClientCert insecure for authentication.
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
                 "TLS13": ssl.TLSVersion.TLSv1_3}
# http_server_config.headers: the names the toolkit allows (web-configuration.md)
_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "X-XSS-Protection",
            "Strict-Transport-Security")
_TLS_KEYS = {"cert_file", "key_file", "cert", "key", "client_auth_type", "client_ca_file", "client_ca",
             "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
             "curve_preferences"}
_UNSUPPORTED = {"cipher_suites": "Go cipher-suite names have no OpenSSL equivalent here; leave it out",
                "curve_preferences": "Go curve names have no OpenSSL equivalent here; leave it out",
                "cert": "give the certificate as cert_file", "key": "give the key as key_file"}
# a bcrypt check the toolkit makes when the user is unknown, so a wrong name costs what a wrong password does
_DUMMY_HASH = b"$2b$10$3faE.o8DNQikxuB.yJUpzu5bRzP9TmXCqf/g9XEJcvIMXkCXB2/9W"


@dataclass(frozen=True)
class WebConfig:
    """What --web.config.file says, checked: the TLS context (None: plain HTTP), the SANs a client certificate
    must carry one of, basic-auth users (name -> bcrypt hash) and the extra response headers."""

    path: str = ""
    tls: ssl.SSLContext | None = None
    allowed_sans: tuple[str, ...] = ()
    users: tuple[tuple[str, bytes], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def authenticated(self) -> bool:
        """Whether a client must prove who it is (basic auth or a verified client certificate)."""
        return bool(self.users) or (self.tls is not None and self.tls.verify_mode == ssl.CERT_REQUIRED)


def load_web_config(path: str) -> WebConfig:
    """Read and check an exporter-toolkit web config; UsageError naming the file and key path on anything wrong."""
    import yaml

    def err(key: str, msg: str) -> UsageError:
        return UsageError(f"{path}: {key}: {msg}" if key else f"{path}: {msg}")

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise err("", exc.strerror or str(exc)) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise err("", f"not YAML{f' (line {mark.line + 1})' if mark else ''}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise err("", "expected a mapping of tls_server_config, http_server_config, basic_auth_users")

    def mapping(v: Any, key: str) -> dict[str, Any]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise err(key, f"expected a mapping, got {type(v).__name__}")
        return v

    def string(v: Any, key: str) -> str:
        if not isinstance(v, str) or not v:
            raise err(key, "expected a non-empty string")
        return v

    def file(v: Any, key: str) -> str:
        p = string(v, key)
        if not Path(p).is_absolute():  # the toolkit reads them relative to the config file's directory
            p = str(Path(path).resolve().parent / p)
        if not Path(p).is_file():
            raise err(key, f"{p}: no such file")
        return p

    for k in doc:
        if k in ("rate_limit",):
            raise err(str(k), "not supported by slurmkit exporter (its connection and worker limits bound load)")
        if k not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise err(str(k), "unknown key (tls_server_config, http_server_config, basic_auth_users)")
    tls_cfg = mapping(doc.get("tls_server_config"), "tls_server_config")
    ctx: ssl.SSLContext | None = None
    sans: tuple[str, ...] = ()
    if tls_cfg:
        for k in tls_cfg:
            key = f"tls_server_config.{k}"
            if k not in _TLS_KEYS:
                raise err(key, "unknown key")
            if k in _UNSUPPORTED:
                raise err(key, f"not supported by slurmkit exporter: {_UNSUPPORTED[k]}")
        for need in ("cert_file", "key_file"):
            if need not in tls_cfg:
                raise err(f"tls_server_config.{need}", "required with tls_server_config")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(file(tls_cfg["cert_file"], "tls_server_config.cert_file"),
                                file(tls_cfg["key_file"], "tls_server_config.key_file"))
        except ssl.SSLError as exc:
            raise err("tls_server_config.cert_file", f"certificate or key not usable: {exc.reason or exc}") from None
        lo = {"min_version": "TLS12", "max_version": "TLS13"}
        for k, default in lo.items():
            v = tls_cfg.get(k, default)
            if v not in _TLS_VERSIONS:
                raise err(f"tls_server_config.{k}", f"{v!r}: expected one of {', '.join(_TLS_VERSIONS)}")
            setattr(ctx, "minimum_version" if k == "min_version" else "maximum_version", _TLS_VERSIONS[v])
        if _TLS_VERSIONS[tls_cfg.get("min_version", "TLS12")] > _TLS_VERSIONS[tls_cfg.get("max_version", "TLS13")]:
            raise err("tls_server_config.min_version", "is above max_version")
        if tls_cfg.get("prefer_server_cipher_suites", True) is not False:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        mode = tls_cfg.get("client_auth_type", "NoClientCert")
        if mode not in _CLIENT_AUTH:
            why = (" (it takes a certificate without verifying it; use RequireAndVerifyClientCert)"
                   if mode in ("RequestClientCert", "RequireAnyClientCert") else "")
            raise err("tls_server_config.client_auth_type",
                      f"{mode!r}: expected one of {', '.join(_CLIENT_AUTH)}{why}")
        ctx.verify_mode = _CLIENT_AUTH[mode]
        if mode != "NoClientCert":
            try:
                if "client_ca_file" in tls_cfg:
                    ctx.load_verify_locations(cafile=file(tls_cfg["client_ca_file"], "tls_server_config.client_ca_file"))
                elif "client_ca" in tls_cfg:
                    ctx.load_verify_locations(cadata=string(tls_cfg["client_ca"], "tls_server_config.client_ca"))
                else:
                    raise err("tls_server_config.client_ca_file", f"required with client_auth_type {mode}")
            except ssl.SSLError as exc:
                raise err("tls_server_config.client_ca_file", f"not a CA certificate: {exc.reason or exc}") from None
        raw_sans = tls_cfg.get("client_allowed_sans") or []
        if not isinstance(raw_sans, list):
            raise err("tls_server_config.client_allowed_sans", "expected a list")
        sans = tuple(string(s, f"tls_server_config.client_allowed_sans[{i}]") for i, s in enumerate(raw_sans))
        if sans and mode != "RequireAndVerifyClientCert":
            raise err("tls_server_config.client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")
    http_cfg = mapping(doc.get("http_server_config"), "http_server_config")
    headers: list[tuple[str, str]] = []
    for k, v in http_cfg.items():
        if k == "http2":
            if not isinstance(v, bool):
                raise err("http_server_config.http2", "expected true or false")
        elif k == "headers":
            for name, value in mapping(v, "http_server_config.headers").items():
                if name not in _HEADERS:
                    raise err(f"http_server_config.headers.{name}", f"not one of {', '.join(_HEADERS)}")
                if value is None or value == "":
                    continue  # "Unset if blank"
                if not isinstance(value, str) or any(c in value for c in "\r\n"):
                    raise err(f"http_server_config.headers.{name}", "expected a one-line string")
                headers.append((name, value))
        else:
            raise err(f"http_server_config.{k}", "unknown key (http2, headers)")
    users: list[tuple[str, bytes]] = []
    for name, h in mapping(doc.get("basic_auth_users"), "basic_auth_users").items():
        key = f"basic_auth_users.{name}"
        if not isinstance(name, str) or not name or ":" in name:
            raise err(key, "a user name is a non-empty string without ':'")
        hv = string(h, key).encode()
        if not hv.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise err(key, "expected a bcrypt hash ($2y$..., as `htpasswd -nBC 10 \"\"` prints)")
        users.append((name, hv))
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise err("basic_auth_users", "needs the bcrypt package: pip install 'slurmkit[exporter]'") from None
    return WebConfig(path, ctx, sans, tuple(users), tuple(headers))


@dataclass(frozen=True)
class Limits:
    request_timeout_s: float = 10.0  # accept -> whole request head (TLS handshake included); again to answer
    max_connections: int = 256  # open connections at most (and never more than the fd limit leaves room for)
    max_header_bytes: int = 16384  # request line + headers
    workers: int = 4  # scrape threads
    max_queued: int = 32  # requests waiting for a scrape thread; more are answered 503 at once
    auth_workers: int = 2  # bcrypt threads (a wrong password costs a bcrypt; a right one is cached)


def fd_room(reserve: int = 96) -> int:
    """Connections the fd limit leaves room for, after ``reserve`` fds for the scrape's subprocesses, logs and the
    listening socket (systemd's default soft limit is 1,024)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, (soft if soft != resource.RLIM_INFINITY else 1 << 20) - reserve)


DEFAULT_PORT = 9799


def _local(host: str) -> str:
    """The address of this machine ``host`` names (one this process can bind; a loopback one only when it names
    no other, as Debian's /etc/hosts maps the host's own name to 127.0.1.1), or ""."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ""
    addrs = sorted({(i[0], str(i[4][0])) for i in infos}, key=lambda fa: ipaddress.ip_address(fa[1]).is_loopback)
    for family, addr in addrs:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
                return addr
            except OSError:
                continue
    return ""


def default_listen(exporters: tuple[str, ...]) -> tuple[str, int, str]:
    """(address, port, why) to serve on without --web.listen-address: the first of the inventory's
    ``monitoring.exporter`` entries (the addresses Prometheus scrapes) that names an address of this machine, else
    127.0.0.1:9799 -- never every interface by default."""
    for e in exporters:
        host, _, port = e.rpartition(":")
        host = host.strip("[]")
        addr = _local(host) if port.isdigit() and host else ""
        if addr:
            return addr, int(port), f"monitoring.exporter {e}"
    return "127.0.0.1", DEFAULT_PORT, "no monitoring.exporter entry is an address of this host"


def parse_listen(value: str, flag: str = "--web.listen-address") -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{flag}: expected host:port (e.g. 127.0.0.1:{DEFAULT_PORT}), got {value!r}")
    return host, int(port)


@dataclass
class _Conn:
    peer: str
    sock: socket.socket
    task: asyncio.Task[None] | None = None
    transport: asyncio.BaseTransport | None = None
    phase: str = "head"  # head (before its request: idle or slow), work (its scrape runs), write (answering)

    def drop(self) -> None:
        """Close now, whatever phase it is in (a handshake in flight is cancelled, which closes it)."""
        self.phase = "gone"
        if self.transport is not None:
            self.transport.abort()  # type: ignore[attr-defined]
        elif self.task is not None:
            self.task.cancel()

    def done(self, _task: object) -> None:
        if self.transport is None:  # never wrapped (cancelled before or during the handshake): ours to close
            self.sock.close()


@dataclass
class Stats:
    """Counters a test (and a curious admin, through a debugger) can read."""

    accepted: int = 0
    evicted: int = 0
    timed_out: int = 0
    refused_auth: int = 0
    busy: int = 0
    peak_open: int = 0
    by_status: Counter[int] = field(default_factory=Counter)


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable", 505: "HTTP Version Not Supported"}


class Server:
    """``Server(handler, host, port)``: binds at once (so port 0 and a taken port show here), then
    ``serve_forever()`` runs the loop until ``shutdown()`` from another thread. ``handler()`` returns
    (content type, body bytes) for /metrics, on a worker thread."""

    def __init__(self, handler: Callable[[], tuple[str, bytes]], host: str, port: int,
                 web: WebConfig | None = None, limits: Limits | None = None):
        self.handler, self.web, self.limits = handler, web or WebConfig(), limits or Limits()
        self.max_connections = min(self.limits.max_connections, fd_room())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=128)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self.stats = Stats()
        self._conns: dict[int, _Conn] = {}
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="scrape")
        self._auth_pool = ThreadPoolExecutor(self.limits.auth_workers, thread_name_prefix="bcrypt")
        self._queued = 0
        self._auth_queued = 0
        self._good_creds: set[bytes] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._done = threading.Event()

    # --- lifecycle ----------------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._done.set()

    def shutdown(self) -> None:
        self._started.wait()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._done.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._auth_pool.shutdown(wait=False, cancel_futures=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # SIGTERM (systemd's stop) and SIGINT end the loop like shutdown(): the CLI's handler raises Interrupted
        # wherever the main thread is, here inside a transport's send, and asyncio.run's cleanup printed that
        # task's traceback on every stop. Only the main thread may set them (a test's server thread keeps the CLI's).
        signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
        for sig in signals:
            self._loop.add_signal_handler(sig, self._stop.set)
        accept = asyncio.ensure_future(self._accept())
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            for sig in signals:
                self._loop.remove_signal_handler(sig)
            accept.cancel()
            for c in list(self._conns.values()):
                c.drop()
            pending = [c.task for c in self._conns.values() if c.task is not None]
            if pending:
                await asyncio.wait(pending, timeout=2)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(self.socket)
            except OSError:  # EMFILE/ENFILE despite the cap (another part of the process holds fds): breathe
                await asyncio.sleep(0.05)
                continue
            sock.setblocking(False)
            conn = _Conn(str(addr[0]) if isinstance(addr, tuple) else str(addr), sock)
            conn.task = asyncio.ensure_future(self._client(conn))
            conn.task.add_done_callback(conn.done)
            self._admit(conn)
            # sock_accept returns at once while the backlog holds connections, without yielding: under a connect
            # flood this loop accepted up to the fd limit before the connections it evicted could run their close
            await asyncio.sleep(0)

    # --- one connection -----------------------------------------------------------------------------------

    def _admit(self, conn: _Conn) -> None:
        self._conns[id(conn)] = conn
        self.stats.accepted += 1
        over = len(self._conns) - self.max_connections
        if over > 0:
            # the oldest connections still before their request (else the oldest still taking their answer) of
            # the peer holding the most: a flood evicts its own; a scrape in progress is never cut
            waiting = ([c for c in self._conns.values() if c.phase == "head" and c is not conn]
                       or [c for c in self._conns.values() if c.phase == "write"] or [conn])
            per_peer = Counter(c.peer for c in waiting)
            top = max(per_peer.values())
            for c in [c for c in waiting if per_peer[c.peer] == top][:over]:  # dicts keep accept order
                c.drop()
                self._conns.pop(id(c), None)
                self.stats.evicted += 1
        self.stats.peak_open = max(self.stats.peak_open, len(self._conns))

    async def _client(self, conn: _Conn) -> None:
        try:
            await asyncio.wait_for(self._serve(conn), self.limits.request_timeout_s * 2 + 1)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.TimeoutError):
            pass
        finally:
            self._conns.pop(id(conn), None)
            # a client gone before its request (EOF, a reset, a TLS error) or cut at the deadline leaves the
            # transport open: left to the garbage collector, its fd outlived the cap (a connect-and-close flood from
            # one host held the process at its fd limit and no scrape got through)
            if conn.transport is not None and not conn.transport.is_closing():
                conn.transport.abort()  # type: ignore[attr-defined]

    async def _serve(self, conn: _Conn) -> None:
        lim = self.limits
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=lim.max_header_bytes)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            head = await asyncio.wait_for(self._head(conn, reader, protocol), lim.request_timeout_s)
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            head = None
        except asyncio.LimitOverrunError:
            head = b""
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return
        if conn.transport is None:  # timed out (or refused) in the handshake
            return
        writer = asyncio.StreamWriter(conn.transport, protocol, reader, loop)  # type: ignore[arg-type]
        try:
            conn.phase = "write"
            if head is None:
                await self._answer(writer, 408, b"request timeout\n")
            elif head == b"":
                await self._answer(writer, 431, b"request head too large\n")
            elif self.web.allowed_sans and not self._san_allowed(writer):
                self.stats.refused_auth += 1
                await self._answer(writer, 403, b"client certificate SAN not allowed\n")
            else:
                conn.phase = "work"
                status, body, ctype = await self._respond(head)
                conn.phase = "write"
                await self._answer(writer, status, body, ctype)
        finally:
            writer.close()

    async def _head(self, conn: _Conn, reader: asyncio.StreamReader, protocol: asyncio.StreamReaderProtocol) -> bytes:
        loop = asyncio.get_running_loop()
        conn.transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, conn.sock, ssl=self.web.tls,
            ssl_handshake_timeout=self.limits.request_timeout_s if self.web.tls is not None else None)
        return await reader.readuntil(b"\r\n\r\n")

    def _san_allowed(self, writer: asyncio.StreamWriter) -> bool:
        cert = writer.get_extra_info("peercert") or {}
        names = {v for _k, v in cert.get("subjectAltName", ())}
        return bool(names & set(self.web.allowed_sans))

    async def _respond(self, head: bytes) -> tuple[int, bytes, str]:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request line\n", "text/plain"
        method, target, version = parts
        if version not in (b"HTTP/1.0", b"HTTP/1.1"):
            return 505, b"HTTP/1.0 or HTTP/1.1 only\n", "text/plain"
        try:
            headers = parse_headers(io.BytesIO(b"\r\n".join(lines[1:])))
        except Exception:  # noqa: BLE001 - http.client's own errors for a malformed head
            return 400, b"bad headers\n", "text/plain"
        if method not in (b"GET", b"HEAD"):
            return 405, b"GET only\n", "text/plain"
        if self.web.users and not await self._authorized(headers.get("Authorization", "")):
            self.stats.refused_auth += 1
            return 401, b"unauthorized\n", "text/plain"
        if target.split(b"?")[0] not in (b"/metrics", b"/"):
            return 404, b"not found\n", "text/plain"
        if self._queued >= self.limits.max_queued:
            self.stats.busy += 1
            return 503, b"busy\n", "text/plain"
        self._queued += 1
        try:
            ctype, body = await asyncio.get_running_loop().run_in_executor(self._pool, self.handler)
        except Exception:  # noqa: BLE001 - a failing handler is a 500, never a dead server
            return 500, b"scrape failed\n", "text/plain"
        finally:
            self._queued -= 1
        return 200, (b"" if method == b"HEAD" else body), ctype

    async def _authorized(self, value: str) -> bool:
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hashes = dict(self.web.users)
        key = hashlib.sha256(b"\0".join((user.encode(), hashes.get(user, b""), password.encode()))).digest()
        if any(hmac.compare_digest(key, k) for k in self._good_creds):
            return True
        if self._auth_queued >= self.limits.max_queued:
            return False
        self._auth_queued += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(
                self._auth_pool, _bcrypt_ok, password.encode(), hashes.get(user, _DUMMY_HASH))
        finally:
            self._auth_queued -= 1
        if ok and user in hashes:
            if len(self._good_creds) > 64:
                self._good_creds.clear()
            self._good_creds.add(key)
            return True
        return False

    async def _answer(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                      ctype: str = "text/plain") -> None:
        self.stats.by_status[status] += 1
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}", "Connection: close"]
        if status == 401:
            head.append('WWW-Authenticate: Basic realm="slurmkit exporter"')
        head += [f"{k}: {v}" for k, v in self.web.headers]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        # a client that never reads is cut too
        await asyncio.wait_for(writer.drain(), self.limits.request_timeout_s)


def _bcrypt_ok(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:
        return False
