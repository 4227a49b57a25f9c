"""The plugins each Slurm release ships, so a typo in a plugin name is caught before a daemon, slurmd or srun tries
to load it (issue 19): ``TaskPlugin=task/cgroupx`` passes slurmctld and fails every step.

PLUGINS is ``git ls-tree --name-only TAG:src/plugins/<type>/`` (directories only, without common/) at the tags of
``slurmkeys`` (22.05: slurm-22-05-8-1 ... 25.11: slurm-25-11-0-1, 26.05: slurm-26-05-3-1). ``<type>/none`` is always accepted: before 23.11 a
real plugin, from 23.11 ("Remove 'none' plugins for all but auth and cred", slurm-23-11-0-1 RELEASE_NOTES)
read_config.c _validate_and_set_defaults() reads any value containing "none" as no plugin (24.11: SwitchType,
TaskPlugin, JobAcctGatherType, JobCompType, AccountingStorageType, MpiDefault, TopologyPlugin -> topology/default ...).
"""

from __future__ import annotations

import difflib
import re

PLUGINS: dict[str, dict[str, str]] = {
    "22.05": {
        "task": "affinity cgroup cray_aries none",
        "proctrack": "cgroup cray_aries linuxproc pgid",
        "mpi": "cray_shasta none pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_res cons_tres cray_aries linear other",
        "switch": "cray_aries hpe_slingshot none",
        "job_submit": "all_partitions cray_aries defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "mysql none slurmdbd",
        "preempt": "none partition_prio qos",
        "topology": "3d_torus hypercube none tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux none",
        "jobcomp": "elasticsearch filetxt lua mysql none script",
        "auth": "jwt munge none",
        "cred": "munge none",
        "mcs": "account group none user",
        "job_container": "cncu none tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi none pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb none",
        "acct_gather_interconnect": "none ofed sysfs",
        "acct_gather_filesystem": "lustre none",
        "prep": "script",
        "site_factor": "none",
        "node_features": "helpers knl_cray knl_generic",
        "cli_filter": "lua none syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "k12",
    },
    "23.02": {
        "task": "affinity cgroup cray_aries none",
        "proctrack": "cgroup cray_aries linuxproc pgid",
        "mpi": "cray_shasta none pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_res cons_tres cray_aries linear other",
        "switch": "cray_aries hpe_slingshot none",
        "job_submit": "all_partitions cray_aries defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "mysql none slurmdbd",
        "preempt": "none partition_prio qos",
        "topology": "3d_torus hypercube none tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux none",
        "jobcomp": "elasticsearch filetxt kafka lua mysql none script",
        "auth": "jwt munge none",
        "cred": "munge none",
        "mcs": "account group none user",
        "job_container": "cncu none tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi none pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb none",
        "acct_gather_interconnect": "none ofed sysfs",
        "acct_gather_filesystem": "lustre none",
        "prep": "script",
        "site_factor": "none",
        "node_features": "helpers knl_cray knl_generic",
        "cli_filter": "lua none syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "k12",
    },
    "23.11": {
        "task": "affinity cgroup cray_aries",
        "proctrack": "cgroup cray_aries linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres cray_aries linear other",
        "switch": "cray_aries hpe_slingshot",
        "job_submit": "all_partitions cray_aries defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "3d_torus block default tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group user",
        "job_container": "cncu tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers knl_cray knl_generic",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "k12",
    },
    "24.05": {
        "task": "affinity cgroup",
        "proctrack": "cgroup linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres linear",
        "switch": "hpe_slingshot nvidia_imex",
        "job_submit": "all_partitions defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "ctld_relay mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "3d_torus block default tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group user",
        "job_container": "tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers knl_generic",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "common_xkcp k12 sha3",
        "tls": "none s2n",
    },
    "24.11": {
        "task": "affinity cgroup",
        "proctrack": "cgroup linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres linear",
        "switch": "hpe_slingshot nvidia_imex",
        "job_submit": "all_partitions defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "ctld_relay mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "3d_torus block default tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group label user",
        "job_container": "tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers knl_generic",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "common_xkcp k12 sha3",
        "tls": "none s2n",
        "certmgr": "script",
    },
    "25.05": {
        "task": "affinity cgroup",
        "proctrack": "cgroup linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres linear",
        "switch": "hpe_slingshot nvidia_imex",
        "job_submit": "all_partitions defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "ctld_relay mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "block flat tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group label user",
        "job_container": "tmpfs",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers knl_generic",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "common_xkcp k12 sha3",
        "tls": "none s2n",
        "certmgr": "script",
    },
    "25.11": {
        "task": "affinity cgroup",
        "proctrack": "cgroup linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres linear",
        "switch": "hpe_slingshot nvidia_imex",
        "job_submit": "all_partitions defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "ctld_relay mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "block flat tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group label user",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "common_xkcp k12 sha3",
        "tls": "none s2n",
        "certmgr": "script",
        "namespace": "linux tmpfs",
    },
    "26.05": {
        "task": "affinity cgroup",
        "proctrack": "cgroup linuxproc pgid",
        "mpi": "cray_shasta pmi2 pmix",
        "cgroup": "v1 v2",
        "select": "cons_tres linear",
        "switch": "hpe_slingshot nvidia_imex",
        "job_submit": "all_partitions defaults logging lua partition pbs require_timelimit throttle",
        "accounting_storage": "ctld_relay mysql slurmdbd",
        "preempt": "partition_prio qos",
        "topology": "block flat ring torus3d tree",
        "sched": "backfill builtin",
        "priority": "basic multifactor",
        "jobacct_gather": "cgroup linux",
        "jobcomp": "elasticsearch filetxt kafka lua mysql script",
        "auth": "jwt munge none slurm",
        "cred": "munge none",
        "mcs": "account group label user",
        "acct_gather_energy": "gpu ibmaem ipmi pm_counters rapl xcc",
        "acct_gather_profile": "hdf5 influxdb",
        "acct_gather_interconnect": "ofed sysfs",
        "acct_gather_filesystem": "lustre",
        "prep": "script",
        "site_factor": "example",
        "node_features": "helpers",
        "cli_filter": "lua syslog user_defaults",
        "burst_buffer": "datawarp lua",
        "hash": "common_xkcp k12 sha3",
        "tls": "none s2n",
        "certmgr": "script",
        "namespace": "linux tmpfs",
    },
}

# slurm.conf / cgroup.conf key -> (plugin type, a comma-separated list?)
KEYS: dict[str, tuple[str, bool]] = {
    "taskplugin": ("task", True), "proctracktype": ("proctrack", False), "mpidefault": ("mpi", False),
    "selecttype": ("select", False), "switchtype": ("switch", False), "jobsubmitplugins": ("job_submit", True),
    "accountingstoragetype": ("accounting_storage", False), "preempttype": ("preempt", False),
    "topologyplugin": ("topology", False), "schedulertype": ("sched", False), "prioritytype": ("priority", False),
    "jobacctgathertype": ("jobacct_gather", False), "jobcomptype": ("jobcomp", False), "authtype": ("auth", False),
    "authalttypes": ("auth", True), "credtype": ("cred", False), "mcsplugin": ("mcs", False),
    "jobcontainertype": ("job_container", False), "acctgatherenergytype": ("acct_gather_energy", False),
    "acctgatherprofiletype": ("acct_gather_profile", False),
    "acctgatherinterconnecttype": ("acct_gather_interconnect", False),
    "acctgatherfilesystemtype": ("acct_gather_filesystem", False), "prepplugins": ("prep", True),
    "prioritysitefactorplugin": ("site_factor", False), "nodefeaturesplugins": ("node_features", True),
    "clifilterplugins": ("cli_filter", True), "burstbuffertype": ("burst_buffer", False),
    "cgroupplugin": ("cgroup", False),
}


def _release(version: str) -> str:
    key = tuple(map(int, version.split(".")[:2]))
    best = "22.05"
    for v in PLUGINS:
        if tuple(map(int, v.split("."))) <= key:
            best = v
    return best


def check(key: str, value: str, version: str) -> list[str]:
    """Problems with the plugin names of ``key=value`` for ``version`` (empty: fine or not a plugin key)."""
    entry = KEYS.get(key.lower())
    if entry is None or not value.strip():
        return []
    ptype, is_list = entry
    shipped = PLUGINS[_release(version)].get(ptype, "").split()
    out = []
    for item in (value.split(",") if is_list else [value]):
        item = item.strip()
        name = item.split("/", 1)[1] if "/" in item else item
        prefix = item.split("/", 1)[0] if "/" in item else ptype
        if not item or "none" in name.lower():
            continue
        if ptype == "cgroup" and name == "autodetect":  # cgroup.conf(5): CgroupPlugin=autodetect
            continue
        if ptype == "cgroup" and name == "disabled" and tuple(map(int, version.split(".")[:2])) >= (24, 5):
            # src/interfaces/cgroup.c cgroup_g_init() from slurm-24-05-0-1: "disabled" loads no plugin (PLUGIN_NOOP);
            # cgroup.conf(5) 24.05+: "disabled", to completely disable any interaction with the cgroups
            continue
        if ptype == "mpi" and re.fullmatch(r"pmix_v\d+", name) and "pmix" in shipped:
            continue  # MpiDefault=pmix_vN names the pmix plugin built against PMIx N (mpi.conf(5)/mpi_guide)
        if ptype == "topology" and name == "none":
            continue
        if ptype == "cred" and name == "slurm" and "slurm" in PLUGINS[_release(version)].get("auth", "").split():
            # src/interfaces/cred.c cred_g_init() from slurm-23-11-0-1 (:145 at slurm-23-11-10-1, :144 at
            # slurm-24-11-5-1): CredType=cred/slurm (or "slurm") loads the auth/slurm plugin, which provides the
            # credential ops; 22.05/23.02 have no auth/slurm and no such mapping
            continue
        if prefix.replace("-", "_") != ptype and "/" in item and ptype not in ("job_submit", "prep", "node_features", "cli_filter"):
            out.append(f"{key}={value}: {item} is not a {ptype} plugin (expected {ptype}/NAME)")
            continue
        if name not in shipped:
            close = difflib.get_close_matches(name, shipped, n=1, cutoff=0.6)
            hint = f"; did you mean {f'{ptype}/' if '/' in item else ''}{close[0]}?" if close else f"; Slurm {_release(version)} ships: {', '.join(shipped) or 'none'}"
            out.append(f"{key}={value}: Slurm {_release(version)} has no {ptype} plugin {name!r}{hint}")
    return out
