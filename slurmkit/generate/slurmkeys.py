"""The slurm.conf keys each Slurm release accepts, so an unknown key is refused before slurmctld sees it.

What slurmctld, slurmd and every client refuse is decided by the parser: a key not in ``slurm_conf_options[]``
of src/common/read_config.c is "Parsing error at unrecognized key" (src/common/parse_config.c), fatal for
slurm.conf. The lists below are that table at each release tag (22.05: slurm-22-05-8-1, 23.02: slurm-23-02-7-1, 23.11: slurm-23-11-10-1, 24.05: slurm-24-05-8-1, 24.11: slurm-24-11-5-1, 25.05: slurm-25-05-0-1, 25.11: slurm-25-11-0-1, 26.05: slurm-26-05-3-1); slurm.conf(5) of the same tag documents them (the
table also keeps a few deprecated spellings, e.g. ControlMachine, that still load). Keys are case-insensitive.

Regenerate: for each tag, the quoted names of ``{"Key", S_P_...}`` / ``.key = "Key"`` entries between
``s_p_options_t slurm_conf_options[] = {`` and ``{NULL}`` in ``git show TAG:src/common/read_config.c``.
"""

from __future__ import annotations

from functools import cache

_BASE_2205 = (
    "AccountingStorageBackupHost AccountingStorageEnforce AccountingStorageExternalHost AccountingStorageHost "
    "AccountingStorageLoc AccountingStorageParameters AccountingStoragePass AccountingStoragePort "
    "AccountingStorageTRES AccountingStorageType AccountingStorageUser AccountingStoreFlags AccountingStoreJobComment "
    "AcctGatherEnergyType AcctGatherFilesystemType AcctGatherInfinibandType AcctGatherInterconnectType "
    "AcctGatherNodeFreq AcctGatherProfileType AllowSpecResourcesUsage AuthAltParameters AuthAltTypes AuthInfo "
    "AuthType BackupAddr BackupController BatchStartTimeout BcastExclude BcastParameters BurstBufferParameters "
    "BurstBufferType CliFilterPlugins ClusterName CommunicationParameters CompleteWait ControlAddr ControlMachine "
    "CoreSpecPlugin CpuFreqDef CpuFreqGovernors CredType CryptoType DebugFlags DefCPUPerGPU DefMemPerCPU DefMemPerGPU "
    "DefMemPerNode DependencyParameters DisableRootJobs DownNodes EioTimeout EnforcePartLimits Epilog EpilogMsgTime "
    "EpilogSlurmctld ExtSensorsFreq ExtSensorsType FairShareDampeningFactor FastSchedule FederationParameters "
    "FirstJobId FrontendName GetEnvTimeout GpuFreqDef GresTypes GroupUpdateForce GroupUpdateTime HealthCheckInterval "
    "HealthCheckNodeState HealthCheckProgram InactiveLimit InteractiveStepOptions JobAcctGatherFrequency "
    "JobAcctGatherParams JobAcctGatherType JobCompHost JobCompLoc JobCompParams JobCompPass JobCompPort JobCompType "
    "JobCompUser JobContainerType JobCredentialPrivateKey JobCredentialPublicCertificate JobFileAppend JobRequeue "
    "JobSubmitPlugins KeepAliveTime KillOnBadExit KillWait LaunchParameters LaunchType Licenses LogTimeFormat "
    "MCSParameters MCSPlugin MailDomain MailProg MaxArraySize MaxDBDMsgs MaxJobCount MaxJobId MaxMemPerCPU "
    "MaxMemPerNode MaxNodeCount MaxStepCount MaxTasksPerNode MessageTimeout MinJobAge MpiDefault MpiParams "
    "NodeFeaturesPlugins NodeName NodeSet OverTimeLimit PartitionName PlugStackConfig PluginDir PowerParameters "
    "PowerPlugin PrEpParameters PrEpPlugins PreemptExemptTime PreemptMode PreemptType PriorityCalcPeriod "
    "PriorityDecayHalfLife PriorityFavorSmall PriorityFlags PriorityMaxAge PriorityParameters "
    "PrioritySiteFactorParameters PrioritySiteFactorPlugin PriorityType PriorityUsageResetPeriod PriorityWeightAge "
    "PriorityWeightAssoc PriorityWeightFairshare PriorityWeightJobSize PriorityWeightPartition PriorityWeightQOS "
    "PriorityWeightTRES PrivateData ProctrackType Prolog PrologEpilogTimeout PrologFlags PrologSlurmctld "
    "PropagatePrioProcess PropagateResourceLimits PropagateResourceLimitsExcept RebootProgram ReconfigFlags "
    "RequeueExit RequeueExitHold ResumeFailProgram ResumeProgram ResumeRate ResumeTimeout ResvEpilog ResvOverRun "
    "ResvProlog ReturnToService RoutePlugin SallocDefaultCommand SbcastParameters SchedulerAuth SchedulerParameters "
    "SchedulerTimeSlice SchedulerType ScronParameters SelectType SelectTypeParameters SlurmSchedLogFile "
    "SlurmSchedLogLevel SlurmUser SlurmctldAddr SlurmctldDebug SlurmctldHost SlurmctldLogFile SlurmctldParameters "
    "SlurmctldPidFile SlurmctldPlugstack SlurmctldPort SlurmctldPrimaryOffProg SlurmctldPrimaryOnProg "
    "SlurmctldSyslogDebug SlurmctldTimeout SlurmdDebug SlurmdLogFile SlurmdParameters SlurmdPidFile SlurmdPort "
    "SlurmdSpoolDir SlurmdSyslogDebug SlurmdTimeout SlurmdUser SrunEpilog SrunPortRange SrunProlog StateSaveLocation "
    "SuspendExcNodes SuspendExcParts SuspendProgram SuspendRate SuspendTime SuspendTimeout SwitchParameters "
    "SwitchType TCPTimeout TaskEpilog TaskPlugin TaskPluginParam TaskProlog TmpFS TopologyParam TopologyPlugin "
    "TrackWCKey TreeWidth UnkillableStepProgram UnkillableStepTimeout UsePAM VSizeFactor WaitTime X11Parameters "
).split()

# release -> (keys added, keys removed) relative to the release before it
_DELTAS: dict[str, tuple[list[str], list[str]]] = {
    "23.02": (["MaxBatchRequeue", "PreemptParameters", "SuspendExcStates"], ["SlurmctldPlugstack"]),
    "23.11": ([], []),
    "24.05": (["HashPlugin", "TLSParameters", "TLSType"], ["SchedulerAuth"]),
    "24.11": (["CertmgrParameters", "CertmgrType", "DataParserParameters"], []),
    "25.05": (["CertgenParameters", "CertgenType", "EpilogTimeout", "PrologTimeout"], ["FrontendName"]),
    "25.11": (["CliFilterParameters", "HttpParserType", "JobCompPassScript", "MetricsType", "NamespaceType", "UrlParserType"], ["AccountingStorageLoc"]),
    "26.05": (["HealthCheckTimeout", "LicenseParameters", "MetricsAuthUsers", "MetricsParameters", "PowerAction",
               "SlurmctldHttpAuthParameters", "SlurmdHttpAuthParameters"], []),
}


@cache
def slurm_conf_keys(version: str) -> frozenset[str]:
    """Lower-case keys slurm.conf accepts in ``version`` (releases newer than the table get the newest list)."""
    keys = {k.lower() for k in _BASE_2205}
    for v, (added, removed) in _DELTAS.items():
        if tuple(map(int, v.split("."))) > tuple(map(int, version.split(".")[:2])):
            break
        keys |= {k.lower() for k in added}
        keys -= {k.lower() for k in removed}
    return frozenset(keys)


@cache
def _spellings() -> dict[str, str]:
    """Lower-case key -> its spelling in read_config.c, over every release (for did-you-mean hints)."""
    out = {k.lower(): k for k in _BASE_2205}
    for added, _removed in _DELTAS.values():
        out.update({k.lower(): k for k in added})
    return out


def spelled(key: str) -> str:
    return _spellings().get(key.lower(), key)


def all_spellings(version: str) -> list[str]:
    keys = slurm_conf_keys(version)
    return sorted(v for k, v in _spellings().items() if k in keys)


# Keys read by read_config.c's _defunct_option() per release: slurmctld logs 'The option "X" is defunct' (an error
# line) and ignores the value; nothing is refused. The `{"Key", S_P_..., _defunct_option}` entries of
# slurm_conf_options[] at each tag above.
_DEFUNCT: dict[str, tuple[str, ...]] = {
    "22.05": ("SchedulerAuth",),
    "23.02": ("SchedulerAuth",),
    "23.11": ("ExtSensorsType", "ExtSensorsFreq", "JobCredentialPrivateKey", "JobCredentialPublicCertificate",
              "SchedulerAuth"),
    "24.05": ("CoreSpecPlugin", "ExtSensorsType", "ExtSensorsFreq", "JobCredentialPrivateKey",
              "JobCredentialPublicCertificate", "PowerParameters", "PowerPlugin"),
    "24.11": ("CoreSpecPlugin", "ExtSensorsFreq", "ExtSensorsType", "JobCredentialPrivateKey",
              "JobCredentialPublicCertificate", "PowerParameters", "PowerPlugin"),
    "25.05": ("CoreSpecPlugin", "ExtSensorsFreq", "ExtSensorsType", "GetEnvTimeout", "JobCredentialPrivateKey",
              "JobCredentialPublicCertificate", "PowerParameters", "PowerPlugin"),
    "25.11": ("AccountingStorageUser", "CoreSpecPlugin", "ExtSensorsFreq", "ExtSensorsType", "GetEnvTimeout",
              "JobCredentialPrivateKey", "JobCredentialPublicCertificate", "PowerParameters", "PowerPlugin"),
    "26.05": ("AccountingStorageUser", "CoreSpecPlugin", "ExtSensorsFreq", "ExtSensorsType", "GetEnvTimeout",
              "JobCredentialPrivateKey", "JobCredentialPublicCertificate", "PowerParameters", "PowerPlugin"),
}


def _release(version: str) -> str:
    """The newest table release not newer than ``version``."""
    best = "22.05"
    for v in _DEFUNCT:
        if tuple(map(int, v.split("."))) <= tuple(map(int, version.split(".")[:2])):
            best = v
    return best


def defunct_keys(version: str) -> frozenset[str]:
    return frozenset(k.lower() for k in _DEFUNCT[_release(version)])


def fatal_when_set(key: str, value: str, version: str) -> str | None:
    """Keys still in the table that read_config.c _validate_and_set_defaults refuses when set (22.05, 24.11):
    -> the fatal message, or None. FastSchedule=1 is only an error line (see ``obsolete_note``)."""
    k = key.lower()
    if k == "accountingstorageloc" and "accountingstorageloc" in slurm_conf_keys(version):
        return "The AccountingStorageLoc option has been removed. It is safe to remove from your configuration. (fatal)"
    if k == "fastschedule" and value.strip() != "1":
        return "The FastSchedule option has been removed" + (
            ". The FastSchedule=2 functionality is available through the SlurmdParameters=config_overrides option."
            if value.strip() == "2" else ". Please update your configuration.") + " (fatal)"
    return None


def obsolete_note(key: str, value: str) -> str | None:
    if key.lower() == "fastschedule" and value.strip() == "1":
        return "Ignoring obsolete FastSchedule=1 option. Please remove from your configuration. (an error line; ignored)"
    return None


def key_history(key: str, version: str) -> str:
    """Why ``key`` is not a slurm.conf key of ``version``: removed in / added in which release, or did-you-mean."""
    import difflib

    k = key.lower()
    releases = ["22.05", *_DELTAS]
    present = [v for v in releases if k in slurm_conf_keys(v)]
    mine = tuple(map(int, version.split(".")[:2]))
    if present:
        older = [v for v in present if tuple(map(int, v.split("."))) < mine]
        newer = [v for v in present if tuple(map(int, v.split("."))) > mine]
        if older and not newer:
            gone = next(v for v in releases if tuple(map(int, v.split("."))) > tuple(map(int, older[-1].split("."))))
            return f"removed in Slurm {gone}"
        if newer:
            return f"added in Slurm {newer[0]}"
    close = difflib.get_close_matches(k, sorted(slurm_conf_keys(version)), n=1, cutoff=0.75)
    return f"did you mean {spelled(close[0])}?" if close else ""
