"""The real slurmctld parse, by the slurmctld of the release under test (``release_under_test()``: the host's in
the first pass of tests/run.sh, 24.11 from its cached root in the second): every preset renders files it accepts
with zero error lines, and the failures slurmctld does not treat as fatal are still caught. Each case asserts
what the release itself says (the judge's release and path are part of the message); where a release's slurmctld
no longer reads gres.conf (23.11+), its ``slurmd -G`` judges that file.

Marked ``lab``: they run once per release pass, like the labs. Which judge a target gets without running
Slurm is in tests/unit/test_realparse_judge.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmkit.backend.realparse import controller_host, real_parse, rewrite_for_copy, validate
from slurmkit.generate import confparse as cp
from slurmkit.generate import generate
from slurmkit.generate.validate import static_check
from slurmkit.model.load import load_cluster
from slurmkit.release import judges, slurmctld_reads_gres_conf
from tests.conftest import needs, release_under_test

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld"),
              pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release

PRESETS = ["lab", "dgx-h100-superpod-su", "mixed-pcie", "fat-tree-4096"]


@pytest.fixture(scope="module")
def release() -> str:
    """The release under test, with its root built where the host does not have it (as `lab up --slurm` does)."""
    from slurmkit.lab import image

    rel = release_under_test()
    if rel != image.host_release():
        image.ensure(rel)
    return rel


def judged_by(rp: object, release: str) -> None:
    judge = rp.judge  # type: ignore[attr-defined]
    assert judge.startswith(f"slurmctld {release}."), rp
    assert f"judged by {judge}" in rp.message, rp  # type: ignore[attr-defined]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_passes_real_slurmctld(preset: str, release: str) -> None:
    # each preset rendered for the release under test (tree topologies everywhere; mixed-pcie targets 23.02)
    files = generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"), version=release)
    rep = validate(files, release)
    assert rep.real_ok is True, (rep.real, rep.errors)
    assert rep.errors == []
    # the copy ran under the first controller's own name, with every SlurmctldHost line kept
    first = controller_host(cp.parse_slurm_conf(files["slurm.conf"]).controllers[0])[0]
    assert f" as {first}" in rep.real
    assert f"judged by slurmctld {release}." in rep.real, rep.real


def test_block_preset_is_judged_by_its_release_or_skipped_with_reason(release: str) -> None:
    """The GB200 preset targets 24.11 (topology/block, BlockSizes): judged by a 24.11 slurmctld where one is here
    (the host's or a cached root's), else skipped with a reason that names the slurmctld that is here."""
    from slurmkit.lab import image

    files = generate(load_cluster(ROOT / "examples" / "gb200-nvl72.yaml"))
    assert cp.header_version(files["slurm.conf"]) == "24.11"
    assert static_check(files).errors == []
    rp = real_parse(files)
    here = image.host_release()
    if judges(release, "24.11") or image.find("24.11") is not None or (here and judges(here, "24.11")):
        assert rp.ok is True, rp
        assert rp.judge.startswith("slurmctld 24.11."), rp
    else:
        assert rp.ok is None and "config targets Slurm 24.11" in rp.message, rp
        assert f"installed slurmctld is {here}" in rp.message, rp


@pytest.fixture(scope="module")
def lab_files(release: str) -> dict[str, str]:
    return generate(load_cluster(ROOT / "examples" / "lab.yaml"), version=release)


@pytest.mark.parametrize(
    ("name", "old", "new", "expect"),
    [
        # not fatal to slurmctld: only the error line tells
        ("slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:8,nic:2", "Invalid GRES configured"),
        # 22.05 logs "error: WARNING: Invalid hostnames in switch configuration: ghost[1-2]" and 24.11 the same
        # as a warning: line; both log "_find_node_record: lookup failure for node \"ghost1\"" as an error
        ("topology.conf", "SwitchName=spine", "SwitchName=leaf3 Nodes=ghost[1-2]\nSwitchName=spine", "ghost1"),
        # slurmctld reads gres.conf through 23.02; from 23.11 slurmd -G does (release.slurmctld_reads_gres_conf)
        ("gres.conf", "AutoDetect=off", "AutoDetect=off\nTypo=x", "unrecognized key: Typo"),
        # fatal
        ("slurm.conf", "SelectType=select/cons_tres", "SelectType=select/nonexistent", "Can't find plugin"),
        ("cgroup.conf", "ConstrainCores=yes", "ConstrainCores=yes\nBogus=yes", "cgroup.conf"),
    ],
)
def test_real_parse_catches_what_slurmctld_logs(lab_files: dict[str, str], release: str, name: str, old: str, new: str,
                                               expect: str) -> None:
    files = dict(lab_files)
    if name == "topology.conf" and name not in files:  # topology.yaml replaces it from 25.05: the same ghost leaf
        name, old, new = "topology.yaml", "    - switch: spine", "    - switch: leaf3\n      nodes: ghost[1-2]\n    - switch: spine"
    if expect == "Can't find plugin" and release >= "26.05":
        # slurm-26-05-3-1 src/interfaces/select.c:130 error("cannot create %s context for %s"), then fatal "failed to
        # initialize node selection plugin"; through 24.11 select.c fatal("Can't find plugin for %s")
        expect = "cannot create select context for select/nonexistent"
    assert old in files[name]
    files[name] = files[name].replace(old, new)
    rp = real_parse(files, release)
    assert rp.ok is False and any(expect in e for e in rp.errors), rp
    judged_by(rp, release)
    if name == "gres.conf":
        by_slurmd = f"gres.conf by slurmd {release}."
        assert (by_slurmd in rp.message) != slurmctld_reads_gres_conf(release), rp


def test_gres_conf_is_judged_without_false_findings(lab_files: dict[str, str], release: str) -> None:
    """The lab's gres.conf (File=/dev/nvidiaN, Cores=) is clean: slurmd -G on this machine, which is not the node,
    reports nothing about the node's devices or CPUs (stand-in files, GRES_NODE_NOISE)."""
    rp = real_parse(lab_files, release)
    assert rp.ok is True and rp.errors == [], rp
    judged_by(rp, release)


@pytest.fixture(scope="module")
def ha_files(release: str) -> dict[str, str]:
    files = generate(load_cluster(ROOT / "examples" / "dgx-h100-superpod-su.yaml"), version=release)
    assert [ln for ln in files["slurm.conf"].splitlines() if ln.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=head01", "SlurmctldHost=head02"]
    return files


def test_copy_keeps_controller_and_node_lines(ha_files: dict[str, str], tmp_path: Path) -> None:
    copy = rewrite_for_copy(ha_files["slurm.conf"], tmp_path)
    kept = [ln for ln in copy.text.splitlines() if ln.startswith(("SlurmctldHost=", "NodeName=", "SlurmctldPort="))]
    wrote = [ln for ln in ha_files["slurm.conf"].splitlines() if ln.startswith(("SlurmctldHost=", "NodeName=", "SlurmctldPort="))]
    assert kept == wrote
    assert copy.primary == "head01" and copy.dbd
    assert {"head01", "head02", "dgx001", "dgx032"} <= set(copy.names)


def test_copy_puts_backup_controllers_on_an_unreachable_address(ha_files: dict[str, str], tmp_path: Path) -> None:
    copy = rewrite_for_copy(ha_files["slurm.conf"], tmp_path)
    hosts = dict(reversed(ln.split()) for ln in copy.hosts().splitlines())
    assert copy.backups == ["head02"]
    assert hosts["head01"] == "127.0.0.1" and hosts["dgx001"] == "127.0.0.1"
    assert hosts["head02"] == "192.0.2.1"  # TEST-NET-1: no route in the private network namespace


def test_duplicate_controllers_are_refused_by_the_real_parse(ha_files: dict[str, str], release: str) -> None:
    # what issue 9 item 1 produced: the old check rewrote SlurmctldHost to this host and passed it
    files = dict(ha_files, **{"slurm.conf": ha_files["slurm.conf"].replace("SlurmctldHost=head01", "SlurmctldHost=head02")})
    rp = real_parse(files, release)
    assert rp.ok is False and any("Duplicate SlurmctldHost records: head02" in e for e in rp.errors), rp


def test_two_controllers_parse_as_the_primary(ha_files: dict[str, str], release: str) -> None:
    rp = real_parse(ha_files, release)
    assert rp.ok is True, rp
    judged_by(rp, release)
    assert " as head01" in rp.message
    # the backup is asked to relinquish control at an address that fails at once in the private namespace
    # (loopback made 24.11 wait 30 s on the copy itself, see validate.BACKUP_NET)
    assert any("_shutdown_bu_thread" in e and "head02" in e and "Network is unreachable" in e for e in rp.expected), rp
    # the site uses slurmdbd, the copy has none: the priority plugin's complaints are expected, not findings
    assert any("PriorityWeightAge can only be used with SlurmDBD" in e for e in rp.expected)


def test_controller_names_in_node_addr_resolve_in_the_copy(lab_files: dict[str, str], release: str) -> None:
    # NodeAddr/NodeHostname names as a site writes them: resolvable only inside the copy's private /etc/hosts
    conf = lab_files["slurm.conf"].replace("NodeName=node[1-8] ", "NodeName=node[1-8] NodeAddr=ib-node[1-8] NodeHostname=host-node[1-8] ")
    assert conf != lab_files["slurm.conf"]
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf}), release)
    assert rp.ok is True, rp


def test_priority_errors_after_primary_are_findings_without_slurmdbd(lab_files: dict[str, str], release: str) -> None:
    # slurmctld logs these right after "Running as primary controller"; the old check stopped reading there
    conf = lab_files["slurm.conf"] + "PriorityType=priority/multifactor\nPriorityWeightAge=1000\n"
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf}), release)
    assert rp.ok is False and any("PriorityWeightAge can only be used with SlurmDBD" in e for e in rp.errors), rp


def test_controller_host_splits_the_address() -> None:
    assert controller_host("head01(10.0.0.1)") == ("head01", "10.0.0.1")
    assert controller_host("head01") == ("head01", "")


def test_quoted_values_and_includes_reach_the_real_parse(lab_files: dict[str, str], release: str) -> None:
    """A quoted value with spaces and nodes from an Include file: the copy keeps the quotes and inlines the
    included lines (issue 19); before, the quotes were dropped (slurmctld then failed on "--pty") and the Include
    was dropped (every partition named unknown nodes)."""
    files = dict(lab_files)
    lines = files["slurm.conf"].splitlines()
    node_lines = [ln for ln in lines if ln.startswith("NodeName=")]
    files["slurm.conf"] = "\n".join(ln for ln in lines if not ln.startswith("NodeName=")) + (
        '\nInteractiveStepOptions="--interactive --preserve-env --pty $SHELL"\ninclude nodes.conf\n')
    files["nodes.conf"] = "\n".join(node_lines) + "\n"
    rep = validate(files, release)
    assert rep.errors == [] and rep.real_ok is True, (rep.real, rep.errors)
    judged_by_msg = f"judged by slurmctld {release}."
    assert judged_by_msg in rep.real


def test_tenant_partitions_with_allow_qos_pass_the_real_parse(release: str) -> None:
    """Issue 21 item 1: the lab's tenants (slurmdbd, AllowQos=normal,high,scavenger on gpu) are judged without the
    QOS the copy cannot have: from 25.11 unknown AllowQOS is fatal, so the copy leaves it out and says so."""
    from slurmkit.lab.inventory import lab_inventory
    from slurmkit.model.load import load_cluster_dict
    from slurmkit.release import allow_qos_fatal

    files = generate(load_cluster_dict(lab_inventory(2, accounting=True, slurm_version=release)), version=release)
    assert "AllowQos=normal,high,scavenger" in files["slurm.conf"]
    rp = real_parse(files, release)
    assert rp.ok is True, rp
    judged_by(rp, release)
    assert ("left AllowQos=normal,high,scavenger of partition gpu out of the copy" in rp.message) == allow_qos_fatal(release)


def test_ring_and_torus3d_topology_yaml_judged_by_2605_or_skipped_with_reason(release: str) -> None:
    """topology/ring and topology/torus3d exist from 26.05 (src/plugins/topology at slurm-26-05-3-1): the
    topology.yaml slurmkit writes for them is judged by a 26.05 slurmctld where one is here (the release under test
    or a cached root), and a torus whose dims do not match its nodes is refused by it (torus3d_record.c
    "Torus3d dimensions ... do not match node count", then fatal "has invalid configuration")."""
    from slurmkit.lab import image
    from slurmkit.lab.inventory import lab_inventory
    from slurmkit.model import load_cluster_dict

    if not (release == "26.05" or image.find("26.05") is not None):
        pytest.skip("no slurmctld 26.05 here (release under test or a cached root under /var/cache/slurmkit/roots)")
    base = lab_inventory(8, nodes_per_leaf=4)
    base["slurm_version"] = "26.05"
    ring = dict(base, topology={"rings": [{"name": "r1", "nodes": ["node3", "node1", "node2", "node4"]},
                                          {"name": "r2", "nodes": "node[5-8]"}]})
    torus = dict(base, topology={"toruses": [{"name": "t1", "dims": [2, 2, 2], "nodes": "node[1-8]",
                                              "placements": [[1, 1, 1], [2, 1, 1], [2, 2, 2]]}]})
    for inv in (ring, torus):
        files = generate(load_cluster_dict(inv))
        rp = real_parse(files)
        assert rp.ok is True, rp
        assert rp.judge.startswith("slurmctld 26.05."), rp
    bad = dict(files, **{"topology.yaml": files["topology.yaml"].replace("        z: 2\n      nodes:",
                                                                           "        z: 3\n      nodes:")})
    assert bad["topology.yaml"] != files["topology.yaml"]
    rp = real_parse(bad)
    assert rp.ok is False and "do not match node count" in str(rp), rp


def test_deprecation_and_defunct_lines_are_notices_not_findings(lab_files: dict[str, str], release: str) -> None:
    """Issue 19: the release's own notices (read_config.c "Ignoring obsolete FastSchedule=1 option", _defunct_option's
    "The option ... is defunct") are classified by their source in that release (realparse.ERROR_LINES) and leave
    the config valid; a refused value in the same file still fails it. One real parse each (~2 s)."""
    from slurmkit.backend.realparse import DEFUNCT, DEPRECATED

    defunct = "SchedulerAuth=x" if release == "22.05" else "PowerPlugin=power/none"
    conf = lab_files["slurm.conf"] + f"FastSchedule=1\n{defunct}\n"
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf}), release)
    assert rp.ok is True and rp.errors == [], rp
    assert sorted(k for k, _w, _e in rp.notices) == [DEFUNCT, DEPRECATED], rp
    judged_by(rp, release)
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf + "HealthCheckNodeState=BOGUS\n"}), release)
    assert rp.ok is False and any("HealthCheckNodeState" in e for e in rp.errors), rp


def test_generated_dynamic_node_config_is_accepted(release: str) -> None:
    """Issue 19 (a): a dynamic-node site imported and generated again (no NodeName line, MaxNodeCount, partitions by
    Nodes=ALL and by a NodeSet's Feature, dynamic_nodes.shtml 22.05/24.11) starts the release's slurmctld with no
    error line. One real parse (~2 s)."""
    from slurmkit.adopt.importer import import_site
    from slurmkit.model import yamlio
    from slurmkit.model.load import load_cluster_text
    from tests.unit.test_adopt_dynamic import FILES

    res = import_site(FILES, release)
    assert res.lost == []
    files = generate(load_cluster_text(yamlio.dump(res.inventory)), version=release)
    assert "MaxNodeCount=64" in files["slurm.conf"] and "NodeName=" not in files["slurm.conf"]
    rep = validate({k: v for k, v in files.items() if k != "slurmkit.yaml"}, release)
    assert rep.real_ok is True and rep.errors == [], (rep.real, rep.errors)


def test_dynamic_node_registers_with_slurmd_z(release: str, tmp_path: Path) -> None:
    """Issue 19 (a), judged by the release itself: the generated dynamic-node config (no NodeName line) runs a
    slurmctld, and ``slurmd -Z --conf "... Feature=h100"`` (dynamic_nodes.shtml 22.05 and 24.11) registers a node
    that joins the Nodes=ALL partition and the one over the NodeSet by Feature=h100. Both daemons run in private
    UTS/mount/network/PID namespaces (the real parse's, realparse._script; the PID namespace ends them with the
    script), on the real-parse copy (auth/none) with proctrack/pgid, task/none and no cgroup plugin where the
    release has 'disabled' (24.05+). ~10 s."""
    import subprocess

    from slurmkit.adopt.importer import import_site
    from slurmkit.backend import realparse as rp
    from slurmkit.model import yamlio
    from slurmkit.model.load import load_cluster_text
    from slurmkit.release import release_key
    from tests.unit.test_adopt_dynamic import FILES

    files = generate(load_cluster_text(yamlio.dump(import_site(FILES, release).inventory)), version=release)
    judge, why = rp.find_judge(release)
    ns, ip, why2 = rp._namespaces()
    assert judge is not None and ns is not None, (why, why2)
    copy = rp.rewrite_for_copy(files["slurm.conf"], tmp_path, None, judge.root or "/", files, judge.release)
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "slurm.conf"
    conf.write_text(copy.text + "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nMailProg=/bin/true\n")
    if release_key(judge.release) >= (24, 5):  # cgroup.conf(5) CgroupPlugin=disabled, 24.05+
        (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "hosts").write_text(copy.hosts() + "127.0.0.1 dyn1\n")
    log = tmp_path / "log"
    inner = tmp_path / "inner.sh"
    inner.write_text(f"""
export SLURM_CONF={conf}
/usr/sbin/slurmctld -D -i -f {conf} > {log}.ctld 2>&1 &
i=0; until /usr/bin/scontrol ping 2>/dev/null | grep -q UP; do i=$((i+1)); [ $i -gt 150 ] && exit 3; sleep 0.2; done
/usr/sbin/slurmd -D -Z --conf "CPUs=1 RealMemory=100 Feature=h100" -N dyn1 -f {conf} > {log}.slurmd 2>&1 &
i=0; until /usr/bin/sinfo -h -N -o '%N %P %T' | grep -q 'dyn1 h100 idle'; do i=$((i+1)); [ $i -gt 150 ] && break; sleep 0.2; done
/usr/bin/sinfo -h -N -o '%N %P %T'
""")
    script = rp._script(judge, tmp_path, ip, copy.primary, ["sh", str(inner)])
    argv = [ns[0], "--pid", "--fork", *ns[1:], "sh", "-c", script]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    rows = set(res.stdout.split("\n"))
    tail = {n: (log.with_suffix(f".{n}").read_text()[-600:] if log.with_suffix(f".{n}").exists() else "")
            for n in ("ctld", "slurmd")}
    assert {"dyn1 all* idle", "dyn1 h100 idle"} <= rows, (res.returncode, res.stdout, res.stderr, tail)


def test_release_deltas_are_judged_by_the_release(release: str, tmp_path: Path) -> None:
    """Issue 21 item 4, judged by the release's own slurmctld (three or four real parses, 7-15 s a release): what
    slurmkit writes per release loads with no error line -- partition exclusivity (Exclusive= from 26.05, the older
    keys before), HealthCheckNodeState=START_ONLY (25.11+), a power group's own NodeName SuspendTime (26.05+) --
    and the static check refuses what this release's slurmctld refuses: Exclusive= before 26.05 ("Parsing error at
    unrecognized key", fatal), START_ONLY before 25.11 ("Invalid HealthCheckNodeState value") and beside CYCLE from
    26.05 (fatal), gres.conf AutoDetect=full before 26.05 (`slurmd -G`: "unknown autodetect flag"). On 26.05 the
    deprecated spellings still load."""
    import os
    import re

    from slurmkit.lab.inventory import lab_inventory
    from slurmkit.model.load import load_cluster_dict
    from slurmkit.release import features_for

    feats = features_for(release)
    inv = lab_inventory(4, power_nodes=2, suspend_time=60, slurm_version=release, hooks_command="/opt/sk/bin/slurmkit")
    if feats.node_suspend_time:
        burst = inv["node_groups"][-1]
        inv["node_groups"].append({**burst, "name": "h100-slow", "hosts": "node4",
                                   "power": {**burst["power"], "suspend_time": 600}})
        burst["hosts"] = "node3"
        inv["partitions"][0]["groups"] = [g["name"] for g in inv["node_groups"]]
    inv["partitions"][0]["exclusive"] = "topo" if feats.exclusive_topo else "node"
    if feats.healthcheck_start_only:
        inv["hooks"]["healthcheck_start_only"] = True
    files = generate(load_cluster_dict(inv), version=release, conf_dir=str(tmp_path))
    for name, text in files.items():  # the programs slurm.conf names exist, as on a node
        (tmp_path / name).write_text(text)
        os.chmod(tmp_path / name, 0o755)
    conf = files["slurm.conf"]
    assert ("SuspendTime=600" in conf) == feats.node_suspend_time
    rp = real_parse(files, release)
    assert rp.ok is True and rp.errors == [], rp
    judged_by(rp, release)

    def judged(text: str) -> tuple[list[str], list[str]]:
        bad = {**files, "slurm.conf": text}
        return real_parse(bad, release).errors, static_check(bad, release).errors

    if feats.partition_exclusive:
        real, static = judged(conf.replace("Exclusive=TOPO", "OverSubscribe=EXCLUSIVE ExclusiveTopo=YES"))
        assert real == [] and static == [], (real, static)
    else:
        real, static = judged(conf.replace("OverSubscribe=EXCLUSIVE", "Exclusive=NODE"))
        assert any("unrecognized key: Exclusive" in e for e in real), real
        assert any("Exclusive= is a partition key from Slurm 26.05" in e for e in static), static
    if feats.healthcheck_start_only:
        real, static = judged(conf.replace("HealthCheckNodeState=START_ONLY", "HealthCheckNodeState=START_ONLY,CYCLE"))
        combined = feats.healthcheck_only_alone
        assert any("cannot be combined" in e for e in real) == combined, real
        assert any("cannot be combined" in e for e in static) == combined, static
    else:
        text = re.sub(r"\nSuspendTime=", f"\nHealthCheckProgram={tmp_path}/slurmkit-health\nHealthCheckInterval=300\n"
                      "HealthCheckNodeState=START_ONLY\nSuspendTime=", conf, count=1)
        real, static = judged(text)
        assert any("Invalid HealthCheckNodeState value START_ONLY" in e for e in real), real
        assert any("START_ONLY (a value from Slurm 25.11)" in e for e in static), static
    if not feats.gres_autodetect_full and not slurmctld_reads_gres_conf(release):
        # gres.conf: AutoDetect=full before 26.05 is "unknown autodetect flag" to `slurmd -G` (no detection at all);
        # on 26.05 here it cannot be judged (no GPU: "System GPU detection failed")
        gres = files["gres.conf"].replace("Name=gpu", "AutoDetect=full Name=gpu", 1)
        bad = {**files, "gres.conf": gres}
        assert "error: unknown autodetect flag 'full'" in real_parse(bad, release).errors
        assert any("AutoDetect=full is a value from Slurm 26.05" in e for e in static_check(bad, release).errors)
