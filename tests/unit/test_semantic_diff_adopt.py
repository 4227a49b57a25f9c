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
