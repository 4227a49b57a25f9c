"""Issue 32 item 1: only the drivers' own kernel records count.

The kernel log holds text any user picks: a segfault record ends with the mapped file's name ("... error 4 in
NVRM: Xid (PCI:0000:ee:00): 79, x[...]") and starts with the task's comm. Before the fix the XID, SXid and MCE
patterns were searched anywhere in a record, so such a record drained the node (sticky) or counted a machine
check. tests/data/kmsg/records.json holds the drivers' own formats (which must still count) and forged records
recorded from a real kernel (which must count for nothing); each goes through ``xid.read_kmsg``, the reader
`slurmkit check` and the hooks use on /dev/kmsg. tests/security/test_kmsg.py plays the same attack on this
machine's kernel.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmkit.health import xid
from slurmkit.health.checks import CHECKS, EvalContext
from slurmkit.health.expect import Expectations
from slurmkit.health.policy import DEFAULT_FAIL_XIDS, parse_policy
from slurmkit.health.result import Action, Status
from slurmkit.monitor.textfile import xid_labels_of_run

from .test_health_checks import edited, run

RECORDS = json.loads((Path(__file__).resolve().parents[1] / "data" / "kmsg" / "records.json").read_text())
CRITICAL = frozenset(DEFAULT_FAIL_XIDS)


def read(tmp_path: Path, raws: list[str]) -> list:
    """Each raw record through ``xid.read_kmsg``: a regular file stands in for /dev/kmsg, one record per file as
    one read() of the device returns one record."""
    out: list = []
    for i, raw in enumerate(raws):
        p = tmp_path / f"record{i}"
        p.write_bytes(raw.encode())
        out += xid.read_kmsg(str(p))
    assert len(out) == len(raws)
    return out


def scan_of(tmp_path: Path, raws: list[str]) -> xid.XidScan:
    return xid.scan(read(tmp_path, raws), xid.XidState(), "boot-1", CRITICAL, "test")


def gpus(*buses: str) -> dict:
    """An NVML device scan of GPUs on these buses (NVML's spelling)."""
    return {"count": len(buses), "devices": [
        {"index": i, "minor": i, "pci_bus_id": f"0000{b.upper()}.0", "name": "NVIDIA H100 80GB HBM3"}
        for i, b in enumerate(buses)]}


def judge(scan: xid.XidScan, init: dict, hook: str = "health"):
    n = len(init.get("devices", []))
    ctx = EvalContext(hook=hook, policy=parse_policy({}).check("xid"),
                      expect=Expectations(node="node1", gpu_count=n, minors=tuple(range(n))), init=init,
                      extra={"gpu_expected": n})
    return CHECKS["xid"].evaluate(scan, ctx)


def test_the_drivers_own_records_still_count(tmp_path):
    """Every real format parses to its code and bus, with the kmsg prefix's extra fields (caller=) and the
    dictionary lines that follow the message ignored; MIG-attributed XIDs (``PCI:0000:01:00 GPU-I:05``) count too
    (they did not before: the pattern wanted ``)`` right after the bus)."""
    drv = RECORDS["driver"]
    s = scan_of(tmp_path, [r["raw"] for r in drv])
    assert [(e.kind, e.xid, e.bus_id, e.fatal) for e in s.new] == \
        [(r["kind"], r["xid"], r["bus_id"], r.get("fatal", False)) for r in drv]
    assert s.state.seq == 6108
    v = judge(s, gpus(":5d:00", ":2a:00", ":18:00", ":9a:00", ":01:00"))
    assert v.status == Status.FAIL
    assert v.findings == ["gpu0 xid79", "gpu1 xid48", "gpu3 xid119", "gpu4 xid94", "gpu4 xid95",
                          "nvswitch0000:c1:00 sxid20034", "gpu2 xid13", "gpu4 xid43", "nvswitch0000:05:00 sxid12028"]
    assert "foreign_bus" not in v.evidence and "bus_unverified" not in v.evidence


def test_the_kernels_own_machine_check_records_still_count(tmp_path):
    s = scan_of(tmp_path, [r["raw"] for r in RECORDS["mce"]])
    assert s.mce == {"corrected": 1, "uncorrected": 2,
                     "last": "Memory failure: 0x8a398a: recovery action for dirty LRU page: Recovered"}
    assert s.new == []


@pytest.mark.parametrize("rec", RECORDS["forged"], ids=[r["how"] for r in RECORDS["forged"]])
def test_a_forged_record_counts_for_nothing(tmp_path, rec):
    """A user's text inside (or at the start of) a kernel record, or a line written to /dev/kmsg: no XID, no
    SXid, no machine check; the cursor still moves past it. Even with a GPU on the forged bus id."""
    s = scan_of(tmp_path, [rec["raw"]])
    assert (s.new, s.sticky, s.mce) == ([], [], {}), rec["how"]
    assert s.state.seq == int(rec["raw"].split(",")[1])
    v = judge(s, gpus(":ee:00", ":18:00", ":c1:00"))
    assert v.status == Status.OK, v.summary


def test_forged_records_among_real_ones(tmp_path):
    """One stream, in order: only the driver's records count, and each forged one costs a job nothing."""
    raws = [r["raw"] for r in RECORDS["forged"]] + [RECORDS["driver"][2]["raw"]] + [RECORDS["mce"][0]["raw"]]
    s = scan_of(tmp_path, raws)
    assert [(e.xid, e.bus_id) for e in s.new] == [(13, "0000:18:00")] and s.sticky == []
    assert s.mce == {"corrected": 1, "last": "mce: [Hardware Error]: Machine check events logged"}
    v = judge(s, gpus(":ee:00", ":18:00"))
    assert v.status == Status.WARN and v.findings == ["gpu1 xid13"]


XID79_EE = "NVRM: Xid (PCI:0000:ee:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_an_xid_on_a_bus_no_gpu_of_the_node_has_warns_and_never_drains(tmp_path):
    """Whatever made it: an XID whose bus id none of the node's 8 GPUs has (NVML lists all 8) is a WARN naming the
    bus id, stays visible while sticky, and is left out of the XID metrics (no GPU series, no critical alert)."""
    fx = edited(tmp_path, "healthy-h100x8.json", lambda d: d.update(kmsg=[[10, XID79_EE]]))
    res, out = run(tmp_path, fx)
    x = res["xid"]
    assert x.status == Status.WARN and x.action == Action.WARN, (x.status, x.summary)  # noticed, no drain
    assert x.findings == ["pci0000:ee:00 xid79 (no GPU of this node has bus 0000:ee:00: not counted)"]
    assert x.evidence["foreign_bus"] == ["0000:ee:00"] and len(x.evidence["gpu_buses"]) == 8
    report = SimpleNamespace(results=list(res.values()), nvml={"init": out.nvml_devices})
    assert xid_labels_of_run(report) == []
    res, _ = run(tmp_path, fx)  # the next run: sticky, still a WARN, still named
    assert res["xid"].status == Status.WARN and res["xid"].findings == x.findings
    # beside it a real XID of one of the node's GPUs still drains
    fx = edited(tmp_path / "b", "healthy-h100x8.json", lambda d: d.update(kmsg=[
        [10, XID79_EE], [11, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                            "the bus."]]))
    res, out = run(tmp_path / "b", fx)
    assert res["xid"].status == Status.FAIL and res["xid"].action == Action.DRAIN
    assert res["xid"].findings[0] == "nvidia0@18:00.0 xid79", res["xid"].findings
    assert xid_labels_of_run(SimpleNamespace(results=list(res.values()), nvml={"init": out.nvml_devices})) == ["nvidia0@18:00.0/79"]  # the drain's name


def test_an_xid_that_may_be_a_lost_gpus_still_counts_and_says_so(tmp_path):
    """8 GPUs expected, NVML lists 7 and nothing records the eighth's bus id: the XID may be the lost board's, so
    it counts (fail closed) and the evidence says the bus id is unverified. With the inventory's bus ids the list
    is complete: the board is named, and a bus outside the list is a WARN."""
    res, _ = run(tmp_path, "off-bus-gpu3.json")
    assert res["xid"].status == Status.FAIL and res["xid"].findings == ["pci0000:5d:00 xid79"]
    assert res["xid"].evidence["bus_unverified"] == "1 of the node's 8 GPU(s) without a known bus id"
    buses = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
             "0000:ba:00.0", "0000:db:00.0"]
    res, _ = run(tmp_path / "b", "off-bus-gpu3.json", policy={"gpu_count": {"bus_ids": buses}})
    assert res["xid"].status == Status.FAIL and res["xid"].findings == ["nvidia3@5d:00.0 xid79"]
    assert "bus_unverified" not in res["xid"].evidence
    fx = edited(tmp_path / "c", "off-bus-gpu3.json", lambda d: d["kmsg"].append([6200, XID79_EE]))
    res, _ = run(tmp_path / "c", fx, policy={"gpu_count": {"bus_ids": buses}})
    assert res["xid"].status == Status.FAIL  # the real one on 5d:00
    assert res["xid"].findings == ["nvidia3@5d:00.0 xid79",
                                   "pci0000:ee:00 xid79 (no GPU of this node has bus 0000:ee:00: not counted)"]


def test_fixture_rows_may_carry_the_kmsg_prio(tmp_path):
    """The fake NVML's kernel log (what a lab node reads) takes [seq, text, prio] like /dev/kmsg's prefix: a user's
    line (facility 1) is no XID, the driver's (facility 0) is."""
    line = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    fx = edited(tmp_path, "healthy-h100x8.json", lambda d: d.update(kmsg=[[10, line, 12]]))
    res, _ = run(tmp_path, fx)
    assert res["xid"].status == Status.OK and res["xid"].evidence["cursor"] == 10
    fx = edited(tmp_path / "b", "healthy-h100x8.json", lambda d: d.update(kmsg=[[10, line, 4]]))
    res, _ = run(tmp_path / "b", fx)
    assert res["xid"].status == Status.FAIL and res["xid"].findings == ["nvidia0@18:00.0 xid79"]


def test_a_sticky_xid_an_older_slurmkit_kept_from_a_forged_record_is_dropped(tmp_path):
    """A node drained (sticky) by a forged record before the fix: its state file still holds the record. The next
    scan judges each sticky entry again by its text and keeps only the driver's own, so the health check resumes
    the node without `--clear-xid`; the real one stays."""
    forged = RECORDS["forged"][0]["raw"].split(";", 1)[1].rstrip("\n")
    real = RECORDS["driver"][0]["raw"].split(";", 1)[1].rstrip("\n")
    old = xid.XidState(boot_id="boot-1", seq=400, sticky=[
        {"seq": 344, "xid": 79, "bus_id": "0000:ee:00", "text": forged[:200]},
        {"seq": 390, "xid": 79, "bus_id": "0000:5d:00", "text": real}])
    (tmp_path / "xid.json").write_text(json.dumps(old.to_json()))
    s = xid.scan([], xid.XidState.load(str(tmp_path / "xid.json")), "boot-1", CRITICAL, "test")
    assert [e["seq"] for e in s.sticky] == [390] and s.state.sticky == s.sticky
    assert judge(s, gpus(":ee:00", ":5d:00")).findings == ["gpu1 xid79"]
