"""The real parse: a running slurmctld of the target release judges a config (I/O; an edge that runs Slurm).

``real_parse`` runs ``slurmctld -D -c -i -f COPY`` on a temporary copy that keeps the controller and node lines as
written, under the first controller's hostname in private UTS + mount + network namespaces, until it logs "Running
as primary controller" plus a short settle time, then stops it; any ``error:``/``fatal:`` line other than known
host noise fails, because bad GRES and topology lines are not fatal to slurmctld (slurm-lab.md §8). The slurmctld
is the target release's (``find_judge``): the host's when it can judge the target, else one from a cached root
(``slurmkit lab image``: 24.11 for targets 23.11-24.11), chrooted into that root; where it no longer reads gres.conf
(23.11+) ``slurmd -G`` of the same release judges that file. The message names the binaries that judged.

``validate`` is the whole check: ``generate.validate.static_check`` (pure), then this parse when it passes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmkit import hostlist
from slurmkit.backend import roots
from slurmkit.backend.run import run, stream
from slurmkit.generate import confparse as cp
from slurmkit.generate.validate import Report, _fold, static_check
from slurmkit.release import (
    DEBIAN_SUITES,
    allow_qos_fatal,
    judge_floor,
    judges,
    release_of,
    slurmctld_reads_gres_conf,
)

# --------------------------------------------------------------------------------------------------------------
# the real parse
#
# The copy keeps every line that decides what the site loads (SlurmctldHost/ControlMachine, SlurmctldPort,
# NodeName with its NodeAddr/NodeHostname, partitions) exactly as written. Only what points at the real cluster's
# services, keys and disks is replaced (auth, credentials, accounting storage, state and pid paths). The check
# then runs inside private namespaces (unshare(1), util-linux):
# - UTS: the hostname is the first controller's name, so slurmctld finds itself as the primary the way it does
#   on the site (22.05 controller.c: a host that matches no SlurmctldHost is fatal "not a valid controller");
# - mount: a private /etc/hosts bind-mounted over the real one resolves every controller and node name (and
#   name-valued NodeAddr/NodeHostname/SlurmctldAddr) to 127.0.0.1, backup controllers to BACKUP_NET; slurmctld resolves every node's address at
#   start (read_config.c _validate_slurmd_addr) and would otherwise mark unresolvable nodes FUTURE with an error;
# - network: only loopback, so the copy can neither reach the site's daemons (it pings nodes 3 s after
#   start and asks backup controllers to relinquish control) nor clash with a port used on this host.


# Lines every slurmctld on a dev box prints whatever the config: not findings about the config.
NOISE = (
    re.compile(r"mpi/pmix"),
    re.compile(r"MPI: Cannot create context for mpi/pmix"),
    re.compile(r"Couldn't load specified plugin name for mpi/pmix"),
    re.compile(r"Job accounting information gathered, but not stored"),
    re.compile(r"Even though we are collecting accounting information"),
    # a fresh StateSaveLocation (the copy always has one) has no state files yet
    re.compile(r"Could not open \w+ state file .*No such file"),
    re.compile(r"NOTE: Trying backup (partition )?state save file"),  # 24.11 partition_mgr.c:431 for part_state
    # a busy or virtualised host: slurmctld times 1000 gettimeofday() calls at start and logs an error above
    # 200 us (controller.c main(), 22.05-25.11); it says nothing about the config
    # and made the preset real-parse tests fail on a loaded build host
    re.compile(r"High latency for 1000 calls to gettimeofday\(\)"),
)
# Where the site's AccountingStorageType is slurmdbd, the copy runs with accounting_storage/none: these lines
# only say that a setting needs SlurmDBD (priority/multifactor: "PriorityWeightAge can only be used with
# SlurmDBD, ignoring", 22.05-25.05 priority_multifactor.c init) and are expected, not findings. Without slurmdbd
# on the site they are real findings: Slurm ignores the setting there too.
# Likewise a partition's AllowQos/DenyQos: QOS are slurmdbd records, so the copy has none and logs "We have no QOS on
# the system Ignoring invalid Allow/DenyQOS value(s)" (22.05 and 24.11 src/slurmctld/read_config.c); `conf validate` checks those
# names against the inventory's tenants.qos instead (generate/tenantcheck.py).
NEEDS_DBD = re.compile(r"can only be used with SlurmDBD|We have no QOS on the system")
# Lines that judge the machine the check runs on, not the config (issue 19): the site's host has them, this one
# may not. They become "not checkable here" notes, never an invalid verdict.
# - MailProg: slurmctld checks the program exists and is executable here (22.05 src/slurmctld/controller.c:378,
#   24.11 :724 "Configured MailProg is invalid"; the default is /bin/mail)
# - groups in AllowGroups resolve through this host's NSS (22.05 src/slurmctld/groups.c:240, 24.11 :223
#   "%s: Could not find configured group %s")
HOST_FACTS = (re.compile(r"Configured MailProg is invalid"), re.compile(r"Could not find configured group"))

# What each `error:` line of the real parse is (issue 19), decided by where the judge's release logs it:
# - fatal: a `fatal:` line (the daemon exits);
# - deprecated: the release still reads the key or value and says to update it;
# - defunct: the release reads the key and ignores it (a notice: remove it);
# - host: a fact of the machine the check runs on (HOST_FACTS), not of the config;
# - warning: the release logs a fact of the config through error() and goes on with the config as written (the
#   verdict lists it as a warning);
# - advisory: the release advises against a setting through error_in_daemon() and runs with it as written (no
#   fatal, nothing reset): a warning, like "warning";
# - copy artefact: the parse copy's own making (its empty StateSaveLocation), never the site's;
# - refused: every other `error:` line -- the release rejected or ignored something the config asks for.
# Only fatal and refused lines make a config invalid. Each pattern carries its source per release (tag
# slurm-YY-MM-*-1); a release without a citation here classifies the line as refused (the conservative verdict).
FATAL, REFUSED, DEPRECATED, DEFUNCT, HOST, WARNING = "fatal", "refused", "deprecated", "defunct", "host fact", "warning"
ADVISORY, COPY = "advisory", "copy artefact"


@dataclass(frozen=True)
class LineClass:
    kind: str
    pattern: re.Pattern[str]
    sources: Mapping[str, str]  # release -> the file:line that logs it there


ERROR_LINES = (
    LineClass(DEFUNCT, re.compile(r'The option "\w+" is defunct, (see man slurm\.conf|please remove it from slurm\.conf)'),
              {"22.05": "src/common/read_config.c:487 _defunct_option", "24.11": "src/common/read_config.c:504 "
               "_defunct_option", "26.05": "src/common/read_config.c:515 _defunct_option"}),
    LineClass(DEFUNCT, re.compile(r'The option "\w+" is defunct, please remove it from cgroup\.conf'),
              {"24.11": "src/interfaces/cgroup.c:138 _defunct_option",
               "26.05": "src/interfaces/cgroup.c:160 _defunct_option"}),
    LineClass(DEFUNCT, re.compile(r'The CommunicationParameters option "NoAddrCache" is defunct'),
              {"24.11": "src/common/read_config.c:4118", "26.05": "src/common/read_config.c:3950"}),
    LineClass(DEFUNCT, re.compile(r'The SlurmctldParameters option "cloud_reg_addrs" is defunct'),
              {"24.11": "src/common/read_config.c:5281", "26.05": "src/common/read_config.c:6215"}),
    LineClass(DEPRECATED, re.compile(r"Ignoring obsolete FastSchedule=1 option"),
              {"22.05": "src/common/read_config.c:4071", "24.11": "src/common/read_config.c:4266",
               "26.05": "src/common/read_config.c:4120"}),
    LineClass(DEPRECATED, re.compile(r"SbcastParameters has been renamed to BcastParameters"),
              {"22.05": "src/common/read_config.c:3903", "24.11": "src/common/read_config.c:4091",
               "26.05": "src/common/read_config.c:3919"}),
    LineClass(DEPRECATED, re.compile(r"Translating obsolete 'MpiDefault=openmpi' option to 'MpiDefault=none'"),
              {"22.05": "src/common/read_config.c:4406"}),
    LineClass(DEPRECATED, re.compile(r"DebugFlag Task has been removed, please use CPU_Bind"),
              {"22.05": "src/common/read_config.c:5845", "24.11": "src/common/read_config.c:6183",
               "26.05": "src/common/read_config.c:6082"}),
    # nodes in no leaf switch of topology/tree: allowed, they only cannot share a job with the rest; 22.05 logs it
    # through error() (tree/topology_tree.c:447 error("WARNING: switches lack access to %d nodes: %s")), 24.11 and
    # 26.05 through warning() (tree/switch_record.c:439 and :552), which is no error line
    LineClass(WARNING, re.compile(r"WARNING: switches lack access to \d+ nodes"),
              {"22.05": "src/plugins/topology/tree/topology_tree.c:447"}),
    # no partition with Default=YES (or none at all, allowed from 23.02.6): slurmctld goes on and refuses only the jobs
    # that name no partition (job_mgr.c _get_job_parts: ESLURM_DEFAULT_PARTITION_NOT_SET, :6874 at 22.05, :6519 at
    # 24.11): a site's choice
    LineClass(WARNING, re.compile(r"read_slurm_conf: default partition not set"),
              {"22.05": "src/slurmctld/read_config.c:1593", "24.11": "src/slurmctld/read_config.c:1547",
               "26.05": "src/slurmctld/read_config.c:1676"}),
    LineClass(HOST, HOST_FACTS[0], {"22.05": "src/slurmctld/controller.c:378", "24.11": "src/slurmctld/controller.c:724",
                                    "26.05": "src/slurmctld/controller.c:843"}),
    LineClass(HOST, HOST_FACTS[1], {"22.05": "src/slurmctld/groups.c:240", "24.11": "src/slurmctld/groups.c:223",
                                    "26.05": "src/slurmctld/groups.c:223"}),
    # power saving: slurmctld checks that an absolute SuspendProgram/ResumeProgram/ResumeFailProgram is executable
    # here (power_save.c _valid_prog: access(X_OK), stat, mode), then disables power saving for an invalid one and
    # goes on -- a fact of this host where the site's script is absent, not of the config. A relative path is a
    # config error ("not absolute pathname") and stays refused. 26.05 moved the check to power_action.c
    # power_action_valid_prog() and names the program in "Invalid <Key> PowerAction <name> (<program>)".
    LineClass(HOST, re.compile(r"power_save program /\S* (is not executable|not executable|not found|has group or world "
                               r"write)"),
              {"22.05": "src/slurmctld/power_save.c:1004 _valid_prog", "24.11": "src/slurmctld/power_save.c:1089 "
               "_valid_prog", "26.05": "src/common/power_action.c:122 power_action_valid_prog"}),
    LineClass(HOST, re.compile(r"Invalid (Reboot|Suspend|Resume|ResumeFail)Program PowerAction \S+ \(/"),
              {"26.05": "src/slurmctld/power_save.c:1427-1442"}),
    LineClass(HOST, re.compile(r"power_save module disabled, invalid SuspendProgram /"),
              {"22.05": "src/slurmctld/power_save.c:975", "24.11": "src/slurmctld/power_save.c:1050"}),
    LineClass(HOST, re.compile(r"power_save module disabled, invalid ResumeProgram /"),
              {"22.05": "src/slurmctld/power_save.c:985", "24.11": "src/slurmctld/power_save.c:1058"}),
    # a key given twice on one line (Gres= twice on a NodeName line): parse_config.c _handle_common logs it and keeps
    # the last value (the static check warns "Gres is given 2 times on one line")
    LineClass(WARNING, re.compile(r"\w+ [12] specified more than once, latest value used"),
              {"22.05": "src/common/parse_config.c:528 _handle_common", "24.11": "src/common/parse_config.c:536 "
               "_handle_common", "26.05": "src/common/parse_config.c:536 _handle_common"}),
    # UnkillableStepTimeout below 5 x MessageTimeout: error_in_daemon() and nothing else -- no fatal, the value is
    # kept (_validate_and_set_defaults; not in 22.05, from slurm-24-05-0-1). ParallelCluster's stock slurm.conf
    # (UnkillableStepTimeout=180, MessageTimeout=60) runs so as primary.
    LineClass(ADVISORY, re.compile(r"UnkillableStepTimeout must be at least 5 times greater than MessageTimeout"),
              {"24.11": "src/common/read_config.c:5585 error_in_daemon", "26.05": "src/common/read_config.c:5468 "
               "error_in_daemon"}),
    # the copy's StateSaveLocation is new and empty: each state loader falls back to its backup file and logs so
    # (partition_mgr.c load_all_part_state -> _open_part_state_file; node_mgr.c, job_mgr.c, reservation.c,
    # trigger_mgr.c, front_end.c log the same NOTE for theirs). 26.05 logs none (gone from src/slurmctld).
    LineClass(COPY, re.compile(r"NOTE: Trying backup [\w ]*state save file"),
              {"22.05": "src/slurmctld/partition_mgr.c:522", "24.11": "src/slurmctld/partition_mgr.c:431"}),
    # slurmd -G on a host with no GPU (or none of the AutoDetect mode's library): the GPU plugin's system list is
    # empty -- a fact of this machine, not of gres.conf (gpu_nvml.c / gpu_nvidia.c gpu_p_get_system_gpu_list)
    LineClass(HOST, re.compile(r"System GPU detection failed"),
              {"22.05": "src/plugins/gpu/nvml/gpu_nvml.c:1527", "24.11": "src/plugins/gpu/nvml/gpu_nvml.c:1717, "
               "src/plugins/gpu/nvidia/gpu_nvidia.c:248", "26.05": "src/plugins/gpu/nvml/gpu_nvml.c:1713, "
               "src/plugins/gpu/nvidia/gpu_nvidia.c:241"}),
    # an AutoDetect mode the release does not know (22.05: nvidia; before 26.05: full): no flag is set and slurmd
    # runs with no autodetection -- refused, and named (the static check says which release has the mode)
    LineClass(REFUSED, re.compile(r"unknown autodetect flag '[^']*'"),
              {"22.05": "src/common/gres.c:1173 _handle_autodetect_flags", "24.11": "src/interfaces/gres.c:1281 "
               "_handle_autodetect_flags", "26.05": "src/interfaces/gres.c:1377 _handle_autodetect_flags"}),
)


# slurmd -G on a host with no GPU: once the AutoDetect plugin finds none ("System GPU detection failed"), the shard/mps
# records have no GPU to be spread over and gres_c_s.c fails their merge (src/plugins/gres/common/gres_c_s.c:288
# "SHARING configuration lacks \"File\" specification", :118 "SHARED specified without any SHARING found", :500
# fatal "failed to merge SHARED and SHARING configuration", at slurm-24-11-5-1 and slurm-26-05-3-1): a consequence
# of this host, which a GPU node with its detected devices does not have. _gres_by_slurmd marks those lines.
NO_GPU_HERE = "after 'System GPU detection failed' (no GPU on this host): "
SHARED_MERGE = re.compile(r'SHARING configuration lacks "File"|SHARED specified without any SHARING found|'
                          r"failed to merge SHARED and SHARING configuration")


def classify(line: str, release: str) -> tuple[str, str]:
    """(kind, where ``release`` logs it) of one error/fatal line of the real parse (ERROR_LINES)."""
    if line.startswith(NO_GPU_HERE):
        return HOST, "src/plugins/gres/common/gres_c_s.c:118, :288, :500"
    if re.search(r"\bfatal:", line):
        return FATAL, ""
    for c in ERROR_LINES:
        if release in c.sources and c.pattern.search(line):
            return c.kind, c.sources[release]
    return REFUSED, ""
# Lines the copy itself causes: expected, not findings. With HA controllers the primary asks each backup to give
# up control (22.05-25.05 controller.c _shutdown_bu_thread); in the copy no backup runs, and its address fails
# at once (see BACKUP_NET).
COPY_CAUSED = (re.compile(r"_shutdown_bu_thread"),)
# Where the copy's /etc/hosts puts the backup controllers: TEST-NET-1 (RFC 5737, never routed). The private
# network namespace has only loopback, so connect() to it fails at once with "Network is unreachable"
# (the script checks that no route exists before starting slurmctld) and no packet can leave the namespace.
# Loopback would not do: 24.11 slurmctld opens its RPC ports before it asks the backups to relinquish control
# (slurm-24-11-5-1 src/slurmctld/controller.c main(): _open_ports() before the primary/backup loop that calls
# _shutdown_backup_controller()), so a backup named 127.0.0.1 is the copy itself, which accepts the connection
# and never answers while it starts; _shutdown_bu_thread then waits CONTROL_TIMEOUT (30 s, slurmctld.h) and the
# parse ran past its 15 s deadline. 22.05 opens its ports later (in _slurmctld_rpc_mgr), so there loopback was
# refused at once.
BACKUP_NET = "192.0.2."
PRIMARY = "Running as primary controller"
SETTLE = 1.5  # seconds to keep reading after PRIMARY: plugins (priority, sched) log their errors right after it

# Keys removed from the copy: they point at services, keys or files of the real cluster.
_DROP = {
    k.lower()
    for k in (
        "AuthInfo AuthAltTypes AuthAltParameters SlurmdUser AccountingStorageHost AccountingStoragePort "
        "AccountingStoragePass AccountingStorageUser AccountingStorageTRES AccountingStorageEnforce "
        "AccountingStorageBackupHost AccountingStorageExternalHost JobCompType JobCompLoc JobCompHost JobCompPort "
        "JobCompUser JobCompPass JobCredentialPrivateKey JobCredentialPublicCertificate SlurmctldLogFile "
        "SlurmSchedLogFile"
    ).split()
}
_SCRIPTS = {
    k.lower()
    for k in "Prolog Epilog HealthCheckProgram PrologSlurmctld EpilogSlurmctld ResvProlog ResvEpilog TaskProlog TaskEpilog SrunProlog SrunEpilog RebootProgram".split()
}
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_DEFAULT_TRES = {"billing", "cpu", "energy", "mem", "node", "fs/disk", "pages", "vmem"}


# Plugins a distribution packages apart from the daemons, so a judge may lack one the site installs: Debian ships
# acct_gather_energy_ipmi in slurm-wlm-ipmi-plugins (not in the lab roots' slurm-wlm-basic-plugins) and mpi_pmix in
# slurm-wlm-basic-plugins for 22.05 and 24.11 but in no package of 26.05.5 (unstable): measured on the lab roots. A
# judge without the plugin dies on it ("cannot find acct_gather_energy plugin for acct_gather_energy/ipmi", then
# "can not open the (null) plugin": fatal) and judges nothing else, so the copy leaves such a line out with a note;
# the name itself is checked against the release's plugin list (generate/slurmplugins.py).
_PACKAGED = {"acctgatherenergytype": "acct_gather_energy", "mpidefault": "mpi"}


def _plugin_installed(root: str, value: str) -> bool:
    """``value`` (``acct_gather_energy/ipmi``) has its shared object in one of ``root``'s plugin directories."""
    so = value.replace("/", "_") + ".so"
    base = root.rstrip("/")
    import glob

    dirs = glob.glob(f"{base}/usr/lib/*/slurm-wlm") + glob.glob(f"{base}/usr/lib*/slurm") + glob.glob(f"{base}/usr/local/lib*/slurm")
    return any(os.path.exists(os.path.join(d, so)) for d in dirs)


def installed_slurmctld() -> tuple[str | None, str]:
    """(path, release like '22.05') of the slurmctld on PATH (sbin included), or (None, reason)."""
    path, version = _installed_version()
    if path is None:
        return None, version
    return path, release_of(version)


def _installed_version() -> tuple[str | None, str]:
    """(path, version like '22.05.8') of the host's slurmctld, or (None, reason)."""
    path = roots.host_program("slurmctld")  # a lab's wrapper on PATH is that release's root, found via roots below
    if not path:
        return None, "slurmctld is not installed"
    res = run([path, "-V"], timeout=10, check=False)
    m = re.search(r"\d+\.\d+\.\d+", res.stdout + res.stderr)
    if not m:
        return None, f"cannot read the version of {path}: {(res.stdout + res.stderr).strip()[:80]}"
    return path, m.group(0)


@dataclass(frozen=True)
class Judge:
    """The Slurm that real-parses a config: the host's own, or a cached root's (``slurmkit lab image``), which
    runs ``chroot``ed into that root inside the private namespaces (its libraries and plugins, not the host's)."""

    release: str  # "24.11"
    version: str  # "24.11.5"
    root: str | None = None  # the root filesystem it runs in; None: the host's own
    host_path: str = ""  # the host's slurmctld (root is None)

    def path(self, program: str = "slurmctld") -> str:
        """Where ``program`` is as seen from the host."""
        if self.root is None:
            return str(Path(self.host_path).with_name(program)) if program != "slurmctld" else self.host_path
        return f"{self.root}/usr/sbin/{program}"

    def describe(self, program: str = "slurmctld") -> str:
        return f"{program} {self.version} ({self.path(program)})"


def find_judge(target: str | None) -> tuple[Judge | None, str]:
    """The slurmctld that judges a config for ``target``: the host's when it can (``release.judges``), else a
    cached root's; (None, why not) when neither can."""
    cands: list[Judge] = []
    why: list[str] = []
    path, version = _installed_version()
    if path is not None:
        cands.append(Judge(release_of(version), version, None, path))
    else:
        why.append(version)
    for img in roots.list_images():
        if (img.root / "usr/sbin/slurmctld").exists() and all(c.release != img.release for c in cands):
            cands.append(Judge(img.release, img.slurm_version, str(img.root)))
    if not cands:
        return None, why[0] if why else "slurmctld is not installed"
    if not target:
        return cands[0], ""
    for c in cands:
        if judges(c.release, target):
            return c, ""
    have = "; ".join(
        f"{'installed' if c.root is None else 'root'} slurmctld is {c.release} ({c.path()}, judges "
        + (f"{judge_floor(c.release)}-{c.release}" if judge_floor(c.release) != c.release else c.release) + ")"
        for c in cands)
    hint = f"; `slurmkit lab image build {target}` adds one" if target in DEBIAN_SUITES and all(
        c.release != target for c in cands) else ""
    return None, (f"config targets Slurm {target}, no slurmctld here can judge it: {have} (a newer config has keys "
                  f"and plugins an older slurmctld rejects, an older one what a newer slurmctld refuses){hint}")


def _namespaces() -> tuple[list[str] | None, str, str]:
    """(the ``unshare`` argv prefix for private UTS + mount + network namespaces, the ``ip`` binary, why not).
    Root gets them directly; anyone else through a user namespace (``--map-root-user``) where the kernel allows."""
    path = shutil.which("unshare") or shutil.which("unshare", path="/usr/bin:/bin")
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if not path or not ip:
        return None, "", f"{'unshare (util-linux)' if not path else 'ip (iproute2)'} is not installed"
    argv = [path, *([] if os.geteuid() == 0 else ["--map-root-user"]), "--uts", "--mount", "--net",
            "--propagation", "private"]
    # and a pid namespace whose first process dies with unshare (--kill-child, util-linux 2.32+: SIGKILL to the
    # forked child when unshare terminates; the kernel then kills every process of the namespace): with the
    # PR_SET_PDEATHSIG run.stream sets on unshare, a `conf validate` ended by any signal, SIGKILL included, leaves no
    # slurmctld behind (issue 32 item 7: one was left per interrupted run)
    for extra in (["--pid", "--fork", "--kill-child"], []):
        res = run([*argv, *extra, "true"], timeout=10, check=False)
        if res.rc == 0:
            return [*argv, *extra], ip, ""
    return None, "", f"cannot create private namespaces: {(res.stderr or res.stdout).strip()[:120]}"


def controller_host(name: str) -> tuple[str, str]:
    """``head01(10.0.0.1)`` -> ("head01", "10.0.0.1"); ``head01`` -> ("head01", "")."""
    m = re.fullmatch(r"([^()]*)(?:\(([^()]*)\))?", name.strip())
    return (m.group(1), m.group(2) or "") if m else (name, "")


@dataclass
class Copy:
    """The slurm.conf a private copy starts with, the hostname it runs under, and the names it must resolve."""

    text: str
    primary: str
    names: list[str]
    notes: list[str]
    dbd: bool  # the site's AccountingStorageType is slurmdbd
    backups: list[str] = field(default_factory=list)  # controller names after the primary

    def hosts(self) -> str:
        """The copy's /etc/hosts: every name on loopback, backup controllers on unreachable addresses."""
        backups = {n: f"{BACKUP_NET}{i + 1}" for i, n in enumerate(dict.fromkeys(self.backups))}
        return "127.0.0.1 localhost\n" + "".join(f"{backups.get(n, '127.0.0.1')} {n}\n" for n in self.names)


def rewrite_for_copy(slurm_conf: str, tmp: Path, inside: Path | None = None, root: str = "/",
                     files: Mapping[str, str] | None = None, judge_release: str = "22.05",
                     leave_out: frozenset[str] = frozenset()) -> Copy:
    """The copy of ``slurm.conf`` a parse in private namespaces starts with (see the section comment). ``inside``
    is where ``tmp`` is as the judge sees it (``/tmp`` of a root it is chrooted into), ``root`` where the judge's
    ``/`` is on the host (a site script absent there is dropped). ``Include`` files (from ``files``, as
    confparse.expand_includes resolves them) are written inline, so the copy reads no path of this host; every
    line is written back as Slurm reads it (Record.render keeps quoted values quoted).

    Where the site keeps its QOS in slurmdbd and the judge (``judge_release``) refuses a partition's AllowQos/DenyQos
    naming unknown QOS (``release.allow_qos_fatal``, 25.11+), those keys are left out of the copy, which has no
    slurmdbd and so no QOS: there they would be fatal for every config. `conf validate` checks the names against
    the inventory's tenants.qos instead (generate/tenantcheck.py). Without slurmdbd on the site the fatal line is
    the site's own and stays a finding.

    ``leave_out``: the ``file:line`` of setting lines the static check already names as fatal (issue 33 item 5): the
    copy goes without them, so the real daemon judges everything after the first of them in the same run."""
    notes: list[str] = []
    at = inside or tmp
    paths = {
        "statesavelocation": at / "state",
        "slurmdspooldir": at / "spool",
        "slurmctldpidfile": at / "slurmctld.pid",
        "slurmdpidfile": at / "slurmd.pid",
        "slurmdlogfile": at / "slurmd.log",
    }
    fixed = {
        "authtype": "auth/none",
        "credtype": "cred/none",
        "slurmuser": "root",  # uid 0 inside the namespaces (root, or this user mapped to root)
        "accountingstoragetype": "accounting_storage/none",
        **{k: str(v) for k, v in paths.items()},
    }
    out: list[str] = []
    done: set[str] = set()
    names: dict[str, None] = {}  # ordered set
    controllers: list[str] = []
    control_machine = ""
    backup_controller: list[str] = []
    dbd = False

    def add_names(spec: str, where: str) -> None:
        for item in (x for x in hostlist.split_top(spec) if x):
            for h in hostlist.expand(item, where):
                if h and not _IPV4.match(h) and ":" not in h:
                    names.setdefault(h)

    recs = list(cp.expand_includes(slurm_conf, "slurm.conf", files, [], release=judge_release))
    site_dbd = any(k.lower() == "accountingstoragetype" and v.lower().endswith("/slurmdbd")
                   for rec in recs for k, v in rec.pairs)
    for rec in recs:
        raw = rec.render()
        if rec.where in leave_out and rec.kind not in ("nodename", "partitionname", "nodeset", "downnodes"):
            notes.append(f"left {rec.where} ({rec.pairs[0][0] if rec.pairs else ''}) out of the copy (named above)")
            continue
        if rec.kind == "nodename":
            if rec.head.upper() != "DEFAULT":
                d = rec.as_dict()
                add_names(rec.head, "slurm.conf NodeName")
                for k in ("nodeaddr", "nodehostname"):
                    if d.get(k):
                        add_names(d[k], f"slurm.conf NodeName={rec.head} {k}")
            out.append(raw)
            continue
        if rec.kind == "partitionname" and site_dbd and allow_qos_fatal(judge_release):
            qos = [(k, v) for k, v in rec.pairs[1:] if k.lower() in ("allowqos", "denyqos")]
            if qos:
                notes.append(f"left {', '.join(f'{k}={v}' for k, v in qos)} of partition {rec.head} out of the "
                             "copy (no slurmdbd there, so no QOS; unknown QOS are fatal from 25.11)")
                out.append(rec.render([p for i, p in enumerate(rec.pairs) if i == 0 or p not in qos]))
                continue
        if rec.kind in ("partitionname", "nodeset", "downnodes"):
            out.append(raw)
            continue
        keep = []
        for k, v in rec.pairs:
            lk = k.lower()
            if lk == "slurmctldhost":
                host, addr = controller_host(v)
                controllers.append(host)
                names.setdefault(host)
                if addr:
                    add_names(addr, "slurm.conf SlurmctldHost")
            elif lk in ("controlmachine", "backupcontroller", "controladdr", "backupaddr", "slurmctldaddr"):
                if lk == "controlmachine":
                    control_machine = v
                if lk == "backupcontroller":
                    backup_controller.append(v)
                add_names(v, f"slurm.conf {k}")
            if lk == "accountingstoragetype":
                dbd = v.lower().endswith("/slurmdbd")
            if lk in _DROP:
                continue
            if lk in fixed:
                if lk not in done:
                    keep.append((k, fixed[lk]))
                    done.add(lk)
                continue
            if lk == "plugindir" and root != "/":
                # a judge chrooted into its root sees the root's plugins at their own path: a lab of that release
                # names them from the host (ROOT/usr/lib/...); a site dir the root lacks would only fail to load
                mine = [d[len(root.rstrip("/")):] if d.startswith(root.rstrip("/") + "/") else d for d in v.split(":")]
                kept = [d for d in mine if d and os.path.isdir(os.path.join(root, d.lstrip("/")))]
                if kept != v.split(":"):
                    notes.append(f"PluginDir={v} read as {':'.join(kept) or 'the default'} inside {root}")
                if not kept:
                    continue
                v = ":".join(kept)
            # MpiDefault is written without its type (slurm.conf(5): "MpiDefault=pmix"), the others with it
            plugin = v if "/" in v or lk not in _PACKAGED else f"{_PACKAGED[lk]}/{v}"
            if (lk in _PACKAGED and "none" not in v.lower() and plugin.lower().startswith(_PACKAGED[lk] + "/")
                    and not _plugin_installed(root, plugin)):
                notes.append(f"{k}={v} not judged: this judge's Slurm has no {plugin.replace('/', '_')}.so (packaged "
                             "apart; the site must install it)")
                continue
            if lk == "priorityweighttres" and site_dbd:
                # the copy has no slurmdbd, so no AccountingStorageTRES (_DROP: "slurmdbd is required to run with TRES
                # gres/gpu", fatal), so a weight on such a TRES is "not a configured TRES type" and fatal there ("failed
                # to parse tres weights str", src/common/slurm_protocol_api.c:322/:375 at slurm-22-05-8-1, :313/:366 at
                # slurm-24-11-5-1) -- the copy's making. The TRES every cluster has stay (slurm.conf(5)
                # AccountingStorageTRES: "By default Billing, CPU, Energy, Memory, Node, FS/Disk, Pages and VMem are
                # tracked")
                items = [x for x in v.split(",") if x]
                kept = [x for x in items if x.split("=")[0].strip().lower() in _DEFAULT_TRES]
                if kept != items:
                    notes.append(f"left {','.join(x for x in items if x not in kept)} of {k} out of the copy (those "
                                 "TRES need slurmdbd, which the copy has not)")
                    if not kept:
                        continue
                    v = ",".join(kept)
            if lk == "jobsubmitplugins" and files is not None and "job_submit.lua" not in files:
                # job_submit/lua loads job_submit.lua beside slurm.conf at start and is fatal without it ("Unable to
                # stat", then "failed to initialize job_submit plugin": job_submit_lua.c init, 22.05-26.05); the
                # copy has the site's script only when it was given (`conf validate` reads the config files)
                plugins = [x for x in v.split(",") if x.strip().lower() not in ("lua", "job_submit/lua")]
                if len(plugins) != len(v.split(",")):
                    notes.append(f"left job_submit/lua out of {k} (no job_submit.lua given to judge)")
                    if not plugins:
                        continue
                    v = ",".join(plugins)
            if lk in _SCRIPTS and not (os.access(v, os.X_OK) or os.access(os.path.join(root, v.lstrip("/")), os.X_OK)):
                notes.append(f"dropped {k}={v} (not present on this host)")
                continue
            keep.append((k, v))
        if keep:
            out.append(rec.render(keep))
    for lk, v in fixed.items():
        if lk not in done:
            out.append(f"{lk}={v}")
    (tmp / "state").mkdir(exist_ok=True)
    (tmp / "spool").mkdir(exist_ok=True)
    if not controllers:  # ControlMachine=a,b / BackupController=c (the pre-SlurmctldHost spelling)
        controllers = [c for c in control_machine.split(",") if c] + backup_controller
    primary = controllers[0] if controllers else ""
    return Copy("\n".join(out) + "\n", primary, list(names), notes, dbd, controllers[1:])


@dataclass
class RealParse:
    ok: bool | None  # None = skipped
    message: str
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    expected: list[str] = field(default_factory=list)  # error lines the copy causes, not the config
    judge: str = ""  # which binary judged: "slurmctld 24.11.5 (/var/cache/slurmkit/roots/24.11/usr/sbin/slurmctld)"
    host_facts: list[str] = field(default_factory=list)  # error lines about this host, not the config (HOST_FACTS)
    # deprecation and defunct notices: (kind, where the judge's release logs it, the line); never make it invalid
    notices: list[tuple[str, str, str]] = field(default_factory=list)
    release: str = ""  # the judge's release ("24.11"): what ``classify`` reads the lines by
    by_slurmd: list[str] = field(default_factory=list)  # the lines slurmd -G logged (gres.conf), not slurmctld


def inline_includes(name: str, files: Mapping[str, str], release: str | None = None, _depth: int = 0) -> str:
    """``files[name]`` with each Include line whose file the set holds replaced by that file's text (recursively,
    as confparse.resolve_include resolves the name for ``release``), every other line byte for byte: gres.conf and
    cgroup.conf of the copy read no path of this host either (a ParallelCluster gres.conf includes files by
    absolute paths under /opt/slurm/etc/pcluster, which the judge would stat for 60 s, then fail). An Include the
    set lacks stays, so the judge fails on it as the site's daemons would."""
    out = []
    for line in files[name].split("\n"):
        recs = cp.parse_records(line, name)
        target = cp.resolve_include(recs[0].head, "", name, release) if len(recs) == 1 and recs[0].include else ""
        if target and target in files and "%c" not in recs[0].head and _depth < 16:
            out.append(inline_includes(target, files, release, _depth + 1).rstrip("\n"))
        else:
            out.append(line)
    return "\n".join(out)


def real_parse(files: Mapping[str, str], version: str | None = None, timeout: float = 30.0,
               settle: float = SETTLE, leave_out: frozenset[str] = frozenset(),
               gres_view: list[str] | None = None) -> RealParse:
    """Start a real slurmctld of the target release (``find_judge``) on a copy of the files, under the first
    controller's name in private namespaces, and collect its error lines until ``settle`` seconds after it runs
    as the primary controller. Where that release's slurmctld does not read gres.conf (23.11+), ``slurmd -G``
    of the same release judges it (``_gres_by_slurmd``). ``gres_view``: a list that gets what ``slurmd -G`` of the
    release derives per node ("NODE: Gres Name=shard ... Count=24 ... File=/dev/nvidia0") where slurmd -G judges
    gres.conf (23.11+; the 22.05 slurmd -G logs to the copy's SlurmdLogFile and knows no CgroupPlugin=disabled)."""
    target = version or cp.header_version(files.get("slurm.conf", ""))
    judge, why = find_judge(target)
    if judge is None:
        return RealParse(None, f"real parse skipped: {why}")
    ns, ip, why = _namespaces()
    if ns is None:
        return RealParse(None, f"real parse skipped: {why}")
    inside = None  # a root's judge sees the host's /tmp through its view (_script)
    with tempfile.TemporaryDirectory(prefix="slurmkit-validate-") as td:
        tmp = Path(td)
        etc = tmp / "etc"
        etc.mkdir()
        for name, body in files.items():
            # slurm.conf's Includes are inlined by rewrite_for_copy; gres.conf's and cgroup.conf's are read by the
            # daemons beside slurm.conf (read_config.c get_extra_conf_path: a relative name, subfolders too, as
            # ParallelCluster's "include pcluster/slurm_parallelcluster_gpu_gres.conf"): a relative name goes into
            # the copy; an absolute or upward one never writes outside it, and gres.conf/cgroup.conf get the
            # included files the set holds inlined (an absolute Include would be stat()ed on this host)
            parts = Path(name).parts
            if name.startswith("/") or ".." in parts or not parts:
                continue
            (etc / name).parent.mkdir(parents=True, exist_ok=True)
            lines = body.splitlines(keepends=True)
            if any(w.startswith(f"{name}:") for w in leave_out):  # cgroup.conf:6 named fatal by the static check
                lines = ["" if f"{name}:{i}" in leave_out else ln for i, ln in enumerate(lines, 1)]
            text = "".join(lines)
            if name in ("gres.conf", "cgroup.conf"):
                text = inline_includes(name, {**files, name: text}, target)
            (etc / name).write_text(text)
        try:
            copy = rewrite_for_copy(files["slurm.conf"], tmp, inside, judge.root or "/", files, judge.release,
                                    leave_out)
        except Exception as exc:  # a hostlist the copy cannot expand: slurmctld would refuse it too
            return RealParse(False, f"slurm.conf: {exc}", [str(exc)], judge=judge.describe())
        if not copy.primary:
            return RealParse(False, "slurm.conf names no controller (SlurmctldHost)", ["SlurmctldHost is missing"],
                             judge=judge.describe())
        (etc / "slurm.conf").write_text(copy.text)
        if "acct_gather.conf" in files and any(n.startswith("AcctGatherEnergyType=") for n in copy.notes):
            # the energy plugin left out (_PACKAGED): acct_gather.conf's EnergyIPMI* keys belong to it, and a key no
            # loaded plugin owns is fatal ("Could not open/read/parse acct_gather.conf ... options for plugins that
            # are not loaded", src/interfaces/acct_gather.c at slurm-24-11-5-1, seen with the 24.11 judge)
            (etc / "acct_gather.conf").write_text("".join(
                ln for ln in files["acct_gather.conf"].splitlines(keepends=True)
                if not ln.lower().lstrip().startswith("energyipmi")))
        (tmp / "hosts").mkdir()
        (tmp / "hosts" / "hosts").write_text(copy.hosts())
        conf = str((inside or tmp) / "etc" / "slurm.conf")
        script = _script(judge, tmp, ip, copy.primary, [judge.path("slurmctld") if judge.root is None else
                                                        "/usr/sbin/slurmctld", "-D", "-c", "-i", "-f", conf])
        res = _run_until_primary([*ns, "sh", "-c", script], timeout, settle)
        gres_note = ""
        if "gres.conf" in files and not slurmctld_reads_gres_conf(judge.release):
            gres_errors, gres_note = _gres_by_slurmd(judge, files, tmp, ns, ip, gres_view)
            gres_errors = [e for e in gres_errors if e not in res.errors]  # slurm.conf's own, already reported
            res.by_slurmd = list(gres_errors)
            if gres_errors:
                res.errors += gres_errors
                if res.ok is not False:
                    res.message = f"slurmd -G logged {len(gres_errors)} gres.conf error line(s): {gres_errors[0]}"
                res.ok = False
    res.judge = judge.describe()
    res.release = judge.release
    if copy.dbd:
        res.expected += [e for e in res.errors if NEEDS_DBD.search(e)]
        res.errors = [e for e in res.errors if not NEEDS_DBD.search(e)]
        if res.ok is False and not res.errors and res.message.startswith("slurmctld logged"):
            res.ok = True
            res.message = f"slurmctld accepted the config (primary after {res.seconds * 1000:.0f} ms, no error lines)"
    sort_lines(res, judge.release)
    res.message += f" as {copy.primary}"
    if res.expected:
        res.message += (f"; expected in the copy (no slurmdbd, no backup controller, a new state directory): "
                        f"{'; '.join(res.expected)}")
    res.message += "".join(f"; {n}" for n in copy.notes)
    res.message += f"; judged by {res.judge}" + (f" and {gres_note}" if gres_note else "")
    return res


def sort_lines(res: RealParse, release: str) -> None:
    """Move the error lines that do not make a config invalid (``classify``: host facts, deprecation and defunct
    notices) out of ``res.errors``; a parse that reached the primary controller and has no other line is ok."""
    keep = []
    for e in res.errors:
        kind, where = classify(e, release)
        if kind == HOST:
            res.host_facts.append(e)
        elif kind == COPY:
            res.expected.append(e)
        elif kind in (DEPRECATED, DEFUNCT, WARNING, ADVISORY):
            # slurmctld reads slurm.conf more than once at start (26.05 prefixes each line with its time)
            e = re.sub(r"^\[[^\]]*\]\s*", "", e)
            if (kind, where, e) not in res.notices:
                res.notices.append((kind, where, e))
        else:
            keep.append(e)
    if keep == res.errors:
        return
    res.errors = keep
    if res.ok is False and not keep and res.message.startswith(("slurmctld logged", "slurmd -G logged")):
        res.ok = True
        res.message = f"slurmctld accepted the config (primary after {res.seconds * 1000:.0f} ms)"


def _script(judge: Judge, tmp: Path, ip: str, hostname: str, argv: list[str], devices: list[str] | None = None) -> str:
    """The fixed script that runs ``argv`` in the private namespaces; every value goes through shlex.quote.
    The host's judge sees the copy where it is and gets the private /etc/hosts bound over the host's; a root's
    judge is chrooted into a view of the host with the root's /usr and /etc over it, and the same hosts file.
    ``devices``: stand-in files for gres.conf's
    File= paths, on a private /dev of the root (``_gres_by_slurmd``)."""
    q = shlex.quote
    steps = [
        "set -e",
        # the kernel takes any name up to 64 bytes for this UTS namespace; hostname(1) refuses names its own check
        # rejects, such as test_machine, a name Slurm takes (its testsuite/expect/test7.17_configs, in the corpus)
        f"printf %s {q(hostname)} > /proc/sys/kernel/hostname",
        # getaddrinfo(AI_ADDRCONFIG), which Slurm uses, finds no IPv4 name while 127.0.0.1 is the only
        # address (glibc check_pf ignores it): a second loopback address makes the names resolve
        f"{q(ip)} link set lo up",
        f"{q(ip)} addr add 127.0.0.2/8 dev lo",
        # the backup controllers' addresses must be unreachable here, never sent to (see BACKUP_NET)
        f"if {q(ip)} route get {BACKUP_NET}1 >/dev/null 2>&1; then "
        f"echo 'fatal: the private network namespace has a route to {BACKUP_NET}1'; exit 1; fi",
    ]
    hosts = tmp / "hosts" / "hosts"
    r = ""
    if judge.root is not None:
        # a view of the host with the root's /usr and /etc laid over the host's (as the lab's view, lab/view.py,
        # but mounted in this private namespace only, gone with it): the root's Slurm with its own libraries and
        # plugins, and every host path the config names (the copy in /tmp, site scripts, power programs, which
        # slurmctld checks: power_save.c _valid_prog() "not found") where the host has it
        r = str(tmp / "view")
        steps += [f"mkdir -p {q(r)}", f"mount -t tmpfs -o mode=755,size=16m slurmkit-parse {q(r)}"]
        root = Path(judge.root)
        try:
            roots.hide_host_plugins(root)  # the host's older plugins must not show through the overlay
        except OSError:
            pass  # not root: a lab (which needs root) marked them already, or the host has no Slurm plugins
        for entry in sorted(os.listdir("/")):
            mine, host, dest = root / entry, Path("/", entry), f"{r}/{entry}"
            if entry in ("usr", "etc") and mine.is_dir() and host.is_dir():
                steps += [f"mkdir {q(dest)}", f"mount -t overlay slurmkit-parse -o {q(f'lowerdir={mine}:{host}')} {q(dest)}"]
            elif mine.is_symlink():  # bin -> usr/bin, lib -> usr/lib, ... (merged /usr)
                steps.append(f"ln -s {q(os.readlink(mine))} {q(dest)}")
            elif host.is_dir() and not host.is_symlink():
                steps += [f"mkdir {q(dest)}", f"mount --rbind {q(str(host))} {q(dest)}"]
            elif host.is_symlink():
                steps.append(f"ln -s {q(os.readlink(host))} {q(dest)}")
    steps.append(f"mount --bind {q(str(hosts))} {q(r + '/etc/hosts')}")
    if devices:
        # a private /dev (this mount namespace only) with the stand-ins and /dev/null, kept aside first
        null = tmp / "devnull"
        steps += [f"touch {q(str(null))}", f"mount --bind /dev/null {q(str(null))}",
                  f"mount -t tmpfs -o mode=755,size=1m slurmkit-dev {q(r + '/dev')}",
                  f"touch {q(r + '/dev/null')}", f"mount --bind {q(str(null))} {q(r + '/dev/null')}"]
        for d in devices:
            steps += [f"mkdir -p {q(os.path.dirname(r + d))}", f"touch {q(r + d)}"]
    run = " ".join(q(a) for a in argv)
    steps.append(f"exec {run}" if judge.root is None else f"exec /usr/sbin/chroot {q(r)} {run}")
    return "; ".join(steps)


# What `slurmd -G` logs on a machine that is not the node: about the node's hardware, not about gres.conf
# (slurm-24-11-5-1 src/interfaces/gres.c _parse_gres_config(): Cores= go through xcpuinfo_abs_to_mac(), which
# needs the node's CPU topology, "Invalid GRES data for %s, %s=%s" on failure; _set_gres_device_desc(): a File= that
# is not a character device; the stand-in device files are plain files). gres.conf's own mistakes (an unknown
# key: parse_config.c "Parsing error at unrecognized key", a bad value, File= and MultipleFiles= together) remain.
GRES_NODE_NOISE = (
    re.compile(r"xcpuinfo_abs_to_mac"),
    re.compile(r"Invalid GRES data for \S+, (Cores|CPUs)=\S+$"),
    re.compile(r"is not a valid character or block device"),
    re.compile(r"hwloc"),
)
# One slurmd -G per distinct node line at most this many: each takes a few hundred ms.
GRES_NODES_MAX = 8


def _gres_by_slurmd(judge: Judge, files: Mapping[str, str], tmp: Path, ns: list[str], ip: str,
                    view: list[str] | None = None) -> tuple[list[str], str]:
    """gres.conf as ``slurmd -G -f COPY -N NODE`` of the judge's release reads it, for the first node of each
    NodeName line (an unknown key fails the whole file; File=/Cores= are checked for that node's lines).
    Its cgroup.conf is the site's with ``CgroupPlugin=disabled`` (cgroup.conf(5) 24.05+: "completely disable any
    interaction with the cgroups"): slurmd -G initialises the cgroup plugin first (slurmd.c _slurmd_init()), and
    the host's cgroups are none of its business. Every File= path gets a stand-in file on a private /dev
    (gres.c _my_stat() waits 20 s for a missing one, then fatal). -> (error lines, what judged)."""
    etc = tmp / "etc"  # slurmctld's copy, which has stopped: the same paths, so the same lines read the same
    # the copy's cgroup.conf (the site's less the lines the static check named fatal, real_parse ``leave_out``,
    # its Includes inlined as real_parse wrote it)
    site_cgroup = (etc / "cgroup.conf").read_text() if (etc / "cgroup.conf").exists() else ""
    cgroup = [ln for ln in site_cgroup.splitlines() if not re.match(r"\s*cgroupplugin\s*=", ln, re.I)]
    (etc / "cgroup.conf").write_text("\n".join([*cgroup, "CgroupPlugin=disabled"]) + "\n")
    devices: list[str] = []
    # the File= of included gres.conf files too (ParallelCluster: gres.conf -> slurm_parallelcluster_gres.conf ->
    # pcluster/*_gres.conf); a missing one costs slurmd 20 s and then is fatal (_my_stat)
    for rec in cp.expand_includes(files["gres.conf"], "gres.conf", files, [], line_keys=cp.GRES_LINE_KEYS):
        for k, v in rec.pairs:
            if k.lower() in ("file", "files", "multiplefiles"):
                devices += [f for f in cp.expand_files(v) if f not in devices]
    outside = [d for d in devices if not d.startswith("/dev/") or ".." in d]
    if outside:
        return [], f"gres.conf not judged by slurmd -G (File= outside /dev: {outside[0]})"
    # the node lines an Include holds count too (ParallelCluster keeps every NodeName in included files)
    nodes = [hostlist.expand(rec.head, rec.where)[0] for rec in cp.parse_slurm_conf(files["slurm.conf"], "slurm.conf",
                                                                                     files).nodes
             if rec.head.upper() != "DEFAULT"][:GRES_NODES_MAX]
    errors: list[str] = []
    for node in nodes:
        conf = str(tmp / "etc" / "slurm.conf")
        exe = "/usr/sbin/slurmd" if judge.root else judge.path("slurmd")
        script = _script(judge, tmp, ip, node, [exe, "-G", "-f", conf, "-N", node], devices)
        res = run([*ns, "sh", "-c", script], timeout=30, check=False, die_with_parent=True)
        no_gpu = False
        for line in (res.stdout + res.stderr).splitlines():
            line = line.strip()
            no_gpu = no_gpu or "System GPU detection failed" in line
            if no_gpu and SHARED_MERGE.search(line):
                line = NO_GPU_HERE + line.removeprefix("slurmd: ")
            if view is not None and "Gres Name=" in line:  # slurmd.c print_gres: one line per derived record
                view.append(f"{node}: {line[line.index('Gres Name='):]}")
            if re.search(r"\b(error|fatal):", line) and not any(n.search(line) for n in GRES_NODE_NOISE):
                line = line.removeprefix("slurmd: ")
                if line not in errors:
                    errors.append(line)
        if res.rc != 0 and not errors:
            errors.append(f"slurmd -G -N {node} exited (rc={res.rc}): {(res.stderr or res.stdout).strip()[-200:]}")
    return errors, f"gres.conf by {judge.describe('slurmd')} -G for {_fold(nodes) if nodes else 'no node'}"


def _run_until_primary(argv: list[str], timeout: float, settle: float = SETTLE) -> RealParse:
    """slurmctld -D never exits on success: its output is streamed (``backend.run.stream``) until "Running as
    primary controller", then for ``settle`` seconds more (the priority plugin logs its errors right after that
    line), or until it exits, or the deadline."""
    t0 = time.monotonic()
    errors: list[str] = []
    expected: list[str] = []
    tail: list[str] = []
    t_primary = 0.0

    def on_line(line: str) -> float | None:
        nonlocal tail, t_primary
        tail = (tail + [line])[-5:]
        if re.search(r"\b(error|fatal):", line) and not any(n.search(line) for n in NOISE):
            if any(n.search(line) for n in COPY_CAUSED):
                expected.append(line.removeprefix("slurmctld: "))
            else:
                errors.append(line.removeprefix("slurmctld: "))
        if PRIMARY in line and not t_primary:
            t_primary = time.monotonic() - t0
            return settle
        return None

    rc, timed_out = stream(argv, timeout, on_line)
    reached = bool(t_primary)
    secs = t_primary or time.monotonic() - t0
    if not reached:
        why = f"did not get there in {timeout:g}s" if timed_out else f"exited (rc={rc})"
        last = errors[-1] if errors else (tail[-1] if tail else "no output")
        return RealParse(False, f"slurmctld {why} before running as primary controller: {last}", errors or [last], secs,
                         expected)
    if errors:
        return RealParse(False, f"slurmctld logged {len(errors)} error line(s): {errors[0]}", errors, secs, expected)
    return RealParse(True, f"slurmctld accepted the config (primary after {secs * 1000:.0f} ms, no error lines)", [], secs,
                     expected)


# a static finding that names a setting line Slurm stops at: "slurm.conf:12: Slurm 24.11 has no slurm.conf key X
# (... unrecognized key: fatal)", "slurm.conf:7: SelectType=select/cons_res is not available in Slurm 24.11"
_STATIC_FATAL = re.compile(r"^(?P<where>[^\s:]+:\d+): .*(fatal|unrecognized key|is not available in Slurm)")


def locate(line: str, files: Mapping[str, str]) -> str:
    """The ``file:line`` of the site's setting a real-parse line names by its key ("Use of FrontendName in slurm.conf
    ...", "Parsing error at unrecognized key: ConstrainKmemSpace", "Cannot use AutoDetect on cloud/dynamic node"),
    looked up in slurm.conf, gres.conf and cgroup.conf with their Includes, or "" when it names none. The first line
    with that key wins (the daemons read one value). Line keys (NodeName, PartitionName, Name ...) name no setting."""
    low = line.lower()
    skip = {"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "name", "switchname", "blockname"}
    for name, keys in (("slurm.conf", cp.LINE_KEYS), ("gres.conf", cp.GRES_LINE_KEYS), ("cgroup.conf", cp.LINE_KEYS)):
        if name not in files:
            continue
        try:
            recs = cp.expand_includes(files[name], name, files, [], line_keys=keys)
        except Exception:  # a hostlist the parse cannot read is named by the static check
            continue
        for rec in recs:
            key = rec.pairs[0][0].lower() if rec.pairs else ""
            if key in skip and not (key == "frontendname" and "frontendname" in low):
                continue
            if key and re.search(rf"(?<![\w/]){re.escape(key)}(?![\w])", low):
                return rec.where
    return ""


def validate(files: Mapping[str, str], version: str | None = None, real: bool = True) -> Report:
    """Static checks, then the real slurmctld parse -- also when the static checks fail (issue 33 item 5): the copy
    leaves out the setting lines the static check names as fatal, so one run lists every blocker, each real-parse
    finding with the ``file:line`` of the setting it names."""
    rep = static_check(files, version)
    if not real:
        return rep
    leave_out = frozenset(m.group("where") for e in rep.errors if (m := _STATIC_FATAL.match(e)))
    rp = real_parse(files, version, leave_out=leave_out)
    rep.real, rep.real_ok = rp.message, rp.ok
    if rep.errors:
        rep.real = f"run although the static checks failed: {rp.message}"

    def at(e: str) -> str:
        where = locate(e, files)
        return f"{where}: " if where else ""

    def who(e: str) -> str:
        return "slurmd -G" if e in rp.by_slurmd else "slurmctld"

    seen: set[tuple[str, str]] = set()  # slurmctld reads slurm.conf twice at start, slurmd -G runs once per node
    for e in rp.errors:
        key = (who(e), re.sub(r"^\[[^\]]*\]\s*", "", e))
        if key not in seen:
            seen.add(key)
            rep.errors.append(f"{at(e)}{who(e)} ({classify(e, rp.release)[0]}): {e}")
    rep.warnings += [f"not checkable here (a fact of this host, not of the config): {who(e)}: {e}" for e in rp.host_facts]
    rep.warnings += [f"{at(e)}{kind} in Slurm {rp.release} ({where}), not a finding: {who(e)}: {e}"
                     for kind, where, e in rp.notices]
    return rep
