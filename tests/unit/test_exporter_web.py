"""The exporter's HTTP server against the network (issue 32 item 5): idle and slow connections, a flood under the
1,024-fd limit systemd gives a service, TLS and client certificates, basic auth, the default bind address, and the
per-user label policy under PrivateData. Everything here runs without a Slurm lab (fake scontrol/squeue on PATH
for the CLI, an in-process server otherwise); tests/security/test_exporter.py plays the same against a lab."""

from __future__ import annotations

import base64
import os
import resource
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from slurmkit.errors import UsageError
from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor.exporter import Scraper, label_policy, private_data, render, serve
from slurmkit.monitor.web import Limits, Server, default_listen, load_web_config
from tests.conftest import DATA, ROOT, needs
from tests.unit.test_monitor_exporter import job, lab_cluster, node
from tests.unit.test_monitor_textfile import find, samples

FD_LIMIT = 1024  # systemd's default LimitNOFILE soft limit for a service
IDLE = 1100


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def fake_slurm(tmp_path: Path, private: str = "none") -> dict[str, str]:
    """PATH with scontrol/squeue/sinfo printing recorded lab output (show config: PrivateData = ``private``)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    nodes, jobs = DATA / "slurm" / "scontrol_show_node.txt", DATA / "slurm" / "scontrol_show_job.txt"
    (bindir / "scontrol").write_text(
        f"#!/bin/sh\ncase \"$*\" in *config*) echo 'ClusterName = lab'; echo 'PrivateData = {private}';; "
        f"*node*) cat {nodes};; *job*) cat {jobs};; *) echo 'slurm 22.05.8';; esac\n")
    (bindir / "sinfo").write_text("#!/bin/sh\necho 'slurm 22.05.8'\n")
    (bindir / "squeue").write_text(f"#!/bin/sh\ncat {DATA / 'slurm' / 'squeue_live_jobs.txt'}\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}


def inventory(tmp_path: Path, **monitoring: object) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    doc.setdefault("monitoring", {}).update(monitoring)
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(doc))
    return inv


def limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def start_exporter(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                   inv: Path | None = None) -> subprocess.Popen:
    log = open(tmp_path / "exporter.log", "wb")  # noqa: SIM115 - the child's
    p = subprocess.Popen([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(inv or inventory(tmp_path)),
                          *args], stdout=log, stderr=log, env=env or fake_slurm(tmp_path), cwd=ROOT,
                         preexec_fn=limit_fds)
    log.close()
    return p


def wait_listening(host: str, port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exporter exited {proc.returncode}: {log.read_text()}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"exporter not listening on {host}:{port}: {log.read_text()}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def hold_idle(host: str, port: int, n: int, source: str = "", wait_s: float = 120) -> list[socket.socket]:
    """``n`` connected sockets that never send a byte (what a user's script leaves), one after another (a
    thread-per-connection server takes them in until its fds run out); a connect not taken within 0.5 s is tried
    again, for ``wait_s`` at most."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
    held: list[socket.socket] = []
    deadline = time.monotonic() + wait_s
    while len(held) < n and time.monotonic() < deadline:
        s = socket.socket()
        if source:
            s.bind((source, 0))
        s.settimeout(0.5)
        try:
            s.connect((host, port))
        except OSError:
            s.close()
            continue
        held.append(s)
    return held


def scrape(url: str, timeout: float = 2.0, **kw: object) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=kw.pop("headers", {}))  # type: ignore[arg-type]
    try:
        with urllib.request.urlopen(req, timeout=timeout, **kw) as r:  # type: ignore[arg-type]  # noqa: S310
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def settle(pid: int, timeout: float = 90) -> None:
    """Until the process's fd count has not moved for 2 s: it has accepted what it will of a flood."""
    last, still, deadline = -1, 0, time.monotonic() + timeout
    while still < 4 and time.monotonic() < deadline:
        n = len(os.listdir(f"/proc/{pid}/fd"))
        still = still + 1 if n == last else 0
        last = n
        time.sleep(0.5)


def proc_counts(pid: int) -> tuple[int, int]:
    threads = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Threads:"))
    return len(os.listdir(f"/proc/{pid}/fd")), threads


# --- the flood, the slow client, the oversized head ---------------------------------------------------------


def test_1100_idle_connections_under_a_1024_fd_limit_leave_the_scrape_answered(tmp_path):
    """The real `slurmkit exporter` under RLIMIT_NOFILE 1024 (systemd's default) with 1,100 connections held
    open that never send a byte: /metrics answers within Prometheus-style 2 s, and the exporter's fds and threads
    stay bounded (before: a thread and an fd per connection until accept failed with EMFILE; the scrape timed out)."""
    port = free_port()
    p = start_exporter(tmp_path, "--listen", f"127.0.0.1:{port}", "--cache", "60")
    socks: list[socket.socket] = []
    try:
        wait_listening("127.0.0.1", port, p, tmp_path / "exporter.log")
        socks = hold_idle("127.0.0.1", port, IDLE)
        settle(p.pid)  # the exporter has taken in all it will of the flood
        status, body = scrape(f"http://127.0.0.1:{port}/metrics", timeout=2)
        assert status == 200 and b"slurmkit_exporter_up 1" in body
        assert len(socks) == IDLE  # every connect succeeded: the server kept accepting
        fds, threads = proc_counts(p.pid)
        print(f"exporter with {len(socks)} idle connections held: {fds} fds, {threads} threads")
        assert fds < FD_LIMIT - 64 and threads < 32, (fds, threads)
    finally:
        for s in socks:
            s.close()
        stop(p)


def test_slowloris_is_cut_at_the_request_deadline(tmp_path):
    """A client that trickles its request head one byte at a time is answered 408 and closed at
    --web.request-timeout from connect, not when it stops sending."""
    port = free_port()
    p = start_exporter(tmp_path, "--listen", f"127.0.0.1:{port}", "--web.request-timeout", "1")
    try:
        wait_listening("127.0.0.1", port, p, tmp_path / "exporter.log")
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        got = b""
        s.settimeout(0.2)
        try:
            for ch in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200:
                try:
                    s.send(bytes([ch]))
                except OSError:
                    break
                try:
                    chunk = s.recv(4096)
                    got += chunk
                    if not chunk:
                        break
                except TimeoutError:
                    continue
            else:
                raise AssertionError("the server still read a trickled head after 200+ bytes at 0.2 s each")
        finally:
            s.close()
        assert got.startswith(b"HTTP/1.1 408"), got
    finally:
        stop(p)


class Backend:
    def __init__(self, config: str | None = None, fail_config: bool = False):
        self.config, self.fail_config = config, fail_config

    def nodes(self):
        return [node("node1", "allocated", used=8)]

    def jobs(self):
        return [job("1", "RUNNING", "team-a", user="alice"), job("2", "PENDING", "team-a", user="bob",
                                                                 reason="Resources")]


class ConfigBackend(Backend):
    def show_config(self) -> str:
        if self.fail_config:
            raise RuntimeError("slurmctld down")
        return f"ClusterName = lab\nPrivateData             = {self.config}\n"


def server(web=None, limits=None, scraper=None) -> tuple[Server, str]:
    srv = serve(scraper or Scraper(lab_cluster(), Backend(), cache_s=60), "127.0.0.1", 0, web, limits)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"127.0.0.1:{srv.server_address[1]}"


def close(srv: Server) -> None:
    srv.shutdown()
    srv.server_close()


def test_oversized_head_bad_method_and_unknown_path():
    srv, addr = server(limits=Limits(max_header_bytes=1024))
    try:
        host, port = addr.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 431")
        req = urllib.request.Request(f"http://{addr}/metrics", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)  # noqa: S310
        assert e.value.code == 405
        assert scrape(f"http://{addr}/nope", timeout=5)[0] == 404
        status, body = scrape(f"http://{addr}/metrics", timeout=5)
        assert status == 200 and b"slurmkit_exporter_up 1" in body
    finally:
        close(srv)


def test_a_flood_from_one_host_evicts_its_own_connections_not_another_hosts():
    """Over max_connections the oldest idle connection of the peer holding the most is closed: a scrape client
    that connected before a flood from another address (127.0.0.2 here) still gets its answer."""
    srv, addr = server(limits=Limits(max_connections=50))
    host, port = addr.split(":")
    socks: list[socket.socket] = []
    try:
        scraper = socket.create_connection((host, int(port)), timeout=5)  # Prometheus, connected first
        time.sleep(0.2)
        socks = hold_idle(host, int(port), 300, source="127.0.0.2")
        time.sleep(0.5)
        scraper.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := scraper.recv(65536):
            got += chunk
        scraper.close()
        assert got.startswith(b"HTTP/1.1 200") and b"slurmkit_exporter_up 1" in got, got[:200]
        assert srv.stats.evicted >= 250 and srv.stats.peak_open <= 51, srv.stats
    finally:
        for s in socks:
            s.close()
        close(srv)


# --- TLS, client certificates, basic auth (exporter-toolkit's web config) ---------------------------------------


def make_cert(d: Path, name: str, san: str) -> tuple[Path, Path]:
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, timeout=30)
    return crt, key


def web_config(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "web.yml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


@needs(shutil.which("openssl") is not None, "openssl not installed")
def test_tls_and_verified_client_certificates(tmp_path):
    crt, key = make_cert(tmp_path, "server", "IP:127.0.0.1")
    ccrt, ckey = make_cert(tmp_path, "prometheus", "DNS:prometheus")
    other_crt, other_key = make_cert(tmp_path, "other", "DNS:someone")
    web = load_web_config(web_config(tmp_path, {"tls_server_config": {
        "cert_file": str(crt), "key_file": key.name,  # relative: to the config file's directory, as the toolkit
        "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(ccrt),
        "client_allowed_sans": ["prometheus"]}}))
    srv, addr = server(web)
    try:
        ctx = ssl.create_default_context(cafile=str(crt))
        ctx.load_cert_chain(str(ccrt), str(ckey))
        status, body = scrape(f"https://{addr}/metrics", timeout=5, context=ctx)
        assert status == 200 and b"slurmkit_exporter_up 1" in body
        bare = ssl.create_default_context(cafile=str(crt))  # no client certificate: the handshake fails
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            scrape(f"https://{addr}/metrics", timeout=5, context=bare)
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to the TLS port
            scrape(f"http://{addr}/metrics", timeout=5)
    finally:
        close(srv)
    # a certificate the CA signed (here: the CA) but without an allowed SAN
    web2 = load_web_config(web_config(tmp_path, {"tls_server_config": {
        "cert_file": str(crt), "key_file": str(key), "client_auth_type": "RequireAndVerifyClientCert",
        "client_ca_file": str(other_crt), "client_allowed_sans": ["prometheus"]}}))
    srv, addr = server(web2)
    try:
        ctx = ssl.create_default_context(cafile=str(crt))
        ctx.load_cert_chain(str(other_crt), str(other_key))
        assert scrape(f"https://{addr}/metrics", timeout=5, context=ctx)[0] == 403
    finally:
        close(srv)


def test_basic_auth_with_bcrypt_hashes_and_headers(tmp_path):
    bcrypt = pytest.importorskip("bcrypt")
    h = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web = load_web_config(web_config(tmp_path, {
        "basic_auth_users": {"prometheus": h},
        "http_server_config": {"http2": True, "headers": {"X-Frame-Options": "deny", "X-XSS-Protection": ""}}}))
    assert web.authenticated
    srv, addr = server(web)

    def auth(user: str, pw: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}

    try:
        req = urllib.request.Request(f"http://{addr}/metrics")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)  # noqa: S310
        assert e.value.code == 401 and e.value.headers["WWW-Authenticate"].startswith("Basic")
        assert e.value.headers["X-Frame-Options"] == "deny" and "X-XSS-Protection" not in e.value.headers
        assert scrape(f"http://{addr}/metrics", 5, headers=auth("prometheus", "wrong"))[0] == 401
        assert scrape(f"http://{addr}/metrics", 5, headers=auth("nobody", "s3cret"))[0] == 401
        assert scrape(f"http://{addr}/metrics", 5, headers={"Authorization": "Basic !!!"})[0] == 401
        for _ in range(2):  # the second is answered from the cache of good credentials
            status, body = scrape(f"http://{addr}/metrics", 5, headers=auth("prometheus", "s3cret"))
            assert status == 200 and b"slurmkit_exporter_up 1" in body
        assert len(srv._good_creds) == 1 and srv.stats.refused_auth == 4
    finally:
        close(srv)


@pytest.mark.parametrize(("doc", "msg"), [
    ({"tls_server_config": {"cert_file": "missing.crt", "key_file": "k"}},
     "tls_server_config.cert_file: /"),
    ({"tls_server_config": {"key_file": "k"}}, "tls_server_config.cert_file: required"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "cipher_suites": ["TLS_AES_128_GCM_SHA256"]}},
     "tls_server_config.cipher_suites: not supported"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "RequireAnyClientCert"}},
     "without verifying it"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "min_version": "TLS9"}},
     "tls_server_config.min_version: 'TLS9'"),
    ({"basic_auth_users": {"prometheus": "plaintext"}}, "basic_auth_users.prometheus: expected a bcrypt hash"),
    ({"http_server_config": {"headers": {"Set-Cookie": "x"}}}, "http_server_config.headers.Set-Cookie: not one of"),
    ({"http_server_config": {"http2": "yes"}}, "http_server_config.http2: expected true or false"),
    ({"rate_limit": {"interval": "1s", "burst": 5}}, "rate_limit: not supported"),
    ({"tls_config": {}}, "tls_config: unknown key"),
    ([1, 2], "expected a mapping"),
])
def test_web_config_errors_name_the_file_and_key(tmp_path, doc, msg):
    tls = doc.get("tls_server_config") if isinstance(doc, dict) else None
    if tls and shutil.which("openssl"):  # "c"/"k": a real certificate and key, so the check under test is reached
        crt, key = make_cert(tmp_path, "server", "IP:127.0.0.1")
        tls.update({k: str(crt if v == "c" else key) for k, v in tls.items() if v in ("c", "k")})
    path = web_config(tmp_path, doc)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as e:
        load_web_config(path)
    assert str(e.value).startswith(f"{path}: ") and msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_basic_auth_without_bcrypt_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bcrypt", None)
    path = web_config(tmp_path, {"basic_auth_users": {"p": "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"}})
    with pytest.raises(UsageError, match=r"basic_auth_users: needs the bcrypt package: pip install"):
        load_web_config(path)


# --- where it listens ---------------------------------------------------------------------------------------


def test_default_bind_is_the_inventorys_exporter_address_or_loopback():
    assert default_listen(())[:2] == ("127.0.0.1", 9799)
    assert default_listen(("192.0.2.1:9799",))[:2] == ("127.0.0.1", 9799)  # TEST-NET-1: not this host
    assert default_listen(("192.0.2.1:9799", "127.0.0.3:9811"))[:2] == ("127.0.0.3", 9811)
    assert default_listen(("localhost:9812",))[1] == 9812


def test_cli_without_listen_binds_the_inventory_address_not_every_interface(tmp_path):
    """`slurmkit exporter INV` with monitoring.exporter [127.0.0.3:P] listens there only (before: 0.0.0.0:9799)."""
    port = free_port("127.0.0.3")
    p = start_exporter(tmp_path, inv=inventory(tmp_path, exporter=[f"127.0.0.3:{port}"]))
    try:
        wait_listening("127.0.0.3", port, p, tmp_path / "exporter.log")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert scrape(f"http://127.0.0.3:{port}/metrics", timeout=5)[0] == 200
    finally:
        stop(p)


# --- per-user labels and PrivateData ------------------------------------------------------------------------


def users_in(text: str) -> set[str]:
    return {dict(lbl)["user"] for (n, lbl), _v in samples(text).items() if n == "slurmkit_jobs"}


def test_private_data_hides_user_labels_and_usage():
    assert private_data("PrivateData             = jobs,usage\n") == {"jobs", "usage"}
    assert private_data("PrivateData = none\n") == frozenset()
    with pytest.raises(ValueError):
        private_data("ClusterName = x\n")
    assert label_policy(None, frozenset()) == (True, True)
    assert label_policy(None, frozenset({"jobs"})) == (False, True)
    assert label_policy(None, frozenset({"users", "usage"})) == (False, False)
    assert label_policy(None, None) == (False, False)  # PrivateData unknown: fail closed
    assert label_policy(True, frozenset({"jobs"})) == (True, True)  # the site's own decision
    assert label_policy(False, frozenset()) == (False, True)
    c = lab_cluster()
    nodes, jobs = Backend().nodes(), Backend().jobs()
    assert users_in(render(c, nodes, jobs, 1e9)) == {"alice", "bob"}
    assert users_in(render(c, nodes, jobs, 1e9, per_user=False)) == {""}
    for config, want in (("none", {"alice", "bob"}), ("jobs", {""}), ("accounts,users", {""}),
                         ("usage", {"alice", "bob"})):
        sc = Scraper(c, ConfigBackend(config), cache_s=0)
        assert users_in(sc.text()) == want, config
    sc = Scraper(c, ConfigBackend(fail_config=True), cache_s=0)
    text = sc.text()
    assert users_in(text) == {""} and 'slurmkit_exporter_query_errors_total{command="config"} 1' in text


def test_inventory_per_user_labels_and_slurm_conf_private_data():
    from slurmkit.lab.inventory import lab_inventory

    def cluster(**kw):
        inv = lab_inventory(8, 8, nodes_per_leaf=4, accounting=True)
        inv.setdefault("monitoring", {}).update(kw.pop("monitoring", {}))
        inv.update(kw)
        return load_cluster_dict(inv)

    nodes, jobs = Backend().nodes(), Backend().jobs()
    # a backend that cannot say (no show_config): the inventory's slurm_conf PrivateData counts
    hidden = cluster(slurm_conf={"PrivateData": "jobs"})
    assert users_in(Scraper(hidden, Backend(), cache_s=0).text()) == {""}
    shown = cluster(slurm_conf={"PrivateData": "jobs"}, monitoring={"per_user_labels": True})
    assert users_in(Scraper(shown, Backend(), cache_s=0).text()) == {"alice", "bob"}
    off = cluster(monitoring={"per_user_labels": False})
    assert users_in(Scraper(off, ConfigBackend("none"), cache_s=0).text()) == {""}
    assert users_in(render(off, nodes, jobs, 1e9)) == {"alice", "bob"}  # render's default is the caller's
    with pytest.raises(UsageError, match=r"monitoring\.per_user_labels: expected auto, true or false"):
        cluster(monitoring={"per_user_labels": "maybe"})


def test_cli_once_under_private_data_jobs_has_no_user_names(tmp_path):
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(inventory(tmp_path)), "--once"],
                       capture_output=True, text=True, env=fake_slurm(tmp_path, "jobs,usage"), timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "slurmkit_jobs{" in r.stdout and not users_in(r.stdout) - {""}, r.stdout
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(inventory(tmp_path)), "--once"],
                       capture_output=True, text=True, env=fake_slurm(tmp_path, "none"), timeout=60, cwd=ROOT)
    assert users_in(r.stdout) - {""}, r.stdout


def test_clients_that_never_read_their_answer_do_not_lock_out_a_scrape():
    """Connections that sent a request for a large answer and never read it (a slow-read attack) are the ones
    closed when the cap is reached, after those still before their request; a new scrape is answered."""
    body = b"x" * (8 << 20)
    srv = Server(lambda: ("text/plain", body), "127.0.0.1", 0, limits=Limits(max_connections=10))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    stalled = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled.append(s)
            time.sleep(0.05)
        status, got = scrape(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert status == 200 and got == body
        assert srv.stats.evicted >= 10, srv.stats
    finally:
        for s in stalled:
            s.close()
        close(srv)


def test_a_silent_connection_is_closed_at_the_deadline_plain_and_tls(tmp_path):
    """No byte at all: 408 and closed at request_timeout_s (plain); a TLS port closes a client that never sends
    its ClientHello at the same deadline (the handshake is inside it)."""
    srv, addr = server(limits=Limits(request_timeout_s=0.5))
    host, port = addr.split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            assert s.recv(100).startswith(b"HTTP/1.1 408")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GARBAGE\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 400")
        assert srv.stats.timed_out == 1
    finally:
        close(srv)
    if not shutil.which("openssl"):
        return
    crt, key = make_cert(tmp_path, "server", "IP:127.0.0.1")
    web = load_web_config(web_config(tmp_path, {"tls_server_config": {"cert_file": str(crt), "key_file": str(key)}}))
    srv, addr = server(web, Limits(request_timeout_s=0.5))
    try:
        with socket.create_connection((host, srv.server_address[1]), timeout=10) as s:
            assert s.recv(100) == b""  # closed, not held
        ctx = ssl.create_default_context(cafile=str(crt))
        assert scrape(f"https://{addr}/metrics", timeout=5, context=ctx)[0] == 200
    finally:
        close(srv)


def test_per_user_labels_forced_on_without_auth_is_warned(tmp_path):
    port = free_port()
    p = start_exporter(tmp_path, "--listen", f"127.0.0.1:{port}", inv=inventory(tmp_path, per_user_labels=True))
    try:
        wait_listening("127.0.0.1", port, p, tmp_path / "exporter.log")
        status, body = scrape(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert status == 200 and users_in(body.decode()) - {""}  # PrivateData=none here, and forced on anyway
    finally:
        stop(p)
    assert "warning: monitoring.per_user_labels: true serves user names" in (tmp_path / "exporter.log").read_text()


def test_clients_gone_before_their_request_leave_no_fd_behind():
    """A client that connects and closes (or resets, or sends half a head and leaves) ends its connection's task
    before any answer: the transport must be closed then, not left to the garbage collector. Before, each one kept
    its fd until a cyclic collection, so a connect-and-close flood from one host held the exporter at its fd limit
    (measured: 1,018 of 1,024 fds open under a 256-connection cap, 0 of 8 scrapes answered in 15 s)."""
    import gc

    srv = Server(lambda: ("text/plain", b"ok 1\n"), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    gc.collect()
    gc.disable()  # what a busy loop's collector does between its runs: nothing, for long enough
    try:
        before = fds()
        for i in range(600):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 3 == 1:
                s.sendall(b"GET /metr")  # half a head, then gone
            elif i % 3 == 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            s.close()
        deadline = time.monotonic() + 10
        while fds() > before + 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # the loop sees each EOF/reset in its own time
        assert fds() <= before + 20, (fds(), before, srv.stats)
        assert scrape(f"http://127.0.0.1:{port}/metrics", timeout=5)[0] == 200
    finally:
        gc.enable()
        close(srv)


_CHURN = """
import socket, sys, time
port, keep, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held, end = [], time.time() + secs
while time.time() < end:
    s = socket.socket(); s.setblocking(False)
    try: s.connect(("127.0.0.1", port))
    except BlockingIOError: pass
    held.append(s)
    if len(held) > keep: held.pop(0).close()
"""


def test_a_connect_flood_keeps_the_open_fds_near_the_cap():
    """sock_accept returns at once while the backlog holds connections, so the accept loop admitted a whole
    backlog (and more) before the connections it evicted ran their close: under a connect-and-hold churn from one
    host the exporter reached its fd limit (1,024 under a 256 cap) and scrapes failed. Each accept now yields."""
    srv = Server(lambda: ("text/plain", b"ok 1\n"), "127.0.0.1", 0, limits=Limits(max_connections=32))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    base = len(os.listdir("/proc/self/fd"))
    flood = subprocess.Popen([sys.executable, "-c", _CHURN, str(port), "600", "4"])
    peak = 0
    try:
        while flood.poll() is None:
            peak = max(peak, len(os.listdir("/proc/self/fd")) - base)
            time.sleep(0.01)
        assert srv.stats.accepted > 200, srv.stats  # the flood was one
        assert peak <= 32 + 24, (peak, srv.stats)
    finally:
        flood.kill()
        flood.wait(10)
        close(srv)


# --- slurmctld hangs; a client goes away mid-answer (issue 35 item 6) -----------------------------------------------


class HangingBackend(Backend):
    """nodes() answers, then blocks (slurmctld hung) until ``release`` is set, or fails (slurmctld down)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.hanging = threading.Event()  # set while a nodes() call is held
        self.hang = self.fail = False

    def nodes(self):
        if self.hang:
            self.hanging.set()
            self.release.wait(30)
            self.hanging.clear()
        if self.fail:
            raise RuntimeError("slurm_load_node error: Unable to contact slurm controller")
        return super().nodes()


def test_slurmctld_hanging_serves_the_last_answer_with_its_age_in_time():
    t = [1000.0]
    b = HangingBackend()
    sc = Scraper(lab_cluster(), b, cache_s=15, clock=lambda: t[0], wait_s=0.5)
    first = samples(sc.text())
    assert find(first, "slurmkit_exporter_up") == [1] and find(first, "slurmkit_exporter_last_success_age_seconds") == [0]
    b.hang = True
    t[0] += 40
    stale = samples(sc.text())
    # answered while the query is still held (bounded by wait_s, not by the hung query): no clock read needed
    assert b.hanging.is_set() and not b.release.is_set()
    assert find(stale, "slurmkit_exporter_up") == [0]
    assert find(stale, "slurmkit_exporter_last_success_age_seconds") == [40]
    # the last answer's series stand (no node's series turns off while slurmctld hangs)
    assert {k: v for k, v in stale.items() if k[0] == "slurmkit_node_state"} == \
           {k: v for k, v in first.items() if k[0] == "slurmkit_node_state"} != {}
    t[0] += 5
    assert find(samples(sc.text()), "slurmkit_exporter_last_success_age_seconds") == [45]  # one batch in flight
    b.release.set()
    b.hang = False
    deadline = time.monotonic() + 10
    while find(samples(sc.text()), "slurmkit_exporter_up") != [1] and time.monotonic() < deadline:
        t[0] += 20
        time.sleep(0.05)
    assert find(samples(sc.text()), "slurmkit_exporter_last_success_age_seconds") == [0]


def test_a_failed_query_keeps_the_last_answer_of_that_query():
    t = [1000.0]
    b = HangingBackend()
    sc = Scraper(lab_cluster(), b, cache_s=15, clock=lambda: t[0])
    first = samples(sc.text())
    b.fail = True
    t[0] += 30
    s = samples(sc.text())
    assert find(s, "slurmkit_exporter_up") == [0] and find(s, "slurmkit_exporter_last_success_age_seconds") == [30]
    assert find(s, "slurmkit_exporter_query_errors_total", command="nodes") == [1]
    assert find(s, "slurmkit_node_state", node="node1") == find(first, "slurmkit_node_state", node="node1") == [1]


def big_slurm(tmp_path: Path, nodes: int = 3000) -> dict[str, str]:
    """fake_slurm, with ``nodes`` nodes in `scontrol show node` (an answer larger than the socket buffers)."""
    env = fake_slurm(tmp_path)
    one = (DATA / "slurm" / "scontrol_show_node.txt").read_text().split("\n\n")[0]
    name = one.split()[0].split("=", 1)[1]
    (tmp_path / "nodes.txt").write_text("\n\n".join(one.replace(name, f"big{i}") for i in range(nodes)) + "\n")
    sc = tmp_path / "bin" / "scontrol"
    sc.write_text(sc.read_text().replace(str(DATA / "slurm" / "scontrol_show_node.txt"), str(tmp_path / "nodes.txt")))
    return env


def _reset_mid_answer(addr: tuple[str, int], tls: ssl.SSLContext | None) -> int:
    """Ask for /metrics with a tiny receive buffer, read a little, then reset the connection (SO_LINGER 0)."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(30)
    raw.connect(addr)
    s = tls.wrap_socket(raw, server_hostname=addr[0]) if tls is not None else raw
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    got = len(s.recv(1000))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return got


@needs(shutil.which("openssl") is not None, "openssl not installed")
def test_a_client_gone_mid_answer_logs_no_traceback_and_the_next_scrape_is_answered(tmp_path):
    crt, key = make_cert(tmp_path, "server", "IP:127.0.0.1")
    env = big_slurm(tmp_path)
    for tls in (False, True):
        port = free_port()
        args = ["--listen", f"127.0.0.1:{port}"]
        ctx = None
        if tls:
            args += ["--web.config.file", web_config(tmp_path, {"tls_server_config": {"cert_file": str(crt),
                                                                                     "key_file": str(key)}})]
            ctx = ssl.create_default_context(cafile=str(crt))
        proc = start_exporter(tmp_path, *args, env=env)
        log = tmp_path / "exporter.log"
        try:
            wait_listening("127.0.0.1", port, proc, log)
            for _ in range(5):
                assert _reset_mid_answer(("127.0.0.1", port), ctx) > 0
            time.sleep(1)
            url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/metrics"
            status, body = scrape(url, timeout=30, context=ctx) if tls else scrape(url, timeout=30)
            assert status == 200 and len(body) > 1 << 20 and b'slurmkit_node_state{node="big2999"' in body
        finally:
            stop(proc)
        text = log.read_text()
        assert "Traceback" not in text and "BrokenPipe" not in text and "Error" not in text, text[-3000:]


def test_once_into_a_closed_pipe_is_no_traceback(tmp_path):
    """`slurmkit exporter --once | head -1`: the reader leaves before the answer is written."""
    env = big_slurm(tmp_path)
    r = subprocess.run(f"{sys.executable} -m slurmkit.cli.main exporter {inventory(tmp_path)} --once | head -c 10",
                       shell=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.stdout == "# HELP slu" and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_scrape_wait_must_be_positive(tmp_path):
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(inventory(tmp_path)),
                        "--scrape-wait", "0", "--once"], capture_output=True, text=True, env=fake_slurm(tmp_path),
                       cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith("--scrape-wait must be positive"), \
        r.stderr
