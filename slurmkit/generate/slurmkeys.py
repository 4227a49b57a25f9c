"""The slurm.conf keys each Slurm release accepts, so an unknown key is refused before slurmctld sees it.

What slurmctld, slurmd and every client refuse is decided by the parser: a key not in ``slurm_conf_options[]``
of src/common/read_config.c is "Parsing error at unrecognized key" (src/common/parse_config.c), fatal for
slurm.conf. The lists below are that table at each release tag (22.05: slurm-22-05-8-1, 23.02: slurm-23-02-7-1, 23.11: slurm-23-11-10-1, 24.05: slurm-24-05-8-1, 24.11: slurm-24-11-5-1, 25.05: slurm-25-05-0-1, 25.11: slurm-25-11-0-1); slurm.conf(5) of the same tag documents them (the
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
