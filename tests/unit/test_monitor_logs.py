"""Log shipping and retention (issue 35 item 4, slurmkit/monitor/logs.py), judged by the real programs Debian has:
rsyslogd reads the generated drop-in (-N1), tails real files and forwards them, with the hooks' syslog lines, to a
TCP collector of this test, each line with cluster, node, daemon and the right job id (a job name that says
JobId=999 does not pick it); logrotate rotates the files by day, keeps retention_days, and its postrotate sends
SIGUSR2 to the daemon that writes the file (inside a PID namespace of the test: no other process is signalled).
Grafana Alloy, promtail and Fluent Bit are neither in Debian 12/13 nor on PyPI: their configs are checked here by
what they say (the job-id expressions on the same lines, the labels, the URL), not by their own binaries."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor import logs
from tests.conftest import ROOT, free_tcp_port, needs

LINES = {
    "slurmctld": ["[2026-12-04T10:00:00.001] _slurm_rpc_submit_batch_job: JobId=42 InitPrio=4294901759 usec=310",
                  # a job name is the user's text: the first JobId= is slurmctld's own
                  "[2026-12-04T10:00:01.002] _job_complete: JobId=44 WEXITSTATUS 0 name=JobId=999",
                  "[2026-12-04T10:00:02.003] sched: Allocate JobId=45 NodeList=gpu[01-02] #CPUs=4 Partition=gpu"],
    "slurmd": ["[2026-12-04T10:00:03.004] [43.extern] task/cgroup: _memcg_initialize: job: alloc=15500MB",
               "[2026-12-04T10:00:04.005] [43.0] done with step JobId=999",
               "[2026-12-04T10:00:05.006] CPUs=2 Boards=1 Sockets=2 Cores=1 Threads=1 Memory=24105"],
}
WANT_JOB = {"_slurm_rpc_submit_batch_job": "42", "_job_complete": "44", "sched: Allocate": "45",
            "task/cgroup": "43", "done with step": "43", "CPUs=2": ""}


def inv(tmp_path: Path | None = None, **logcfg) -> dict:
    d = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    d["monitoring"] = {"logs": logcfg}
    if tmp_path is not None:
        d["slurm_conf"] = {"SlurmctldLogFile": str(tmp_path / "slurmctld.log"),
                           "SlurmdLogFile": str(tmp_path / "slurmd-%n.log")}
    return d


def test_the_inventory_names_each_bad_value_by_its_key() -> None:
    for bad, where in (({"loki": "loki:3100"}, "monitoring.logs.loki"),
                       ({"loki": 'http://x/"}'}, "monitoring.logs.loki"),
                       ({"syslog": "collector"}, "monitoring.logs.syslog"),
                       ({"syslog": "collector:70000"}, "monitoring.logs.syslog"),
                       ({"retention_days": 0}, "monitoring.logs.retention_days"),
                       ({"retain": 7}, "monitoring.logs")):
        with pytest.raises(InventoryError) as e:
            load_cluster_dict(inv(**bad))
        assert where in str(e.value) and "\n" not in str(e.value), (bad, str(e.value))


def test_the_files_are_those_the_generated_slurm_conf_names(tmp_path: Path) -> None:
    c = load_cluster_dict(inv(tmp_path, loki="http://loki:3100/loki/api/v1/push"))
    got = {f.daemon: f.path for f in logs.log_files(c)}
    # slurm.conf(5): %n in SlurmdLogFile is the node's name: every node's file
    assert got["slurmctld"] == str(tmp_path / "slurmctld.log")
    assert got["slurmd"] == str(tmp_path / "slurmd-*.log")
    assert set(logs.files(c)) == {"logrotate-slurmkit", "slurmkit.alloy", "promtail.yaml", "fluent-bit.conf",
                                  "parsers-slurmkit.conf"}
    default = load_cluster_dict(inv())
    assert {f.path for f in logs.log_files(default)} >= {"/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log"}
    assert set(logs.files(default)) == {"logrotate-slurmkit"}  # no shipper named: only the local retention


def _job_of(exprs: list[str], line: str) -> str:
    """As Alloy's and promtail's regex stages do: each in turn, a later match overwriting an earlier one."""
    job = ""
    for e in exprs:
        m = re.search(e, line)
        if m:
            job = m.group("job_id")
    return job


def test_the_loki_shippers_take_the_job_id_from_slurms_own_positions() -> None:
    c = load_cluster_dict(inv(loki="https://loki.example.org:3100/loki/api/v1/push"))
    alloy = logs.alloy(c)
    # Alloy's string literals are JSON's: read each expression back as Alloy would
    exprs = [json.loads(m) for m in re.findall(r'expression = ("(?:[^"\\]|\\.)*")', alloy)]
    prom = yaml.safe_load(logs.promtail(c))
    stages = prom["scrape_configs"][0]["pipeline_stages"]
    assert [s["regex"]["expression"] for s in stages if "regex" in s] == exprs
    assert {"structured_metadata": {"job_id": None}} in stages  # the job id is no label
    fb_conf, fb_parsers = logs.fluent_bit(c)
    fb = [ln.split(None, 1)[1].replace("(?<job_id>", "(?P<job_id>") for ln in fb_parsers.splitlines()
          if ln.strip().startswith("Regex ")]
    assert fb == exprs
    for line in LINES["slurmctld"] + LINES["slurmd"]:
        key = next(k for k in WANT_JOB if k in line)
        assert _job_of(exprs, line) == WANT_JOB[key], line
    assert alloy.count("{") == alloy.count("}")
    assert '"node" = constants.hostname' in alloy and '"cluster" = "lab"' in alloy.replace(c.name, "lab")
    assert 'url = "https://loki.example.org:3100/loki/api/v1/push"' in alloy
    assert prom["clients"] == [{"url": "https://loki.example.org:3100/loki/api/v1/push"}]
    assert {"Host loki.example.org", "Port 3100", "Tls On", "Uri /loki/api/v1/push"} <= {
        ln.strip() for ln in fb_conf.splitlines()}
    assert prom["scrape_configs"][1]["journal"]["matches"] == "SYSLOG_IDENTIFIER=slurmkit"


class Collector:
    """A TCP syslog collector on loopback (RFC 6587 octet counting), as a central rsyslog or syslog-ng would be."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_server(("127.0.0.1", port))
        self.messages: list[str] = []
        self.buf = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while chunk := conn.recv(65536):
                    self.buf += chunk
                    while b" " in self.buf:
                        n, _, rest = self.buf.partition(b" ")
                        if not n.isdigit() or len(rest) < int(n):
                            break
                        self.messages.append(rest[:int(n)].decode())
                        self.buf = rest[int(n):]

    def close(self) -> None:
        self.sock.close()


def _sd(msg: str) -> dict[str, str]:
    m = re.search(r"\[slurmkit@32473 ([^\]]*)\]", msg)
    assert m, msg
    return dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))


@needs(shutil.which("rsyslogd") is not None, "rsyslogd (Debian's rsyslog; tests/setup-env.sh installs it)")
def test_rsyslog_ships_every_line_with_node_daemon_and_job(tmp_path: Path) -> None:
    port = free_tcp_port(3950)
    c = load_cluster_dict(inv(tmp_path, syslog=f"127.0.0.1:{port}"))
    drop_in = tmp_path / "60-slurmkit.conf"
    drop_in.write_text(logs.files(c)["60-slurmkit.conf"])
    work = tmp_path / "work"
    work.mkdir()
    sock = tmp_path / "log.sock"
    # the site's main rsyslog.conf: its own inputs (here a syslog socket of the test's), then rsyslog.d/*
    main = tmp_path / "rsyslog.conf"
    main.write_text(f'global(workDirectory="{work}")\nmodule(load="imuxsock" SysSock.Use="off")\n'
                    f'input(type="imuxsock" Socket="{sock}")\ninclude(file="{drop_in}")\n')
    check = subprocess.run(["rsyslogd", "-N1", "-f", str(main)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    (tmp_path / "slurmctld.log").write_text("")
    (tmp_path / "slurmd-node1.log").write_text("")
    coll = Collector(port)
    rs = subprocess.Popen(["rsyslogd", "-n", "-f", str(main), "-i", str(tmp_path / "rsyslogd.pid")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # imfile has taken the files' current ends (freshStartTail)
        with open(tmp_path / "slurmctld.log", "a") as f:
            f.write("\n".join(LINES["slurmctld"]) + "\n")
        with open(tmp_path / "slurmd-node1.log", "a") as f:
            f.write("\n".join(LINES["slurmd"]) + "\n")
        # the hooks' line as slurmkit/health/output.py to_syslog sends it (ident slurmkit, LOG_PID, facility daemon)
        hook = "slurmkit health node1: FAIL action=drain exit=0 12ms - ecc: nvidia3@17:00.0 3 uncorrected"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(f"<27>slurmkit[4242]: {hook}".encode(), str(sock))
        want = len(LINES["slurmctld"]) + len(LINES["slurmd"]) + 1
        deadline = time.monotonic() + 20
        while len(coll.messages) < want and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        rs.send_signal(signal.SIGTERM)
        out = rs.communicate(timeout=20)[0].decode(errors="replace")
        coll.close()
    assert len(coll.messages) == want, (coll.messages, out)
    host = socket.gethostname()
    for msg in coll.messages:
        sd = _sd(msg)
        assert sd["cluster"] == c.name and sd["node"] == host, msg
        if "slurmkit health" in msg:
            assert sd["daemon"] == "slurmkit" and sd["job_id"] == "" and msg.endswith(hook), msg
            continue
        key = next(k for k in WANT_JOB if k in msg)
        assert sd["job_id"] == WANT_JOB[key], msg
        assert sd["daemon"] == ("slurmctld" if "_rpc_" in msg or "_job_" in msg or "sched:" in msg else "slurmd")
        assert msg.startswith("<30>1 ") and re.search(r"\] \[[0-9-]+T", msg), msg  # daemon.info, the line whole


@needs(shutil.which("logrotate") is not None, "logrotate (Debian's; tests/setup-env.sh installs it)")
def test_logrotate_keeps_retention_days_and_tells_the_daemon(tmp_path: Path) -> None:
    c = load_cluster_dict(inv(tmp_path, retention_days=3))
    conf = tmp_path / "logrotate-slurmkit"
    conf.write_text(logs.files(c, state_dir=str(tmp_path / "state-dir"))["logrotate-slurmkit"])
    conf.chmod(0o644)  # logrotate refuses a config others may write
    check = subprocess.run(["logrotate", "-d", "-s", str(tmp_path / "state"), str(conf)], capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0 and "error" not in check.stderr.lower(), check.stdout + check.stderr
    ctld = tmp_path / "slurmctld.log"
    ctld.write_text("line\n")
    hist = tmp_path / "state-dir" / "node1" / "history.jsonl"  # the hooks' run history, as state.py writes it
    hist.parent.mkdir(parents=True)
    hist.write_text('{"hook":"health"}\n')
    hist.chmod(0o600)
    fake = tmp_path / "slurmctld"  # a process whose name is slurmctld's, in the test's own PID namespace
    shutil.copy("/bin/sleep", fake)
    script = (f"{fake} 60 & pid=$!; sleep 0.2; logrotate -f -s {tmp_path / 'state'} {conf}; rc=$?; "
              "wait $pid; echo logrotate=$rc daemon=$?")
    res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script], capture_output=True,
                         text=True, timeout=60)
    # the daemon got SIGUSR2 (12): sleep dies of it, 128 + 12
    assert "logrotate=0 daemon=140" in res.stdout, res.stdout + res.stderr
    rotated = [p.name for p in tmp_path.iterdir() if p.name.startswith("slurmctld.log-")]
    assert len(rotated) == 1 and rotated[0][len("slurmctld.log-"):].isdigit(), rotated  # dateext
    kept = [p for p in hist.parent.iterdir() if p.name.startswith("history.jsonl-")]
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600, kept  # its mode kept: no wider copy
    assert not hist.exists()  # nocreate: the next hook run creates it with its own mode
    text = conf.read_text()
    assert "rotate 3" in text and "maxage 3" in text and "daily" in text
    assert os.path.exists(ctld) is False or ctld.read_text() == ""


def test_monitor_generate_writes_the_log_files_beside_prometheus(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from slurmkit.cli.main import cli

    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(syslog="logs.example.org:6514", loki="http://loki:3100/loki/api/v1/push")))
    res = CliRunner().invoke(cli, ["monitor", "generate", str(p), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert sorted(x.name for x in (tmp_path / "out" / "logs").iterdir()) == [
        "60-slurmkit.conf", "fluent-bit.conf", "logrotate-slurmkit", "parsers-slurmkit.conf", "promtail.yaml",
        "slurmkit.alloy"]
    assert (tmp_path / "out" / "prometheus.yml").is_file()
    assert f"wrote {tmp_path / 'out'}/logs/60-slurmkit.conf" in res.output


def test_without_the_sdk_generate_writes_all_but_the_dashboards_and_says_so(tmp_path: Path, monkeypatch) -> None:
    """The monitor extra's SDK needs Python 3.11+ (Requires-Python), slurmkit 3.10+: where it is missing, the
    scrape config, the rules and logs/ are written and the CLI says how to get the dashboards."""
    import sys

    from click.testing import CliRunner

    from slurmkit.cli.main import cli

    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk", None)  # import raises ImportError
    for k in [k for k in sys.modules if k.startswith("grafana_foundation_sdk.")]:
        monkeypatch.delitem(sys.modules, k)
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv()))
    res = CliRunner().invoke(cli, ["monitor", "generate", str(p), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    names = sorted(x.name for x in (tmp_path / "out").iterdir() if x.is_file())
    assert "prometheus.yml" in names and not any(n.startswith("dashboard-") for n in names), names
    assert "pip install 'slurmkit[monitor]', Python 3.11+" in res.output
