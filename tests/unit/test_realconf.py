"""The corpus of real configurations (tests/data/realconf/<name>/, each with a PROVENANCE file: repository, path,
commit, licence): `conf validate` gives each exactly its expected verdict per release, with no false error and
every real one named (issue 19). Each expectation cites the Slurm source or man page that decides it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmkit.adopt.read import read_site
from slurmkit.generate.validate import static_check
from tests.conftest import needs, release_under_test

CORPUS = Path(__file__).resolve().parents[1] / "data" / "realconf"

# name -> release -> (errors, warnings): substrings each finding must contain, one per finding, nothing else
EXPECTED: dict[str, dict[str, tuple[list[str], list[str]]]] = {
    # Slurm's own example: ConstrainRAMSpace=yes with SelectType=select/cons_tres and no SelectTypeParameters is
    # fine: cons_tres defaults to CR_Core_Memory (slurm.conf(5) 24.11 SelectTypeParameters; 22.05
    # src/plugins/select/cons_common/cons_common.c select_p_node_init)
    "schedmd-example": {"22.05": ([], []), "24.11": ([], [])},
    # a docker cluster: g1 has Gres=gpu:nvidia:1 in slurm.conf but File=/dev/nvidia[0-9] (10 devices) in gres.conf --
    # a real error (gres.conf(5): the File count is the GRES count; slurmctld marks the node INVALID_REG/drains on
    # a count mismatch); CgroupAutomount is defunct from 23.11 (src/interfaces/cgroup.c _defunct_option: an error
    # line, ignored), so a warning on 24.11 and nothing on 22.05 (src/common/cgroup.c reads it)
    "docker-cluster-2411": {
        "22.05": (["gres.conf vs slurm.conf for g1: gpu: slurm.conf says 1, gres.conf gives 10"], []),
        "24.11": (["gres.conf vs slurm.conf for g1: gpu: slurm.conf says 1, gres.conf gives 10"],
                  ["CgroupAutomount is defunct in Slurm 24.11"]),
    },
    # Slurm's own topology test site: valid. peta99999 is in no leaf switch, which slurmctld allows and logs (22.05
    # src/plugins/topology/tree/topology_tree.c:447 error("WARNING: switches lack access to %d nodes"), not fatal;
    # 24.11 src/plugins/topology/tree/switch_record.c:439 warning()); grp10 and grp11 have no common parent, so no
    # job spans them (topology.conf(5): "jobs can only span nodes connected by the same switch fabric")
    "slurm-test133.1-topology": {
        r: ([], ["nodes peta99999 are in no leaf switch", "2 top-level switches (grp[10-11])"])
        for r in ("22.05", "24.11", "26.05")
    },
    # a guide's file with placeholders: PartitionName=main Nodes=power9-compute-1 names a node no NodeName line
    # defines -- fatal "Invalid node names in partition main" (src/slurmctld/read_config.c:403 at slurm-22-05-8-1,
    # :368 at slurm-24-11-5-1); the placeholder names themselves (HOSTNAME, COMPUTE_NODE_NAME) are valid names
    # a docker test cluster with GPUs in name only: GresTypes is commented out, so node_conf.c passes every Gres= through
    # gres_name_filter and keeps none (22.05 src/common/gres.c:795, 24.11 src/interfaces/gres.c:855: with no GresTypes
    # it returns NULL); gres.conf's GPU lines have no File= and are removed ("Remove every GPU with an empty File",
    # 22.05 gres.c:2381, 24.11 gres.c:2831). Not errors: Gres= twice on c3/c4 (parse_config.c _handle_common, 22.05:528,
    # 24.11:536, "specified more than once, latest value used"), AccountingStorageTRES=gres/gpu without GresTypes
    # (controller.c only needs a name, 22.05:1697, 24.11:2060), CgroupAutomount defunct from 23.11 (as above)
    "docker-centos7-slurm": {
        r: (["NodeName=c2: Gres name 'gpu' is not in GresTypes", "NodeName=c3: Gres name 'gpu' is not in GresTypes",
             "NodeName=c4: Gres name 'gpu' is not in GresTypes", "gres.conf:1: GPU line without File=",
             "gres.conf:2: GPU line without File="],
            ["slurm.conf:59: Gres is given 2 times", "slurm.conf:60: Gres is given 2 times",
             "AccountingStorageTRES gres/gpu names", "AccountingStorageTRES gres/gpu:titanxp names",
             "AccountingStorageTRES gres/gpu:a100 names"] + ([] if r == "22.05" else [f"CgroupAutomount is defunct in Slurm {r}"]))
        for r in ("22.05", "24.11", "26.05")
    },
    # dask-jobqueue's CI cluster: SelectType=select/cons_res is shipped by 22.05 (src/plugins/select/cons_res at
    # slurm-22-05-8-1) and gone from 23.11 (no src/plugins/select/cons_res at slurm-24-11-5-1): slurmctld cannot load
    # it. FastSchedule=1 is "Ignoring obsolete FastSchedule=1 option" (read_config.c:4071 at 22.05, :4266 at 24.11),
    # an error line that changes nothing; ControlMachine/ControlAddr and Shared=NO are still read (read_config.c
    # _validate_and_set_defaults; "Shared" in the partition options, read_config.c:1405 at 24.11)
    "dask-jobqueue-ci": {
        "22.05": ([], ["Ignoring obsolete FastSchedule=1 option"]),
        **{r: ([f"SelectType=select/cons_res is not available in Slurm {r}"], ["Ignoring obsolete FastSchedule=1 option"])
           for r in ("24.11", "26.05")},
    },
    # its 2018 predecessor: CacheGroups is in neither release's option table (no "CacheGroups" in read_config.c at
    # slurm-22-05-8-1 or slurm-24-11-5-1), so s_p_parse_file stops with "Parsing error at unrecognized key"
    # (parse_config.c:998 at 22.05, :1005 at 24.11) and slurmctld exits; AccountingStorageLoc is fatal("The
    # AccountingStorageLoc option has been removed", read_config.c:4471 at 22.05, :4695 at 24.11; gone from the
    # option table in 25.11); cons_res and FastSchedule as for dask-jobqueue-ci
    "dask-jobqueue-ci-2018": {
        r: (["no slurm.conf key CacheGroups", "AccountingStorageLoc"]
            + ([] if r == "22.05" else [f"SelectType=select/cons_res is not available in Slurm {r}"]),
            ["Ignoring obsolete FastSchedule=1 option"])
        for r in ("22.05", "24.11", "26.05")
    },
    # pydra's CI cluster: CacheGroups (as above); c[41-44] have Gres=gpu:titanxp:1 and there is no gres.conf, so
    # slurmd takes the count from slurm.conf ("Can not stat gres.conf file (%s), using slurm.conf data", gres.c:2311
    # at 22.05, :2745 at 24.11) and then drops every file-less GPU ("Ignoring file-less GPU %s:%s from final GRES
    # list", _find_fileless_gres): the nodes register with no GPU; cons_res and FastSchedule as above
    "pydra-ci": {
        r: (["no slurm.conf key CacheGroups", "gres.conf is missing but slurm.conf nodes have Gres="]
            + ([] if r == "22.05" else [f"SelectType=select/cons_res is not available in Slurm {r}"]),
            ["Ignoring obsolete FastSchedule=1 option"])
        for r in ("22.05", "24.11", "26.05")
    },
    "stanford-power9": {
        r: (["PartitionName=main names unknown nodes or nodesets power9-compute-1"], []) for r in ("22.05", "24.11", "26.05")
    },
    # Caltech's "central" cluster: HA in the old spelling (ControlMachine/BackupController, still read by
    # read_config.c _validate_and_set_defaults in 22.05 and 24.11), power saving with 1010 State=CLOUD nodes,
    # PartitionName=DEFAULT. Its GPU nodes have Gres= and the repository holds no gres.conf: slurmd "Can not stat
    # gres.conf file (%s), using slurm.conf data" and drops every file-less GPU (as for pydra-ci below; gres.c:2311 at
    # 22.05, :2745 at 24.11). Not errors: TaskPlugin=affinity,cgroup (task.c task_g_init prefixes "task/",
    # "backward compatibility", src/slurmd/common/task_plugin.c:132 at 22.05, src/interfaces/task.c:119 at 24.11);
    # DebugFlags=PowerSave,NO_CONF_HASH (read_config.c debug_str2flags, :5822/:5855 at 22.05, :6158/:6195 at 24.11);
    # CPUs=8 on a 1 x 8 x 2 node (CPUs may equal Sockets*CoresPerSocket, read_config.c _parse_nodename);
    # JobSubmitPlugins=require_timelimit (src/plugins/job_submit/require_timelimit in both). AccountingStorageUser is
    # defunct in 26.05 (read_config.c _defunct_option there), a warning; its OverSubscribe=EXCLUSIVE partitions are
    # deprecated in 26.05 for Exclusive= (slurm.conf(5) at slurm-26-05-3-1, still read by read_config.c), a warning
    "caltech-central-clima": {
        r: (["gres.conf is missing but slurm.conf nodes have Gres="],
            [] if r != "26.05" else ["AccountingStorageUser is defunct in Slurm 26.05",
                                     "OverSubscribe=EXCLUSIVE is deprecated in Slurm 26.05"])
        for r in ("22.05", "24.11", "26.05")
    },
    # Slurm's own gres.conf test site (testsuite/expect/test7.17_configs): Nodename=DEFAULT holds the geometry
    # (2 sockets x 2 cores x 2 threads) and gres=gpu:8 for test_node[0-9]. There is no PartitionName line:
    # fatal("No PartitionName information available!") in 22.05 (src/slurmctld/read_config.c:887 at
    # slurm-22-05-8-1), allowed from 23.02.6 on. test7.17.1's Cores=[4-7] names cores 4-7 of a 4-core node: slurmd
    # converts Cores= with xcpuinfo_abs_to_mac, whose bitmap has sockets * cores bits (src/slurmd/common/xcpuinfo.c
    # :1025/:1035 at 22.05, :1157/:1167 at 24.11), so bit_unfmt fails and slurmd logs "Invalid GRES data for gpu,
    # Cores=[4-7]" and binds those GPUs to no core (src/common/gres.c:1342 at 22.05, src/interfaces/gres.c:1566 at
    # 24.11). test7.17 itself passes because its test program loads gres.conf without that conversion ("Not converting
    # Cores into machine format is only for testing", same place). test7.17.4 (no Cores=) is valid from 23.02.6
    "slurm-test7.17.1-gres": {
        r: (["gres.conf:5: Cores=[4-7] is outside the 4 cores of test_node[0-9]"]
            + (["no PartitionName line: slurmctld 22.05 exits"] if r == "22.05" else []), [])
        for r in ("22.05", "24.11", "26.05")
    },
    # SchedMD's Slinky Helm chart (slurm-operator, Apache-2.0), RENDERED BY HAND from its template with the chart's
    # default values (each substitution is listed in its PROVENANCE): a dynamic-node site (MaxNodeCount=1024, no
    # NodeName line, NodeSet by Feature=, partitions over the NodeSet and ALL). Written for Slurm 25.05; on 24.11
    # valid: auth/slurm ships (src/plugins/auth/slurm at slurm-24-11-5-1), CredType=cred/slurm loads it
    # (src/interfaces/cred.c:144 cred_g_init), cgroup.conf's IgnoreSystemd/EnableControllers are in the option table
    # (src/interfaces/cgroup.c:305/:307), cons_tres is the default SelectType (src/common/read_config.h:137). On 22.05
    # four real errors: no auth/slurm and no cred/slurm (src/plugins/auth, src/plugins/cred at slurm-22-05-8-1: jwt
    # munge none / munge none); EnableControllers is not in src/common/cgroup.c's options (unrecognized key:
    # slurmd fatal); the default SelectType is select/linear (src/common/read_config.h:163), with which slurmctld
    # refuses every dynamic node ("Node creation only compatible with select/cons_tres", src/slurmctld/node_mgr.c
    # :4658/:4728); and dynamic nodes want TreeWidth=65533 there (doc/html/dynamic_nodes.shtml:52), a warning.
    # LogTimeFormat's format_stderr and the newer SlurmctldParameters/CommunicationParameters words are not errors:
    # 22.05 matches LogTimeFormat by substring (read_config.c:4263) and ignores parameter words it does not know
    "slinky-helm-dynamic": {
        "22.05": (["AuthType=auth/slurm: Slurm 22.05 has no auth plugin 'slurm'",
                   "CredType=cred/slurm: Slurm 22.05 has no cred plugin 'slurm'",
                   "cgroup.conf:3: Slurm 22.05 has no cgroup.conf key EnableControllers (added in 23.11)",
                   "MaxNodeCount=1024 leaves room for dynamic nodes, but Slurm 22.05 registers them only with "
                   "select/cons_tres"],
                  ["dynamic nodes on Slurm 22.05 need TreeWidth=65533"]),
        **{r: ([], []) for r in ("24.11", "26.05")},
    },
    # Azure's CycleCloud Slurm (MIT) as its installer writes it, RENDERED BY HAND (the template's placeholders
    # substituted as install.py does, the chosen cluster name/host/address and every other value listed in its
    # PROVENANCE; azure.conf is the dynamic partition as the project's own test expects it): `Include` of five
    # files, MaxNodeCount=10000 and no NodeName line. Valid on 24.11 and 26.05 (the real slurmctld of each accepts
    # it; its absent power-saving scripts are host facts). On 22.05 ReconfigFlags=KeepPowerSaveSettings is fatal:
    # reconfig_str2flags knows only KeepPartInfo and KeepPartState ("Invalid ReconfigFlag", read_config.c:4869
    # "ReconfigFlags invalid" -> SLURM_ERROR -> "Unable to process configuration file", :3524, at slurm-22-05-8-1;
    # its 22.05 real parse logs exactly that), and its TreeWidth=16 is below what dynamic nodes want there
    # (doc/html/dynamic_nodes.shtml:52 at slurm-22-05-8-1, TreeWidth=65533), a warning. Not errors: the key case
    # `SlurmCtldHost` and cgroup.conf's `ConstrainRamSpace` (s_p keys compare case-insensitively), Prolog globs
    # (slurm.conf(5) Prolog, 22.05 and 24.11: "A glob pattern ... may also be used"), `HealthCheckProgram=""`
    # (parse_config.c keyvalue_pattern: a quoted value), no Default=YES partition (read_config.c "default partition
    # not set": slurmctld goes on), Include files holding only a comment
    "cyclecloud-slurm-include": {
        "22.05": (["slurm.conf:44: ReconfigFlags KeepPowerSaveSettings (a value from Slurm 23.02)"],
                  ["dynamic nodes on Slurm 22.05 need TreeWidth=65533"]),
        **{r: ([], []) for r in ("24.11", "26.05")},
    },
    # ParallelCluster's stock head-node config (aws-parallelcluster-cookbook, Apache-2.0): Include chains in all three
    # files, State=CLOUD nodes in NodeSets, typed GPU lines. Valid on every release; its UnkillableStepTimeout=180
    # with MessageTimeout=60 is advice from 24.05 on (read_config.c error_in_daemon, no fatal) -- only the real parse
    # logs it (test_parallelcluster_stock_runs_as_primary_with_its_advisory)
    "parallelcluster-stock": {r: ([], []) for r in ("22.05", "24.11", "26.05")},
    # Magic Castle (MIT): Gres=gpu:4,shard:96 with four File= GPUs and no Name=shard line -- slurmd spreads the 96,
    # 24 per GPU (gres_c_s.c _merge_lists / _distribute_count, 22.05-26.05; validate.slurmd_derived), so no finding.
    # auth/slurm and cred/slurm are 24.05+ plugins (src/plugins/auth and src/plugins/cred at slurm-22-05-8-1: munge,
    # none, jwt)
    "magic-castle-shard": {
        "22.05": (["AuthType=auth/slurm: Slurm 22.05 has no auth plugin 'slurm'",
                   "CredType=cred/slurm: Slurm 22.05 has no cred plugin 'slurm'"], []),
        **{r: ([], []) for r in ("24.11", "26.05")},
    },
    # Magic Castle of 2022: every node State=CLOUD and a global AutoDetect=nvml with no Name= line. The GPU count
    # comes from the node (no "slurm.conf says 4, gres.conf gives 0"), but AutoDetect on cloud nodes is refused by
    # slurmctld (gres.conf(5); fatal in 22.05 src/common/gres.c:2336, an error and no GRES from gres.conf in 24.11
    # src/interfaces/gres.c:2771 and 26.05 :2932). ConstrainKmemSpace is gone from 23.11 (cgroup.c options),
    # CgroupAutomount defunct (_defunct_option)
    "magic-castle-2022-nvml": {
        "22.05": (["gres.conf:6: AutoDetect=nvml with State=CLOUD nodes gpu1,node1"], []),
        **{r: (["cgroup.conf:6: Slurm " + r + " has no cgroup.conf key ConstrainKmemSpace (removed in 23.11)",
                "gres.conf:6: AutoDetect=nvml with State=CLOUD nodes gpu1,node1"],
               [f"CgroupAutomount is defunct in Slurm {r}"]) for r in ("24.11", "26.05")},
    },
    # AWS ParallelCluster's head node (Apache-2.0), RENDERED BY HAND as its Chef recipe and its own generator test
    # render it (every value in its PROVENANCE): Include chains three deep, by relative and by absolute paths under
    # /opt/slurm/etc/pcluster (read from pcluster/ of the copy: adopt/read.py tries each suffix of an absolute path),
    # gres.conf and cgroup.conf with their own Include chains. Valid on each release (its real slurmctld, and slurmd
    # -G from 23.11, accept it; its power-saving programs are host facts). Not errors: SlurmctldPort=6820-6829
    # (slurm.conf(5) SlurmctldPort "a range of ports", 22.05 and 24.11), a NodeSet's Nodes= naming State=CLOUD
    # nodes; on 24.11 and 26.05 slurmctld logs "UnkillableStepTimeout must be at least 5 times greater than
    # MessageTimeout" (180 beside 60) through error_in_daemon and goes on (read_config.c:5585 at slurm-24-11-5-1,
    # a warning line of the real parse, not of the static check)
    "aws-parallelcluster-gpu": {r: ([], []) for r in ("22.05", "24.11", "26.05")},
    # Google's slurm-gcp 5 (Apache-2.0), RENDERED BY HAND from its templates and conf.py (every value in its
    # PROVENANCE): a topology.conf and no TopologyPlugin. The default plugin reads no file (topology/none through 24.11,
    # read_config.h:157 at slurm-24-11-5-1; topology/flat from 25.05, :156 at slurm-25-05-5-1): a warning that the file
    # is not read, never an error over what is in it. CgroupAutomount is defunct from 23.11 and MaxNodeCount=64000
    # leaves room for dynamic nodes, which want TreeWidth=65533 on 22.05 (as for slinky-helm-dynamic above);
    # CommunicationParameters=NoAddrCache is defunct from 23.11 (a notice of the real parse)
    "slurm-gcp-5-topology": {
        "22.05": ([], ["topology.conf: not read by Slurm", "dynamic nodes on Slurm 22.05 need TreeWidth=65533"]),
        **{r: ([], [f"CgroupAutomount is defunct in Slurm {r}", "topology.conf: not read by Slurm"])
           for r in ("24.11", "26.05")},
    },
    "slurm-test7.17.4-gres": {
        r: (["no PartitionName line: slurmctld 22.05 exits"] if r == "22.05" else [], []) for r in ("22.05", "24.11", "26.05")
    },
}


def test_every_corpus_config_has_provenance_and_an_expectation() -> None:
    names = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
    assert names == sorted(EXPECTED)
    for name in names:
        prov = (CORPUS / name / "PROVENANCE").read_text()
        for field in ("repository:", "licence:", "files"):
            assert field in prov, (name, field)


@pytest.mark.parametrize("name, release", [(n, r) for n, per in EXPECTED.items() for r in per])
def test_static_verdict(name: str, release: str) -> None:
    files, _notes, _d = read_site(CORPUS / name)
    rep = static_check(files, release)
    errors, warnings = EXPECTED[name][release]
    assert len(rep.errors) == len(errors), rep.errors
    for want in errors:
        assert any(want in e for e in rep.errors), (want, rep.errors)
    assert len(rep.warnings) == len(warnings), rep.warnings
    for want in warnings:
        assert any(want in w for w in rep.warnings), (want, rep.warnings)


@pytest.mark.lab
@needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")
def test_schedmd_example_passes_the_real_parse_with_host_facts_as_notes() -> None:
    """The example's MailProg (default /bin/mail) is absent on a build host: slurmctld logs "Configured MailProg is
    invalid" (22.05 src/slurmctld/controller.c:378, 24.11 :724) -- a fact of this host, a note, not invalid."""
    from slurmkit.backend.realparse import validate

    release = release_under_test()
    files, _notes, _d = read_site(CORPUS / "schedmd-example")
    rep = validate(files, release)
    assert rep.errors == [] and rep.real_ok is True, (rep.real, rep.errors)
    if not Path("/bin/mail").exists():
        assert any("not checkable here" in w and "MailProg" in w for w in rep.warnings), rep.warnings


# name -> release -> what the real parse adds to the static findings (issue 33 item 5: it runs also when the static
# check fails, on a copy without the lines that check names fatal): substrings, one per finding, nothing else. Most
# confirm a static finding from the daemon's side (the same blocker, in its words); none is left unclassified.
EXPECTED_REAL: dict[str, dict[str, list[str]]] = {
    # dynamic nodes with the 22.05 default select/linear: read_config.c _validate_and_set_defaults (slurm-22-05-8-1)
    # error("MaxNodeCount only compatible with cons_tres") -> "Unable to process configuration file"
    "slinky-helm-dynamic": {"22.05": ["slurm.conf:15: slurmctld (refused): error: MaxNodeCount only compatible with cons_tres",
                                      "slurmctld (fatal): fatal: Unable to process configuration file"]},
    # no PartitionName line, fatal until 23.02.6 (read_config.c:887 at slurm-22-05-8-1)
    **{n: {"22.05": ["slurmctld (fatal): fatal: No PartitionName information available!"]}
       for n in ("slurm-test7.17.1-gres", "slurm-test7.17.4-gres")},
    # a partition naming an undefined node (read_config.c:403 at 22.05, :368 at 24.11)
    "stanford-power9": {r: ['lookup failure for node "power9-compute-1"', "fatal: Invalid node names in partition main"]
                        for r in ("22.05", "24.11", "26.05")},
    # JobAcctGatherParams=UsePSS with jobacct_gather/cgroup (refused by 24.11 and 26.05 slurmctld and slurmd, not by
    # 22.05) and AutoDetect on cloud nodes (src/interfaces/gres.c:2771 at 24.11, :2932 at 26.05); 26.05's slurmd -G
    # logs its UsePSS line with its own time stamp
    "magic-castle-2022-nvml": {
        "24.11": ["/etc/slurm/slurm-consul.conf:12: slurmctld (refused): error: JobAcctGatherParams UsePSS",
                  'gres.conf:6: slurmctld (refused): error: Cannot use AutoDetect on cloud/dynamic node "gpu1"',
                  'gres.conf:6: slurmctld (refused): error: Cannot use AutoDetect on cloud/dynamic node "node1"'],
        "26.05": ["/etc/slurm/slurm-consul.conf:12: slurmctld (refused): [",
                  'Cannot use AutoDetect on cloud/dynamic node "gpu1"', 'Cannot use AutoDetect on cloud/dynamic node "node1"',
                  "/etc/slurm/slurm-consul.conf:12: slurmd -G (refused): ["],
    },
}


@pytest.mark.lab
@needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_configs_real_parse_names_exactly_the_expected_findings(name: str) -> None:
    """Every corpus config is judged by the release's own slurmctld (and, from 23.11, its slurmd -G for gres.conf),
    static errors or not, with no error line left unclassified: a config with no expected finding is accepted, the
    others get exactly EXPECTED_REAL's lines after the static ones. Costs one slurmctld start of well under a second
    per config (no lab). The lines it logs that are no finding: 22.05's "WARNING: switches lack access to 1 nodes"
    for slurm-test133.1-topology (topology_tree.c:447) and "default partition not set" for a site without partitions
    (slurm-test7.17.4-gres on 24.11, read_config.c:1547)."""
    from slurmkit.backend.realparse import validate

    release = release_under_test()
    if release not in EXPECTED[name]:
        pytest.skip(f"{name}: no expectation for {release}")
    files, _notes, _d = read_site(CORPUS / name)
    rep = validate(files, release)
    if rep.real_ok is None:
        pytest.skip(rep.real)
    static = EXPECTED[name][release][0]
    real = rep.errors[len(static):]
    want = EXPECTED_REAL.get(name, {}).get(release, [])
    assert len(real) == len(want), (rep.real, real)
    for w, e in zip(want, real, strict=True):
        assert w in e, (w, e)
    assert rep.real_ok is (not want), rep.real


def _real(name: str):  # the real parse of a corpus config for the release under test, or skip without a judge
    from slurmkit.backend.realparse import validate

    release = release_under_test()
    files, _notes, _d = read_site(CORPUS / name)
    rep = validate(files, release)
    if rep.real_ok is None:
        pytest.skip(rep.real)
    return release, files, rep


@pytest.mark.lab
@needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")
def test_shard_count_given_only_in_slurm_conf_is_spread_by_the_real_slurmd() -> None:
    """Issue 33 item 3: magic-castle-shard's Gres=gpu:4,shard:96 with no Name=shard line is accepted by the real
    daemons of the release, and from 23.11 its slurmd -G (which judges gres.conf there) derives 24 shards on each of
    the four GPUs -- what validate.slurmd_derived models from gres_c_s.c."""
    from slurmkit.backend.realparse import real_parse

    release, files, rep = _real("magic-castle-shard")
    assert rep.real_ok is True, rep.real
    assert not any("shard" in e for e in rep.errors), rep.errors
    assert len(rep.errors) == len(EXPECTED["magic-castle-shard"][release][0]), rep.errors  # the static ones only
    if release == "22.05":
        return  # slurmctld 22.05 reads gres.conf itself (it accepted it above); its slurmd -G is not run
    view: list[str] = []
    rp = real_parse(files, release, gres_view=view)
    assert rp.ok is True, rp.message
    shards = [v for v in view if v.startswith("gpu1: Gres Name=shard")]
    assert len(shards) == 4, view
    for i, line in enumerate(shards):
        assert "Count=24 " in line and f"File=/dev/nvidia{i} " in line, line


@pytest.mark.lab
@needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")
def test_parallelcluster_stock_runs_as_primary_with_its_advisory() -> None:
    """Issue 33 item 4: ParallelCluster's stock config runs as primary on every release. From 24.05 slurmctld logs
    "UnkillableStepTimeout must be at least 5 times greater than MessageTimeout" (read_config.c error_in_daemon, no
    fatal): a warning naming slurm.conf:45; the copy's own empty state dir ("NOTE: Trying backup partition state save
    file", partition_mgr.c) is no finding."""
    release, _files, rep = _real("parallelcluster-stock")
    assert rep.errors == [] and rep.real_ok is True, (rep.real, rep.errors)
    advice = [w for w in rep.warnings if "UnkillableStepTimeout must be at least 5 times" in w]
    if release == "22.05":
        assert advice == [], rep.warnings  # 22.05 has no such check (read_config.c at slurm-22-05-8-1)
    else:
        assert advice and all(w.startswith(f"slurm.conf:45: advisory in Slurm {release} (src/common/read_config.c:")
                              for w in advice), rep.warnings
    assert not any("Trying backup" in w for w in rep.warnings + rep.errors)


@pytest.mark.lab
@needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")
def test_every_blocker_of_a_site_is_named_in_one_run() -> None:
    """Issue 33 item 5: magic-castle-2022-nvml fails the static check, and the real parse runs anyway on a copy
    without the lines the static check names as fatal, so the real daemons' own findings come in the same run,
    each with the file:line of the setting it names. 24.11 and 26.05 refuse JobAcctGatherParams=UsePSS with
    jobacct_gather/cgroup (no static rule knows it) and the AutoDetect on cloud nodes; on 22.05 the copy without
    the AutoDetect line (fatal there) runs as primary: nothing else blocks."""
    release, _files, rep = _real("magic-castle-2022-nvml")
    assert rep.real.startswith("run although the static checks failed"), rep.real
    static = EXPECTED["magic-castle-2022-nvml"][release][0]
    for want in static:
        assert any(e.startswith(want) for e in rep.errors), (want, rep.errors)
    real = rep.errors[len(static):]
    if release == "22.05":
        assert real == [] and rep.real_ok is True, (rep.real, rep.errors)
        assert "left gres.conf:6" not in rep.real  # a gres.conf line is left out by the file copy, not the rewrite
        return
    assert any(e.startswith("/etc/slurm/slurm-consul.conf:12: slurmctld (refused): ") and "UsePSS" in e
               for e in real), real
    assert any(e.startswith('gres.conf:6: slurmctld (refused): ') and 'AutoDetect on cloud/dynamic node "gpu1"' in e
               for e in real), real
    assert not any("ConstrainKmemSpace" in e for e in real), real  # left out of the copy: named once, statically
