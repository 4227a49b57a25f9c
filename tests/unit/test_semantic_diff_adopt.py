"""The semantic diff reads both sides as slurmctld does (issue 19, item 4): equivalent spellings are no change."""

from __future__ import annotations

from slurmkit.generate.rollout import semantic_diff

BASE = "ClusterName=c\n{ctl}\nNodeName=n[1-4] {geo} RealMemory=1000\nPartitionName=p Nodes=n[1-4]\n"


def conf(ctl: str = "SlurmctldHost=head", geo: str = "Sockets=2 CoresPerSocket=8 ThreadsPerCore=2") -> dict[str, str]:
    return {"slurm.conf": BASE.format(ctl=ctl, geo=geo)}


def test_control_machine_equals_slurmctld_host() -> None:
    # read_config.c _validate_and_set_defaults (22.05, 24.11): without SlurmctldHost, ControlMachine and
    # BackupController are the controllers
    assert semantic_diff(conf("ControlMachine=head"), conf(), "24.11") == []
    assert semantic_diff(conf("ControlMachine=head\nBackupController=b"), conf("SlurmctldHost=head\nSlurmctldHost=b"), "22.05") == []
    changed = semantic_diff(conf("ControlMachine=head"), conf("SlurmctldHost=other"), "24.11")
    assert [c.subject for c in changed] == ["SlurmctldHost"]


def test_equivalent_geometry_is_no_change() -> None:
    # read_config.c _parse_nodename: Sockets = Boards x SocketsPerBoard; CPUs implied; Procs= is CPUs=
    for geo in ("Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=2",
                "CPUs=32 Sockets=2 CoresPerSocket=8 ThreadsPerCore=2",
                "Procs=32 CoresPerSocket=8 ThreadsPerCore=2"):
        assert semantic_diff(conf(geo=geo), conf(), "22.05") == [], geo
    changed = semantic_diff(conf(geo="Sockets=2 CoresPerSocket=4 ThreadsPerCore=2"), conf(), "22.05")
    assert changed and all(c.action == "drain" for c in changed)


def test_unset_key_is_the_release_default_and_lists_are_sets() -> None:
    # read_config.h DEFAULT_MIN_JOB_AGE 300, DEFAULT_SLURMD_TIMEOUT 300, DEFAULT_SWITCH_TYPE "switch/none" (22.05);
    # DEFAULT_TREE_WIDTH 50 at slurm-22-05-8-1, 16 at slurm-24-11-5-1
    explicit = conf()
    explicit["slurm.conf"] += "MinJobAge=300\nSlurmdTimeout=300\nSwitchType=switch/none\nTreeWidth=16\n"
    assert [c.subject for c in semantic_diff(conf(), explicit, "22.05")] == ["TreeWidth"]
    assert semantic_diff(conf(), explicit, "24.11") == []
    a, b = conf(), conf()
    a["slurm.conf"] += "TaskPlugin=task/affinity,task/cgroup\nPrologFlags=Alloc,Contain\n"
    b["slurm.conf"] += "TaskPlugin=task/cgroup,task/affinity\nPrologFlags=contain,alloc\n"
    assert semantic_diff(a, b, "24.11") == []
    b["slurm.conf"] = b["slurm.conf"].replace("PrologFlags=contain,alloc", "PrologFlags=Alloc")
    assert [c.subject for c in semantic_diff(a, b, "24.11")] == ["PrologFlags"]


def test_partition_keys_in_any_order_and_at_their_defaults() -> None:
    a, b = conf(), conf()
    b["slurm.conf"] = b["slurm.conf"].replace("PartitionName=p Nodes=n[1-4]",
                                              "PartitionName=p State=UP MaxTime=INFINITE Default=no Nodes=n[1-4]")
    assert semantic_diff(a, b, "22.05") == []
    b["slurm.conf"] = b["slurm.conf"].replace("Default=no", "Default=YES")
    assert [c.subject for c in semantic_diff(a, b, "22.05")] == ["PartitionName=p"]


def test_gres_file_range_equals_per_device_lines_and_a_cores_change_is_named() -> None:
    a, b = conf(), conf()
    a["gres.conf"] = "NodeName=n[1-4] Name=gpu Type=h100 File=/dev/nvidia[0-1] Cores=0-7\n"
    b["gres.conf"] = ("NodeName=n[1-4] Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-7\n"
                      "NodeName=n[1-4] Name=gpu Type=h100 File=/dev/nvidia1 Cores=0-7\n")
    assert semantic_diff(a, b, "24.11") == []
    b["gres.conf"] = b["gres.conf"].replace("nvidia1 Cores=0-7", "nvidia1 Cores=8-15")
    (change,) = semantic_diff(a, b, "24.11")
    assert change.old.startswith("Cores= ") and "file=/dev/nvidia1" in change.old and "cores=8-15" in change.new


def test_control_addr_is_the_address_of_slurmctld_host() -> None:
    # read_config.c _validate_and_set_defaults (22.05, 24.11): old style, control_addr[0] is ControlAddr and
    # control_addr[1] BackupAddr -- SlurmctldHost=host(addr) in the new spelling (Slurm's own testsuite
    # test7.17_configs write ControlMachine=test_machine ControlAddr=127.0.0.1)
    old = conf("ControlMachine=head\nControlAddr=10.0.0.1\nBackupController=b\nBackupAddr=10.0.0.2")
    assert semantic_diff(old, conf("SlurmctldHost=head(10.0.0.1)\nSlurmctldHost=b(10.0.0.2)"), "24.11") == []
    moved = semantic_diff(old, conf("SlurmctldHost=head(10.0.0.9)\nSlurmctldHost=b(10.0.0.2)"), "22.05")
    assert [c.subject for c in moved] == ["SlurmctldHost"]


def test_a_node_becoming_or_leaving_cloud_is_a_change_an_initial_state_is_not() -> None:
    """slurm.conf(5) NODE CONFIGURATION State (22.05, 24.11): CLOUD "Indicates the node exists in the cloud. Its initial
    state will be treated as powered down", FUTURE "defined for future use": part of what the node is. UNKNOWN, DOWN,
    DRAIN are initial states slurmctld replaces with the saved one. Found with the Caltech corpus config, whose 1010
    CLOUD nodes could be turned into ordinary nodes with "nothing to do"."""
    for release in ("22.05", "24.11"):
        cloud = conf(geo="CPUs=8 State=CLOUD")
        changed = semantic_diff(cloud, conf(geo="CPUs=8 State=UNKNOWN"), release)
        assert [(c.subject, c.old, c.new, c.action) for c in changed] == [("NodeName=n[1-4] state", "CLOUD", "", "drain")]
        assert semantic_diff(conf(geo="CPUs=8 State=future"), conf(geo="CPUs=8"), release) != []
        assert semantic_diff(cloud, conf(geo="CPUs=8 State=cloud"), release) == []
        assert semantic_diff(conf(geo="CPUs=8 State=DOWN"), conf(geo="CPUs=8"), release) == []


def test_plugin_names_without_their_type_prefix_are_the_same_plugins() -> None:
    """task_g_init and job_submit_g_init drop a leading "task/" / "job_submit/" and add it back ("backward
    compatibility": 22.05 src/slurmd/common/task_plugin.c:132 and src/slurmctld/job_submit.c:111, 24.11
    src/interfaces/task.c:119 and src/interfaces/job_submit.c:109). Found with the Caltech corpus config
    (TaskPlugin=affinity,cgroup), whose rewrite as task/cgroup,task/affinity was reported as a change."""
    for release in ("22.05", "24.11"):
        a, b = conf(), conf()
        a["slurm.conf"] += "TaskPlugin=affinity,cgroup\nJobSubmitPlugins=lua,require_timelimit\n"
        b["slurm.conf"] += "TaskPlugin=task/cgroup,task/affinity\nJobSubmitPlugins=job_submit/lua,require_timelimit\n"
        assert semantic_diff(a, b, release) == [], release
        b["slurm.conf"] += "JobSubmitPlugins=require_timelimit,lua\n"  # the order they run in: a change
        assert [c.subject for c in semantic_diff(a, b, release)] == ["JobSubmitPlugins"]


def test_running_files_that_fail_slurms_parse_are_never_nothing_to_do() -> None:
    # an Include of a file that is gone: parse_config.c s_p_parse_file fails ('"Include" failed in file'), fatal to
    # slurmctld at its next read; the new files (same settings, no Include) fix it, and the plan restarts slurmctld
    old = {"slurm.conf": conf()["slurm.conf"] + "Include extra-nodes.conf\n"}
    changed = semantic_diff(old, conf(), "24.11")
    assert [(c.subject, c.action, c.scope) for c in changed] == [("Include extra-nodes.conf", "restart", "slurmctld")]
    assert "file not found" in changed[0].old and changed[0].new == ""
    # the same Include with its file present and saying nothing new: no change
    assert semantic_diff({**old, "extra-nodes.conf": "\n"}, conf(), "24.11") == []


def test_an_unreadable_site_file_is_one_line_naming_it(tmp_path, monkeypatch) -> None:
    # an Include of a file this user cannot read (root's mode 600): conf diff / import say which, no traceback
    import pathlib

    import pytest

    from slurmkit.adopt.read import read_site
    from slurmkit.errors import UsageError

    (tmp_path / "slurm.conf").write_text("ClusterName=c\nInclude nodes.conf\n")
    (tmp_path / "nodes.conf").write_text("NodeName=n1\n")
    real = pathlib.Path.read_text

    def denied(self, *a, **k):  # type: ignore[no-untyped-def]
        if self.name == "nodes.conf":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "read_text", denied)
    with pytest.raises(UsageError) as e:
        read_site(tmp_path)
    assert e.value.one_line() == f"{tmp_path / 'nodes.conf'}: cannot read it: Permission denied " \
                                 "(run as a user who can, e.g. root)"
