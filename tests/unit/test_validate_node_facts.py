"""Issue 33 items 3-5 without a daemon: what slurmd derives from the GRES it is given (validate.slurmd_derived,
autodetect_mode), how each real-parse line is classified per release (realparse.classify), where a line points in the
site's files (realparse.locate), and what the copy leaves out (rewrite_for_copy leave_out). The lab tests of
test_realconf.py run the same corpus configs through the real daemons of 22.05, 24.11 and 26.05."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.adopt.read import read_site
from slurmkit.backend.realparse import ADVISORY, COPY, HOST, REFUSED, classify, locate, rewrite_for_copy
from slurmkit.generate.validate import autodetect_mode, slurmd_derived, static_check

CORPUS = Path(__file__).resolve().parents[1] / "data" / "realconf"


@pytest.mark.parametrize("value, release, mode, since", [
    # gres.c _handle_autodetect_flags per release (validate._AUTODETECT cites the lines)
    ("nvml", "22.05", "nvml", ""),
    ("NVML", "24.11", "nvml", ""),  # xstrcasestr: any case
    ("nvidia", "22.05", None, "24.11"),  # 22.05: "unknown autodetect flag 'nvidia'", no detection
    ("nvidia", "24.11", "nvidia", ""),
    ("nrt", "22.05", None, "23.11"),
    ("full", "24.11", None, "26.05"),
    ("full", "26.05", "full", ""),
    ("off", "22.05", "off", ""),
    ("Off", "24.11", "off", ""),  # xstrcasecmp: off in any case
])
def test_autodetect_mode_per_release(value: str, release: str, mode: str | None, since: str) -> None:
    assert autodetect_mode(value, release) == (mode, since)


def test_autodetect_nvidia_on_2205_is_named_as_detecting_nothing() -> None:
    files = {"slurm.conf": "SlurmctldHost=h\nGresTypes=gpu\nNodeName=n1 CPUs=4 Gres=gpu:2\nPartitionName=p Nodes=n1\n",
             "gres.conf": "AutoDetect=nvidia\n"}
    errors = static_check(files, "22.05").errors
    assert len(errors) == 2, errors
    assert errors[0] == ("gres.conf:1: AutoDetect=nvidia is a value from Slurm 24.11; slurmd 22.05 logs 'unknown "
                         "autodetect flag' and detects nothing")
    assert "gpu: slurm.conf says 2, gres.conf gives 0" in errors[1]  # with no detection the GPUs are really missing
    assert static_check(files, "24.11").errors == []  # the GPUs come from the node


def test_slurmd_spreads_a_shard_count_given_only_in_slurm_conf() -> None:
    want = {("gpu", "a100"): 4, ("shard", ""): 96}
    # typed File= lines, no shard line (gres_c_s.c _distribute_count)
    derived, problem = slurmd_derived(want, {("gpu", "a100"): 4}, auto=True)
    assert problem == "" and derived == want
    # AutoDetect and no explicit line at all: the GPUs are detected, the shards spread over them
    assert slurmd_derived(want, {}, auto=True) == (want, "")
    # no GPU to share them out
    derived, problem = slurmd_derived({("shard", ""): 8}, {}, auto=False)
    assert "SHARED specified without any SHARING found" in problem
    # an explicit shard line is compared as written
    assert slurmd_derived(want, {("gpu", "a100"): 4, ("shard", ""): 32}, auto=False)[0][("shard", "")] == 32


def test_global_autodetect_covers_nodes_without_a_line_and_node_local_off_does_not() -> None:
    conf = ("SlurmctldHost=h\nGresTypes=gpu\nNodeName=a1 CPUs=4 Gres=gpu:4\nNodeName=b1 CPUs=4 Gres=gpu:2\n"
            "PartitionName=p Nodes=a1,b1\n")
    assert static_check({"slurm.conf": conf, "gres.conf": "AutoDetect=nvml\n"}, "24.11").errors == []
    errors = static_check({"slurm.conf": conf, "gres.conf": "AutoDetect=nvml\nNodeName=b1 AutoDetect=off\n"},
                          "24.11").errors
    assert errors == ["gres.conf vs slurm.conf for b1: gpu: slurm.conf says 2, gres.conf gives 0"], errors


@pytest.mark.parametrize("line, release, kind, where", [
    ('error: UnkillableStepTimeout must be at least 5 times greater than MessageTimeout, otherwise nodes may go down '
     'with the reason "KillTaskFailed". Current values: UnkillableStepTimeout=180, MessageTimeout=60', "24.11",
     ADVISORY, "src/common/read_config.c:5585 error_in_daemon"),
    ("[2026-12-04T14:31:32.145] error: UnkillableStepTimeout must be at least 5 times greater than MessageTimeout",
     "26.05", ADVISORY, "src/common/read_config.c:5468 error_in_daemon"),
    ("error: NOTE: Trying backup partition state save file. Information may be lost!", "24.11", COPY,
     "src/slurmctld/partition_mgr.c:431"),
    ("error: NOTE: Trying backup partition state save file. Information may be lost!", "22.05", COPY,
     "src/slurmctld/partition_mgr.c:522"),
    ("slurmd: error: System GPU detection failed", "24.11", HOST,
     "src/plugins/gpu/nvml/gpu_nvml.c:1717, src/plugins/gpu/nvidia/gpu_nvidia.c:248"),
    ("error: System GPU detection failed", "26.05", HOST,
     "src/plugins/gpu/nvml/gpu_nvml.c:1713, src/plugins/gpu/nvidia/gpu_nvidia.c:241"),
    ("error: unknown autodetect flag 'nvidia'", "22.05", REFUSED, "src/common/gres.c:1173 _handle_autodetect_flags"),
    # slurmd -G's shard merge after detection found no GPU here: a consequence of this host (gres_c_s.c); without
    # that mark the same line is the config's own (a node whose shards have no GPU)
    ("after 'System GPU detection failed' (no GPU on this host): fatal: failed to merge SHARED and SHARING "
     "configuration", "24.11", HOST, "src/plugins/gres/common/gres_c_s.c:118, :288, :500"),
    ("fatal: failed to merge SHARED and SHARING configuration", "24.11", "fatal", ""),
    # a release without a citation keeps the conservative verdict
    ("error: UnkillableStepTimeout must be at least 5 times greater than MessageTimeout", "22.05", REFUSED, ""),
])
def test_each_real_parse_line_is_classified_by_its_source(line: str, release: str, kind: str, where: str) -> None:
    assert classify(line, release) == (kind, where)


def test_a_real_parse_line_is_located_by_the_key_it_names() -> None:
    pcluster, _n, _d = read_site(CORPUS / "parallelcluster-stock")
    assert locate("error: UnkillableStepTimeout must be at least 5 times greater than MessageTimeout", pcluster) \
        == "slurm.conf:45"
    mc, _n, _d = read_site(CORPUS / "magic-castle-2022-nvml")
    assert locate("error: _parse_next_key: Parsing error at unrecognized key: ConstrainKmemSpace", mc) == "cgroup.conf:6"
    assert locate("error: JobAcctGatherParams UsePSS and NoShared are only compatible with jobacct_gather/linux.", mc) \
        == "/etc/slurm/slurm-consul.conf:12"
    assert locate('error: Cannot use AutoDetect on cloud/dynamic node "gpu1"', mc) == "gres.conf:6"
    assert locate("error: Configured MailProg is invalid", {"slurm.conf": "SlurmctldHost=h\n"}) == ""


def test_the_copy_leaves_out_the_lines_the_static_check_names_fatal(tmp_path: Path) -> None:
    conf = "SlurmctldHost=h\nAccountingStoreJobComment=YES\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"
    copy = rewrite_for_copy(conf, tmp_path, leave_out=frozenset({"slurm.conf:2", "slurm.conf:3"}))
    assert "AccountingStoreJobComment" not in copy.text
    assert "NodeName=n1" in copy.text  # a node line stays: partitions name it
    assert copy.notes == ["left slurm.conf:2 (AccountingStoreJobComment) out of the copy (named above)"]
