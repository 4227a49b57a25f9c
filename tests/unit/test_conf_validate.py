"""Static cross-file checks: each broken variant is caught with a line that says where; any valid
inventory renders files that pass (hypothesis)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.generate import generate
from slurmkit.generate.validate import static_check
from slurmkit.model.load import load_cluster, load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab_files() -> dict[str, str]:
    return generate(load_cluster(ROOT / "examples" / "lab.yaml"))


def broken(files: dict[str, str], name: str, old: str, new: str) -> dict[str, str]:
    assert old in files[name], (name, old)
    out = dict(files)
    out[name] = files[name].replace(old, new)
    return out


def test_generated_files_pass(lab_files: dict[str, str]) -> None:
    rep = static_check(lab_files)
    assert rep.errors == [] and rep.warnings == []


def test_a_node_in_no_leaf_switch_is_a_warning_as_slurm_allows_it(lab_files: dict[str, str]) -> None:
    # 22.05 topology_tree.c:447 error("WARNING: switches lack access to %d nodes") and 24.11 tree/switch_record.c:439
    # warning(): slurmctld starts and schedules the node apart -- not an invalid config
    rep = static_check(broken(lab_files, "topology.conf", "SwitchName=leaf2 Nodes=node[5-8]", "SwitchName=leaf2 Nodes=node[5-7]"))
    assert rep.errors == [] and any("nodes node8 are in no leaf switch" in w for w in rep.warnings), rep


@pytest.mark.parametrize(
    ("name", "old", "new", "expect"),
    [
        ("slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:8,nic:2", "Gres name 'nic' is not in GresTypes"),
        ("slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:6", "gpu: slurm.conf says 6, gres.conf gives 8"),
        ("gres.conf", "Type=h100 File=/dev/nvidia7", "Type=h100", "GPU line without File="),
        ("gres.conf", "File=/dev/nvidia7 Cores=4-7", "File=/dev/nvidia7 Cores=4-9", "Cores=4-9 is outside the 8 cores of node[1-8]"),
        ("gres.conf", "Links=1,1,1,1,1,1,1,-1", "Links=1,1,-1", "Links=1,1,-1 needs 8 entries"),
        ("gres.conf", "NodeName=node[1-8] Name=gpu Type=h100 File=/dev/nvidia0",
         "NodeName=node[1-9] Name=gpu Type=h100 File=/dev/nvidia0", "gres.conf names nodes node9"),
        ("slurm.conf", "SelectTypeParameters=CR_Core_Memory", "SelectTypeParameters=CR_Core", "ConstrainRAMSpace=yes needs SelectTypeParameters=CR_*_Memory"),
        ("cgroup.conf", "ConstrainCores=yes", "ConstrainCores=yes\nConstrainKmem=yes", "cgroup.conf key ConstrainKmem"),
        ("topology.conf", "SwitchName=leaf2 Nodes=node[5-8]", "SwitchName=leaf2 Nodes=node[4-8]", "nodes node4 are in both leaf1 and leaf2"),
        ("topology.conf", "SwitchName=leaf2 Nodes=node[5-8]", "SwitchName=leaf2 Nodes=node[5-8],ghost1", "names nodes ghost1 that slurm.conf does not define"),
        ("topology.conf", "SwitchName=spine Switches=leaf[1-2]", "SwitchName=spine Switches=leaf[1-3]", "unknown child switch leaf3"),
        ("slurm.conf", "PartitionName=gpu Nodes=ns_gpu", "PartitionName=gpu Nodes=ns_gpu,node9", "unknown nodes or nodesets node9"),
        ("slurm.conf", "MemSpecLimit=1000", "MemSpecLimit=32000", "MemSpecLimit=32000 leaves no memory"),
    ],
)
def test_broken_variants_are_caught(lab_files: dict[str, str], name: str, old: str, new: str, expect: str) -> None:
    rep = static_check(broken(lab_files, name, old, new))
    assert any(expect in e for e in rep.errors), rep.errors


def test_empty_tree_and_removed_cgroup_key(lab_files: dict[str, str]) -> None:
    files = dict(lab_files)
    files["topology.conf"] = "# nothing\n"
    assert any("defines no switches" in e for e in static_check(files).errors)
    files = broken(lab_files, "cgroup.conf", "ConstrainCores=yes", "CgroupAutomount=yes")
    assert static_check(files, "22.05").errors == []  # still accepted by 22.05
    # 23.11+ src/interfaces/cgroup.c reads CgroupAutomount with _defunct_option(): an error line, then ignored --
    # not a refusal (issue 19); a Kmem key is gone from the table (unrecognized: fatal)
    rep = static_check(files, "24.11")
    assert rep.errors == [] and any("CgroupAutomount is defunct in Slurm 24.11" in w for w in rep.warnings)
    files = broken(lab_files, "cgroup.conf", "ConstrainCores=yes", "ConstrainKmemSpace=no")
    assert static_check(files, "22.05").errors == []
    assert any("has no cgroup.conf key ConstrainKmemSpace (removed in 23.11)" in e for e in static_check(files, "23.11").errors)
    # a key newer than the target release is named as added, not removed (found with the Slinky corpus config)
    files = broken(lab_files, "cgroup.conf", "ConstrainCores=yes", "EnableControllers=yes")
    assert static_check(files, "24.11").errors == []
    assert any("has no cgroup.conf key EnableControllers (added in 23.11)" in e for e in static_check(files, "22.05").errors)


def test_cred_slurm_is_the_auth_slurm_plugin_from_23_11() -> None:
    """src/interfaces/cred.c cred_g_init() (slurm-23-11-10-1 :145, slurm-24-11-5-1 :144) loads auth/slurm for
    CredType=cred/slurm; 22.05 has neither (src/plugins/auth at slurm-22-05-8-1: jwt munge none)."""
    from slurmkit.generate.slurmplugins import check

    for value in ("cred/slurm", "slurm"):
        assert check("CredType", value, "24.11") == [] and check("CredType", value, "23.11") == []
        assert check("CredType", value, "22.05") and check("CredType", value, "23.02")
    assert check("CredType", "cred/slurmx", "24.11")


def test_block_rules() -> None:
    d = {"cluster": "b", "slurm_version": "24.11", "node_groups": [
        {"name": "g", "hosts": "n[01-36]", "cpu": {"sockets": 1, "cores_per_socket": 4}, "memory_mb": 1000}],
        "topology": {"blocks": [{"name": "b1", "nodes": "n[01-18]"}, {"name": "b2", "nodes": "n[19-36]"}], "block_sizes": [18, 36]}}
    files = generate(load_cluster_dict(d))
    assert static_check(files).errors == []
    for bad, msg in (("BlockSizes=18,54", "not a power-of-two multiple"), ("BlockSizes=18,72", "larger than all 36 nodes"),
                     ("BlockSizes=36,72", "fewer nodes than the base block size 36")):
        assert any(msg in e for e in static_check(broken(files, "topology.conf", "BlockSizes=18,36", bad)).errors), bad
    # blocks larger than the base block are fine (issue 9 item 5: this used to be refused)
    assert static_check(broken(files, "topology.conf", "BlockSizes=18,36", "BlockSizes=9,18")).errors == []
    y = generate(load_cluster_dict(d), version="25.05")
    assert "topology.yaml" in y and static_check(y).errors == []
    # a node in no block is allowed by Slurm (block_record.c warning "blocks lack access"): a warning
    loose = static_check(broken(y, "topology.yaml", "nodes: n[19-36]", "nodes: n[19-35]"))
    assert not any("in no block" in e for e in loose.errors) and any("in no block" in w for w in loose.warnings), loose


def test_100k_nodes_findings_are_folded() -> None:
    # one bracket range holds at most 65,536 hosts (Slurm's MAX_RANGE), so 100k nodes take two
    d = {"cluster": "x", "node_groups": [{"name": "g", "hosts": "n[000001-050000],n[050001-100000]", "cpu": {"sockets": 2, "cores_per_socket": 4},
         "memory_mb": 1000, "gpus": {"type": "a", "count": 2, "files": "/dev/nvidia[0-1]"}}],
         "partitions": [{"name": "p", "groups": ["g"]}]}
    files = generate(load_cluster_dict(d))
    rep = static_check(broken(files, "slurm.conf", "Gres=gpu:a:2", "Gres=gpu:a:3"))
    assert len(rep.errors) == 1 and "n[000001-065536],n[065537-100000]" in rep.errors[0]  # Slurm's MAX_RANGE


# --- any valid inventory renders files that pass -----------------------------------------------------------

group_st = st.fixed_dictionaries(
    {
        "sockets": st.integers(1, 4),
        "cps": st.integers(1, 64),
        "tpc": st.integers(1, 2),
        "nodes": st.integers(1, 40),
        "gpus": st.integers(0, 8),
        "shards": st.integers(0, 3),
        "links": st.sampled_from(["nvlink", "none"]),
        "mig": st.booleans(),
        "weight": st.integers(0, 100),
        "reserve": st.booleans(),
    }
)


@st.composite
def inventories(draw: st.DrawFn) -> tuple[dict, str]:
    groups = draw(st.lists(group_st, min_size=1, max_size=4))
    version = draw(st.sampled_from(["22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11"]))
    ngs, hosts = [], []
    for i, g in enumerate(groups):
        names = [f"g{i}n{j:03d}" for j in range(g["nodes"])]
        hosts += names
        ng: dict = {"name": f"g{i}", "hosts": names, "memory_mb": 4096,
                    "cpu": {"sockets": g["sockets"], "cores_per_socket": g["cps"], "threads_per_core": g["tpc"]},
                    "weight": g["weight"], "features": [f"f{i}"]}
        if g["reserve"]:
            ng["reserve"] = {"memory_mb": 512, "cores": min(1, g["sockets"] * g["cps"] - 1)}
        if g["gpus"]:
            n = g["gpus"]
            cores = g["sockets"] * g["cps"]
            gp: dict = {"type": "h100", "count": n, "files": f"/dev/nvidia[0-{n - 1}]" if n > 1 else "/dev/nvidia0",
                        "cores": [f"0-{cores - 1}"] * n, "links": g["links"]}
            if g["mig"]:
                gp["mig"] = ["3g.40gb@1", "1g.10gb@9"]
            elif g["shards"]:
                gp["shards"] = n * g["shards"]
            ng["gpus"] = gp
        ngs.append(ng)
    inv: dict = {"cluster": "h", "slurm_version": version, "node_groups": ngs,
                 "partitions": [{"name": "all", "groups": [g["name"] for g in ngs], "default": True}]}
    kind = draw(st.sampled_from(["none", "tree", "block"] if version >= "23.11" else ["none", "tree"]))
    leaf = min(draw(st.integers(1, 16)), len(hosts))  # a block size larger than the cluster is invalid input
    if kind == "block" and version < "25.05":
        # until 25.05 a block smaller than the base block is fatal (23.11: all equal): whole blocks only
        leaf = max(d for d in range(1, leaf + 1) if len(hosts) % d == 0)
    chunks = [hosts[i:i + leaf] for i in range(0, len(hosts), leaf)]
    if kind == "tree":
        sw = [{"name": f"leaf{k}", "nodes": c} for k, c in enumerate(chunks)]
        inv["topology"] = {"switches": [*sw, {"name": "spine", "switches": [s["name"] for s in sw]}]}
    elif kind == "block":
        inv["topology"] = {"blocks": [{"name": f"b{k}", "nodes": c} for k, c in enumerate(chunks)],
                           "block_sizes": [leaf] + ([leaf * 2] if len(hosts) >= leaf * 2 else [])}
    return inv, version


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_any_valid_inventory_renders_consistent_files(case: tuple[dict, str]) -> None:
    inv, version = case
    files = generate(load_cluster_dict(inv), version=version)
    rep = static_check(files)
    assert rep.errors == [], (rep.errors, files)


def test_the_group_wise_checks_still_find_one_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20 item 8: gres.conf and topology are checked per group of alike hosts (set operations), not per host;
    one host that differs from its group -- an extra device line, a node in two leaves, a node in none -- is still
    found and named alone. The group-wise and the per-host path (a hand-written file with many NodeName specs) agree."""
    import sys

    from slurmkit.generate import validate

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from conf_bench import inventory

    files = generate(load_cluster_dict(inventory(2000)))
    assert static_check(files).errors == []
    extra = dict(files)
    extra["gres.conf"] += "NodeName=gpu0007 Name=gpu Type=h100 File=/dev/nvidia8\n"
    assert static_check(extra).errors == ["gres.conf vs slurm.conf for gpu0007: gpu: slurm.conf says 8, gres.conf "
                                          "gives 9; gpu:h100: slurm.conf says 8, gres.conf gives 9"]
    # the same findings through the per-host path (taken when a hand-written file has very many NodeName specs)
    extra["gres.conf"] += "".join(f"NodeName=gpu{i:04d} Name=gpu Type=l40s File=/dev/nvidia4\n" for i in (1500, 1502))
    group_wise = static_check(extra).errors
    assert group_wise[1] == ("gres.conf vs slurm.conf for gpu[1500,1502]: gpu: slurm.conf says 4, gres.conf gives 5; "
                             "gpu:l40s: slurm.conf says 4, gres.conf gives 5"), group_wise
    monkeypatch.setattr(validate, "GROUPWISE_MAX", 0)
    assert static_check(extra).errors == group_wise
    twice = dict(files)
    twice["topology.conf"] = files["topology.conf"].replace("Nodes=gpu[0033-0064]", "Nodes=gpu[0032-0064]")
    assert "topology.conf: nodes gpu0032 are in both leaf00000 and leaf00001" in static_check(twice).errors
    loose = dict(files)
    loose["topology.conf"] = files["topology.conf"].replace("Nodes=gpu[0033-0064]", "Nodes=gpu[0033-0063]")
    rep = static_check(loose)
    assert any(e.startswith("topology.conf: nodes gpu0064 are in no leaf switch") for e in rep.errors + rep.warnings)


def test_the_loaders_range_check_still_names_one_host() -> None:
    """Issue 20 item 8: the loader shows a generated tree sound on its ranges (hostlist.exact_cover); one host in two
    leaves, one unknown, or one in no leaf is still named as before (the leaves are then walked host by host)."""
    import sys

    from slurmkit.errors import SlurmkitError

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from conf_bench import inventory

    inv = inventory(2000)
    load_cluster_dict(inv)
    for leaf1, want in (("gpu[0032-0064]", "host 'gpu0032' is in both 'leaf00000' and 'leaf00001'"),
                        ("gpu[0033-0064],x1", "host 'x1' is not in any node group"),
                        ("gpu[0033-0063]", "nodes gpu0064 are in no leaf switch")):
        bad = {**inv, "topology": {"switches": [dict(s) for s in inv["topology"]["switches"]]}}
        bad["topology"]["switches"][1]["nodes"] = leaf1
        with pytest.raises(SlurmkitError, match=re.escape(want)):
            load_cluster_dict(bad)


def test_gres_cores_in_brackets_are_core_indices() -> None:
    # bitfmt2int (src/common/bitstring.c, 22.05 and 24.11) skips all but digits, '-' and ',': Cores=[0-3] is 0-3
    base = ("ClusterName=c\nSlurmctldHost=h\nGresTypes=gpu\nNodeName=n1 Sockets=2 CoresPerSocket=2 ThreadsPerCore=1 "
            "Gres=gpu:2\nPartitionName=p Nodes=n1\n")
    ok = {"slurm.conf": base, "gres.conf": "Name=gpu File=/dev/nvidia0 Cores=[0-1]\nName=gpu File=/dev/nvidia1 Cores=[2-3]\n"}
    assert static_check(ok, "24.11").errors == []
    bad = {"slurm.conf": base, "gres.conf": "Name=gpu File=/dev/nvidia0 Cores=[0-1]\nName=gpu File=/dev/nvidia1 Cores=[4-5]\n"}
    assert any("Cores=[4-5] is outside the 4 cores of n1" in e for e in static_check(bad, "24.11").errors)


def test_what_slurm_drops_or_accepts_is_not_counted_twice() -> None:
    # GresTypes empty: node_conf.c drops every Gres= (gres_name_filter) and gres.conf ignores gpu records ("Ignoring
    # gres.conf record, invalid name"), so there is no count to compare -- one error per node line, no mismatch;
    # AccountingStorageTRES=gres/gpu is accepted by slurmctld (controller.c: a gres TRES only needs a name);
    # Gres= twice on a line is "specified more than once, latest value used" (parse_config.c), a warning
    files = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nAccountingStorageTRES=gres/gpu\n"
                           "NodeName=n1 CPUs=4 Gres=gpu:a:1,gpu:b:1 Gres=gpu:a:1\nPartitionName=p Nodes=n1\n",
             "gres.conf": "Name=gpu Type=a File=/dev/nvidia0\nName=gpu Type=b File=/dev/nvidia1\n"}
    rep = static_check(files, "24.11")
    assert rep.errors == ["slurm.conf:4: NodeName=n1: Gres name 'gpu' is not in GresTypes (empty)"], rep.errors
    assert any("Gres is given 2 times on one line" in w for w in rep.warnings), rep.warnings
    assert any("AccountingStorageTRES gres/gpu names GRES 'gpu'" in w for w in rep.warnings), rep.warnings
    # a GPU line without File= is dropped by slurmd (gres.c "Remove every GPU with an empty File"): named once, and
    # the node's count is compared without it
    files = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nGresTypes=gpu\nNodeName=n1 CPUs=4 Gres=gpu:1\n"
                           "PartitionName=p Nodes=n1\n",
             "gres.conf": "Name=gpu File=/dev/nvidia0\nName=gpu Count=2\n"}
    rep = static_check(files, "24.11")
    assert rep.errors == ["gres.conf:2: GPU line without File= (Slurm drops a GPU it cannot bind to a device file)"], rep.errors


def test_reconfig_flags_per_release(lab_files: dict[str, str]) -> None:
    """read_config.c reconfig_str2flags(): KeepPowerSaveSettings from 23.02 (found with the CycleCloud corpus
    config, whose 22.05 real parse logs "Invalid ReconfigFlag: KeepPowerSaveSettings"); KeepNodeStateFuture only at
    slurm-24-11-5-1; an unknown word is fatal ("ReconfigFlags invalid", SLURM_ERROR)."""
    files = dict(lab_files)
    files["slurm.conf"] += "ReconfigFlags=KeepPartState,KeepPowerSaveSettings\n"
    assert any("ReconfigFlags KeepPowerSaveSettings (a value from Slurm 23.02): Slurm 22.05 knows only KeepPartInfo, "
               "KeepPartState" in e for e in static_check(files, "22.05").errors)
    assert static_check(files, "24.11").errors == [] and static_check(files, "26.05").errors == []
    files["slurm.conf"] += "ReconfigFlags=KeepNodeStateFuture\n"
    assert static_check(files, "24.11").errors == []
    assert any("ReconfigFlags KeepNodeStateFuture" in e for e in static_check(files, "26.05").errors)
