"""The hooks' textfile: every series from the metric table, the raw per-GPU values, XID counters per code, what
Slurm did with the node; accepted by promtool's linter."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from slurmkit.health.hooks import run_hook
from slurmkit.monitor.metrics import BY_NAME, METRICS, M, table_markdown
from slurmkit.monitor.textfile import drained_by_us
from tests.conftest import ROOT, needs
from tests.unit.test_health_hooks import NVML, FakeSlurm, env, fixture, inventory  # noqa: F401  (fixture)

_SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? (-?[0-9.e+]+)$')


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        key = (m.group(1), labels)
        assert key not in out, f"duplicate series {line}"  # node_exporter refuses a textfile with one
        out[key] = float(m.group(3))
    return out


def find(s: dict, name: str, **want: str) -> list[float]:
    return [v for (n, lbl), v in s.items() if n == name and set(want.items()) <= set(lbl)]


def run(tmp_path, inventory, hook, nvml="healthy-h100x8.json", slurm=None, **kw):  # noqa: F811
    tdir = tmp_path / "tf"
    rep = run_hook(env(tmp_path, inventory, slurm or FakeSlurm(), hook, nvml=nvml, textfile_dir=str(tdir), **kw))
    return rep, (tdir / f"slurmkit_health_{hook}.prom").read_text()


def test_table_follows_prometheus_conventions():
    for m in METRICS:
        assert m.name.startswith("slurmkit_") and re.fullmatch(r"[a-z_]+", m.name), m.name
        assert (m.type == "counter") == m.name.endswith("_total"), m.name
        assert m.type in ("gauge", "counter") and m.help.endswith((".", ")")), m.name
    assert len(BY_NAME) == len(METRICS)
    assert (ROOT / "docs" / "metrics.md").read_text().endswith(table_markdown())  # the doc is the table


def test_health_textfile_has_raw_gpu_values_and_only_table_metrics(tmp_path, inventory):  # noqa: F811
    rep, text = run(tmp_path, inventory, "health", slurm=FakeSlurm(state="IDLE"))
    s = samples(text)
    assert {n for n, _ in s} <= set(BY_NAME)
    temps = find(s, M.temperature.name, node="node1")
    assert sorted(temps) == sorted(d["temperature_c"] for d in json.loads((NVML / "healthy-h100x8.json").read_text())["devices"])
    gpu5 = dict(next(lbl for n, lbl in s if n == M.gpu_info.name and ("minor", "5") in lbl))
    assert gpu5["uuid"].startswith("GPU-") and gpu5["pci_bus_id"] == "00000000:AB:00.0" and "H100" in gpu5["model"]
    assert find(s, M.power_limit.name, minor="0") == [700.0]
    assert find(s, M.ecc_errors.name, minor="1", type="uncorrected", location="dram", counter="volatile") == [0]
    assert find(s, M.nvlink_links.name, minor="0", state="down") == [0]
    assert find(s, M.pcie_width.name, minor="0", which="current") == [16]
    assert find(s, M.gpus_present.name) == [8] and find(s, M.drained.name) == [0]
    assert not find(s, M.drain_info.name) and not find(s, M.gpu_lost.name)


def test_prolog_textfile_has_no_gpu_series(tmp_path, inventory):  # noqa: F811
    """A prolog sees one job's GPUs and its values go stale until the next job: GPU series come from health only."""
    _rep, text = run(tmp_path, inventory, "prolog", slurm=FakeSlurm(state="ALLOCATED"), job_gpus=[0], job_id="7")
    names = {n for n, _ in samples(text)}
    assert M.check_status.name in names and not any(n.startswith("slurmkit_gpu_") for n in names)


def test_uncorrectable_ecc_is_counted_by_location_and_gpu(tmp_path, inventory):  # noqa: F811
    _rep, text = run(tmp_path, inventory, "health", nvml="ecc-uncorrected-gpu1.json", slurm=FakeSlurm())
    s = samples(text)
    assert find(s, M.ecc_errors.name, minor="1", type="uncorrected", location="all", counter="volatile") == [2]
    assert find(s, M.ecc_errors.name, minor="1", type="uncorrected", location="dram", counter="volatile") == [2]
    assert find(s, M.ecc_errors.name, minor="0", type="uncorrected", location="all", counter="volatile") == [0]
    assert find(s, M.drained.name) == [1]
    assert find(s, M.drain_info.name, check="ecc") == [1]
    assert find(s, M.xid_errors.name, gpu="nvidia1@2a:00.0", xid="48") == [1]  # the XID 48 the fixture logged


def test_xid_counter_counts_each_event_once_across_hooks(tmp_path, inventory):  # noqa: F811
    """The prolog consumes XID 79 from the kernel log; the health run after it still counts it (one node-wide
    counts file), the lost GPU shows, and the sticky series stays while the node waits for a reset."""
    run(tmp_path, inventory, "health", slurm=FakeSlurm(state="IDLE"))  # a healthy run first: the node's baseline
    run(tmp_path, inventory, "prolog", nvml="xid79-gpu5.json", slurm=FakeSlurm(state="ALLOCATED"), job_gpus=[5])
    _rep, text = run(tmp_path, inventory, "health", nvml="xid79-gpu5.json", slurm=FakeSlurm())
    s = samples(text)
    counted = [(dict(lbl)["gpu"], v) for (n, lbl), v in s.items() if n == M.xid_errors.name]
    assert len(counted) == 1 and counted[0][1] == 1 and dict(
        next(lbl for n, lbl in s if n == M.xid_errors.name))["xid"] == "79"
    assert len(find(s, M.xid_sticky.name, xid="79")) == 1
    # the lost GPU answers nothing (GpuIsLost): it keeps the identity it had from the baseline
    assert find(s, M.gpu_lost.name, gpu="nvidia5@ab:00.0", minor="5", pci_bus_id="00000000:AB:00.0",
                serial="1652322000005") == [1] and find(s, M.gpus_present.name) == [7]
    _rep, text = run(tmp_path, inventory, "health", nvml="xid79-gpu5.json", slurm=FakeSlurm())
    assert [v for (n, _l), v in samples(text).items() if n == M.xid_errors.name] == [1]  # not counted twice


@pytest.mark.parametrize("slurm,reason,want", [
    ({"before": {"state": "idle", "flags": [], "reason": ""}, "decision": "drain", "done": "drain"}, "slurmkit: x",
     (1, "slurmkit: x")),
    # an admin's reason kept: our drain was refused; the node is drained, but not by us
    ({"before": {"state": "idle", "flags": ["DRAIN"], "reason": "rack 12"}, "decision": "none", "done": "nothing"},
     "slurmkit: x", (0, "")),
    # the resume countdown: healthy now, still drained by us
    ({"before": {"state": "idle", "flags": ["DRAIN"], "reason": "slurmkit: gpu3 xid79"}, "decision": "none",
      "done": "nothing"}, "", (1, "slurmkit: gpu3 xid79")),
    ({"before": {"state": "idle", "flags": ["DRAIN"], "reason": "slurmkit: x"}, "decision": "resume",
      "done": "resume"}, "", (0, "")),
    ({"before": {"state": "idle", "flags": ["DRAIN"], "reason": "Prolog error"}, "claimed": "...",
      "decision": "none", "done": "nothing"}, "", (1, "Prolog error")),
    ({"wanted": "none", "done": "nothing (first run of this slurmd: before registration, no Slurm calls)"}, "", None),
])
def test_drained_by_us_is_what_slurm_shows(slurm, reason, want):
    assert drained_by_us(slurm, reason) == want


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_promtool_lints_the_textfiles(tmp_path, inventory):  # noqa: F811
    for hook, nvml in (("health", "xid79-gpu5.json"), ("prolog", "healthy-h100x8.json")):
        _rep, text = run(tmp_path, inventory, hook, nvml=nvml, slurm=FakeSlurm(), job_gpus=[0])
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def test_textfile_dir_percent_n_is_the_node(tmp_path, inventory):  # noqa: F811
    """The lab's hooks share one command line ($SLURMKIT_TEXTFILE_DIR=<lab>/textfile/%n): each node its own dir."""
    run_hook(env(tmp_path, inventory, FakeSlurm(), "health", textfile_dir=str(tmp_path / "tf" / "%n")))
    assert (tmp_path / "tf" / "node1" / "slurmkit_health_health.prom").exists()
    assert not (tmp_path / "tf" / "%n").exists()


def test_textfile_is_never_seen_half_written_by_node_exporter(tmp_path, inventory, monkeypatch):  # noqa: F811
    """node_exporter's textfile collector parses every ``*.prom`` of its directory on each scrape
    (collector/textfile.go: strings.HasSuffix(name, ".prom")): at the instant before the rename, while the new text
    sits complete or not in its temp file, the directory holds no ``*.prom`` but the previous, whole file (the temp
    file ended in ``.prom``: node_exporter was seen reading one mid-write, issue 35)."""
    from slurmkit.health import state

    tdir = tmp_path / "tf"
    seen: list[list[str]] = []
    real = state.os.replace

    def replace(src, dst):
        if str(dst).endswith(".prom"):
            seen.append(sorted(p.name for p in tdir.glob("*.prom")))
            assert not str(src).endswith(".prom"), src
        return real(src, dst)

    monkeypatch.setattr(state.os, "replace", replace)
    run(tmp_path, inventory, "health")
    run(tmp_path, inventory, "health")
    assert seen == [[], ["slurmkit_health_health.prom"]]
    assert sorted(p.name for p in tdir.iterdir()) == ["slurmkit_health_health.prom"]  # nothing left behind


def test_check_textfile_dir_leaves_the_gpu_series_to_the_health_hook(tmp_path, inventory):  # noqa: F811
    """`slurmkit check --textfile-dir <node_exporter's dir>` (as `check --help` suggests), then the GPU's ECC fault and
    the health check: node_exporter reads both files; each series has one writer (no duplicate: the check's stale
    ECC 0 stood beside the health check's 2 and the ECC alert never fired, issue 35), the health file carries the
    fault, and the check's file has only its own verdicts (hook="check")."""
    tdir = tmp_path / "tf"
    run_hook(env(tmp_path, inventory, FakeSlurm(state="IDLE"), "check", textfile_dir=str(tdir)))
    run_hook(env(tmp_path, inventory, FakeSlurm(state="IDLE"), "health", nvml="ecc-uncorrected-gpu1.json",
                 textfile_dir=str(tdir)))
    files = sorted(p.name for p in tdir.glob("*.prom"))
    assert files == ["slurmkit_health_check.prom", "slurmkit_health_health.prom"]
    s = samples("".join((tdir / f).read_text() for f in files))  # asserts no series twice
    assert find(s, M.ecc_errors.name, minor="1", type="uncorrected", location="all", counter="volatile") == [2]
    check = samples((tdir / "slurmkit_health_check.prom").read_text())
    assert {dict(lbl).get("hook") for _n, lbl in check} == {"check"}
    assert find(check, M.check_status.name, check="ecc", state="ok") == [1]


def _labels_of(s: dict, name: str) -> dict[str, dict[str, str]]:
    """minor -> the labels of each GPU's series ``name``."""
    return {dict(lbl)["minor"]: dict(lbl) for (n, lbl), _v in s.items() if n == name}


def test_gpu_series_name_the_board_by_minor_and_bus_not_the_shifting_index(tmp_path, inventory):  # noqa: F811
    """GPU 3 drops out of NVML (indexes 4-7 become 3-6) and the board at BA:00.0 (/dev/nvidia6, now index 5) runs at
    x8: the drain reason, the PCIe series and the lost board's series all name the boards as the drain does
    (``nvidia6@ba:00.0``, never "5"), the other GPUs keep their series' labels (no resolve and refire), the missing
    board keeps its identity, and when it is back its series have the labels they had (issue 35)."""
    slurm = FakeSlurm(state="IDLE")
    _rep, before = run(tmp_path, inventory, "health", slurm=slurm)  # healthy: the node's baseline
    info0 = _labels_of(samples(before), M.gpu_info.name)
    assert info0["6"]["gpu"] == "nvidia6@ba:00.0" and info0["6"]["serial"] == "1652322000006"
    assert info0["6"]["uuid"].startswith("GPU-") and info0["6"]["pci_bus_id"] == "00000000:BA:00.0"

    def degrade(d):
        gone = d["devices"].pop(3)
        assert gone["minor"] == 3
        for i, dev in enumerate(d["devices"]):
            dev["index"] = i
        d["devices"][5]["pcie_width"] = [8, 16]
        d["count"] = len(d["devices"])

    fake = fixture(tmp_path / "degraded", "healthy-h100x8.json", degrade)
    rep, text = run(tmp_path, inventory, "health", slurm=slurm, fake_nvml=str(fake))
    s = samples(text)
    assert "nvidia6@ba:00.0" in rep.reason and "nvidia3@5d:00.0" in rep.reason, rep.reason
    assert find(s, M.pcie_width.name, gpu="nvidia6@ba:00.0", minor="6", which="current") == [8]
    info = _labels_of(s, M.gpu_info.name)
    assert sorted(info) == ["0", "1", "2", "4", "5", "6", "7"] and all(info[m] == info0[m] for m in info)
    lost = [dict(lbl) for (n, lbl), v in s.items() if n == M.gpu_lost.name and v == 1]
    assert [(g["gpu"], g["serial"], g["uuid"]) for g in lost] == [
        ("nvidia3@5d:00.0", info0["3"]["serial"], info0["3"]["uuid"])]
    _rep, back = run(tmp_path, inventory, "health", slurm=slurm)
    assert _labels_of(samples(back), M.gpu_info.name) == info0 and not find(samples(back), M.gpu_lost.name)
