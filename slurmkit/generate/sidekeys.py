"""The keys each Slurm release reads in the files beside slurm.conf that slurmkit writes and `conf import` reads
back (slurmdbd.conf, job_container.conf, acct_gather.conf), so an unknown key is named with its file and line
before a daemon refuses it. A key outside these tables is "Parsing error at unrecognized key" in
src/common/parse_config.c, fatal for the file's reader (slurmdbd; slurmd for job_container.conf; every daemon that
loads an acct_gather plugin). Keys are case-insensitive.

Regenerate, for each tag (22.05: slurm-22-05-8-1, 23.02: slurm-23-02-7-1, 23.11: slurm-23-11-10-1, 24.05:
slurm-24-05-8-1, 24.11: slurm-24-11-5-1, 25.05: slurm-25-05-0-1, 25.11: slurm-25-11-0-1, 26.05: slurm-26-05-3-1):
slurmdbd.conf: the quoted names in ``s_p_options_t options[] = {`` .. ``{NULL}`` of src/slurmdbd/read_config.c;
job_container.conf: every ``{"Key", S_P_...}`` of src/plugins/job_container/tmpfs/read_jcconf.c (from 25.11
src/plugins/namespace/tmpfs/read_jcconf.c); acct_gather.conf: every ``{"Key", S_P_...}`` under
src/plugins/acct_gather_* (each plugin adds its options to the one file: src/interfaces/acct_gather.c). The man
pages of the same tags (slurmdbd.conf(5), job_container.conf(5), acct_gather.conf(5)) document them.
"""

from __future__ import annotations

import re
from functools import cache

_TABLES: dict[str, dict[str, str]] = {
    "slurmdbd.conf": {
        "22.05": (
            "AllowNoDefAcct ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript ArchiveSteps "
            "ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType CommitDelay "
            "CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel DebugLevelSyslog "
            "DefaultQOS JobPurge LogFile LogTimeFormat MaxQueryTimeRange MessageTimeout Parameters PidFile "
            "PluginDir PrivateData PurgeEventAfter PurgeEventMonths PurgeJobAfter PurgeJobMonths PurgeResvAfter "
            "PurgeStepAfter PurgeStepMonths PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter PurgeTXNMonths "
            "PurgeUsageAfter PurgeUsageMonths SlurmUser StepPurge StorageBackupHost StorageHost StorageLoc "
            "StorageParameters StoragePass StoragePort StorageType StorageUser TCPTimeout TrackSlurmctldDown "
            "TrackWCKey"
        ),
        "23.02": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS JobPurge LogFile LogTimeFormat MaxQueryTimeRange MessageTimeout "
            "Parameters PidFile PluginDir PrivateData PurgeEventAfter PurgeEventMonths PurgeJobAfter "
            "PurgeJobMonths PurgeResvAfter PurgeStepAfter PurgeStepMonths PurgeSuspendAfter PurgeSuspendMonths "
            "PurgeTXNAfter PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths SlurmUser StepPurge StorageBackupHost "
            "StorageHost StorageLoc StorageParameters StoragePass StoragePort StorageType StorageUser TCPTimeout "
            "TrackSlurmctldDown TrackWCKey"
        ),
        "23.11": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS JobPurge LogFile LogTimeFormat MaxQueryTimeRange MessageTimeout "
            "Parameters PidFile PluginDir PrivateData PurgeEventAfter PurgeEventMonths PurgeJobAfter "
            "PurgeJobMonths PurgeResvAfter PurgeStepAfter PurgeStepMonths PurgeSuspendAfter PurgeSuspendMonths "
            "PurgeTXNAfter PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths SlurmUser StepPurge StorageBackupHost "
            "StorageHost StorageLoc StorageParameters StoragePass StoragePort StorageType StorageUser TCPTimeout "
            "TrackSlurmctldDown TrackWCKey"
        ),
        "24.05": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS DisableCoordDBD HashPlugin JobPurge LogFile LogTimeFormat "
            "MaxQueryTimeRange MessageTimeout Parameters PidFile PluginDir PrivateData PurgeEventAfter "
            "PurgeEventMonths PurgeJobAfter PurgeJobMonths PurgeResvAfter PurgeStepAfter PurgeStepMonths "
            "PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths "
            "SlurmUser StepPurge StorageBackupHost StorageHost StorageLoc StorageParameters StoragePass "
            "StoragePort StorageType StorageUser TCPTimeout TLSParameters TLSType TrackSlurmctldDown TrackWCKey"
        ),
        "24.11": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS DisableCoordDBD HashPlugin JobPurge LogFile LogTimeFormat "
            "MaxQueryTimeRange MessageTimeout Parameters PidFile PluginDir PrivateData PurgeEventAfter "
            "PurgeEventMonths PurgeJobAfter PurgeJobMonths PurgeResvAfter PurgeStepAfter PurgeStepMonths "
            "PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths "
            "SlurmUser StepPurge StorageBackupHost StorageHost StorageLoc StorageParameters StoragePass "
            "StoragePort StorageType StorageUser TCPTimeout TLSParameters TLSType TrackSlurmctldDown TrackWCKey"
        ),
        "25.05": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS DisableCoordDBD HashPlugin JobPurge LogFile LogTimeFormat "
            "MaxQueryTimeRange MessageTimeout Parameters PidFile PluginDir PrivateData PurgeEventAfter "
            "PurgeEventMonths PurgeJobAfter PurgeJobMonths PurgeResvAfter PurgeStepAfter PurgeStepMonths "
            "PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths "
            "SlurmUser StepPurge StorageBackupHost StorageHost StorageLoc StorageParameters StoragePass "
            "StoragePort StorageType StorageUser TCPTimeout TLSParameters TLSType TrackSlurmctldDown TrackWCKey"
        ),
        "25.11": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobs ArchiveResvs ArchiveScript "
            "ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage AuthAltParameters AuthAltTypes AuthInfo AuthType "
            "CommitDelay CommunicationParameters DbdAddr DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel "
            "DebugLevelSyslog DefaultQOS DisableArchiveCommands DisableCoordDBD HashPlugin JobPurge LogFile "
            "LogTimeFormat MaxPurgeLimit MaxQueryTimeRange MessageTimeout Parameters PidFile PluginDir "
            "PrivateData PurgeEventAfter PurgeEventMonths PurgeJobAfter PurgeJobMonths PurgeResvAfter "
            "PurgeStepAfter PurgeStepMonths PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter PurgeTXNMonths "
            "PurgeUsageAfter PurgeUsageMonths SlurmUser StepPurge StorageBackupHost StorageHost StorageLoc "
            "StorageParameters StoragePass StoragePassScript StoragePort StorageType StorageUser TCPTimeout "
            "TLSParameters TLSType TrackSlurmctldDown TrackWCKey"
        ),
        "26.05": (
            "AllowNoDefAcct AllResourcesAbsolute ArchiveDir ArchiveEvents ArchiveJobEnv ArchiveJobs "
            "ArchiveJobScript ArchiveResvs ArchiveScript ArchiveSteps ArchiveSuspend ArchiveTXN ArchiveUsage "
            "AuthAltParameters AuthAltTypes AuthInfo AuthType CommitDelay CommunicationParameters DbdAddr "
            "DbdBackupHost DbdHost DbdPort DebugFlags DebugLevel DebugLevelSyslog DefaultQOS "
            "DisableArchiveCommands DisableCoordDBD DisableRollups HashPlugin JobPurge LogFile LogTimeFormat "
            "MaxPurgeLimit MaxQueryTimeRange MessageTimeout Parameters PidFile PluginDir PrivateData "
            "PurgeEventAfter PurgeEventMonths PurgeJobAfter PurgeJobEnvAfter PurgeJobMonths PurgeJobScriptAfter "
            "PurgeResvAfter PurgeStepAfter PurgeStepMonths PurgeSuspendAfter PurgeSuspendMonths PurgeTXNAfter "
            "PurgeTXNMonths PurgeUsageAfter PurgeUsageMonths SlurmUser StepPurge StorageBackupHost StorageHost "
            "StorageLoc StorageParameters StoragePass StoragePassScript StoragePort StorageType StorageUser "
            "TCPTimeout TLSParameters TLSType TrackSlurmctldDown TrackWCKey"
        ),
    },
    "job_container.conf": {
        "22.05": (
            "AutoBasePath BasePath InitScript NodeName"
        ),
        "23.02": (
            "AutoBasePath BasePath Dirs InitScript NodeName Shared"
        ),
        "23.11": (
            "AutoBasePath BasePath Dirs InitScript NodeName Shared"
        ),
        "24.05": (
            "AutoBasePath BasePath Dirs InitScript NodeName Shared"
        ),
        "24.11": (
            "AutoBasePath BasePath CloneNSEpilog CloneNSEpilog_Wait CloneNSScript CloneNSScript_Wait Dirs "
            "EntireStepInNS InitScript NodeName Shared"
        ),
        "25.05": (
            "AutoBasePath BasePath CloneNSEpilog CloneNSEpilog_Wait CloneNSScript CloneNSScript_Wait Dirs "
            "EntireStepInNS InitScript NodeName Shared"
        ),
        "25.11": (
            "AutoBasePath BasePath CloneNSEpilog CloneNSEpilog_Wait CloneNSScript CloneNSScript_Wait Dirs "
            "EntireStepInNS InitScript NodeName Shared"
        ),
        "26.05": (
            "AutoBasePath BasePath CloneNSEpilog CloneNSEpilog_Wait CloneNSScript CloneNSScript_Wait Dirs "
            "EntireStepInNS InitScript NodeName Shared"
        ),
    },
    "acct_gather.conf": {
        "22.05": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBUser SysfsInterfaces"
        ),
        "23.02": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
        "23.11": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
        "24.05": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
        "24.11": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
        "25.05": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
        "25.11": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault "
            "ProfileInfluxDBFrequency ProfileInfluxDBHost ProfileInfluxDBPass ProfileInfluxDBRTPolicy "
            "ProfileInfluxDBTimeout ProfileInfluxDBUser SysfsInterfaces"
        ),
        "26.05": (
            "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
            "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
            "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
            "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
            "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
            "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
            "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
            "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
            "EnergyIPMIVariable EnergyIPMIWorkaroundFlags EnergyXCCFake InfinibandOFEDPort InterconnectOFEDPort "
            "ProfileHDF5Default ProfileHDF5Dir ProfileInfluxDBDatabase ProfileInfluxDBDefault "
            "ProfileInfluxDBExtraTags ProfileInfluxDBFlags ProfileInfluxDBFrequency ProfileInfluxDBHost "
            "ProfileInfluxDBPass ProfileInfluxDBRTPolicy ProfileInfluxDBTimeout ProfileInfluxDBUser "
            "SysfsInterfaces"
        ),
    },
}

# secrets a file may hold: never carried into the inventory (slurmdbd.conf's StoragePass belongs in the site overlay;
# acct_gather.conf(5) EnergyIPMIPassword "Password for BMC access", ProfileInfluxDBPass "password for the
# database", 22.05-26.05)
SECRET_KEYS = frozenset({"storagepass", "energyipmipassword", "profileinfluxdbpass"})
# the inventory section of the site overlay (--overrides) that gives each file's keys back
OVERLAY_SECTION = {"slurmdbd.conf": "slurmdbd_conf", "acct_gather.conf": "acct_gather_conf"}


def _secrets(text: str) -> dict[str, tuple[int, str]]:
    """key (lower case) -> (line, key as written) of each password with a value: Key=Value lines, keys
    case-insensitive, '#' starts a comment (slurmdbd.conf(5), acct_gather.conf(5); parse_config.c)."""
    out: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        key, eq, value = line.split("#", 1)[0].strip().partition("=")
        if eq and key.strip().lower() in SECRET_KEYS and value.strip():
            out[key.strip().lower()] = (i, key.strip())
    return out


def has_secret(text: str) -> bool:
    """Whether ``text`` sets a password (SECRET_KEYS) to a value."""
    return bool(_secrets(text))


def mask_secrets(text: str) -> str:
    """``text`` with each password line (SECRET_KEYS with a value, read as _secrets reads them) shown as
    ``Key=(password, not shown)``, its trailing comment dropped too: for what is printed (`conf diff --files`)."""
    out = []
    for line in text.splitlines(keepends=True):
        key, eq, value = line.split("#", 1)[0].partition("=")
        if eq and key.strip().lower() in SECRET_KEYS and value.strip():
            line = f"{key.rstrip()}=(password, not shown){line[len(line.rstrip(chr(13) + chr(10))):]}"
        out.append(line)
    return "".join(out)


def lost_secrets(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, key) of each password the file in ``old`` has and its rewrite in ``new`` would drop: the
    inventory never carries one (an imported site's lives only in its file and the site overlay), so an apply
    without the overlay would cut slurmdbd off its database."""
    out = []
    for name in OVERLAY_SECTION:
        if name in old and name in new:
            kept = _secrets(new[name])
            out += [(name, line, key) for low, (line, key) in _secrets(old[name]).items() if low not in kept]
    return out


def _release(version: str) -> str:
    """The newest tabulated release at or below ``version`` (the oldest for anything older)."""
    m = re.search(r"(\d{2})\.(\d{2})", version or "")
    want = (int(m.group(1)), int(m.group(2))) if m else (26, 5)
    known = sorted(_TABLES["slurmdbd.conf"], key=lambda r: tuple(int(x) for x in r.split(".")))
    best = known[0]
    for r in known:
        if tuple(int(x) for x in r.split(".")) <= want:
            best = r
    return best


@cache
def keys(file: str, version: str) -> dict[str, str]:
    """lower-case key -> its spelling, for ``file`` at ``version``."""
    return {k.lower(): k for k in _TABLES[file][_release(version)].split()}


# Which acct_gather plugin reads each acct_gather.conf key: src/interfaces/acct_gather.c (22.05: src/common/
# slurm_acct_gather.c) parses the file with the options of the loaded plugins only (acct_gather_energy_g_conf_options and
# its profile, interconnect and filesystem siblings), and a key no loaded plugin owns is fatal, "Could not open/read/parse
# acct_gather.conf ... Many times this is because you have defined options for plugins that are not loaded" (every
# tag above; seen from the 24.11 judge). Regenerate: the {"Key", S_P_...} entries per src/plugins/acct_gather_*/NAME/
# directory, union over the tags above.
_ACCT_GATHER_OWNERS: dict[str, str] = {
    "acct_gather_energy/ipmi": (
        "EnergyIPMIAssumeBmcOwner EnergyIPMIAuthenticationType EnergyIPMIBridgeSensors "
        "EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId EnergyIPMIDisableAutoProbe "
        "EnergyIPMIDiscreteReading EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
        "EnergyIPMIEntitySensorNames EnergyIPMIFrequency EnergyIPMIIgnoreNonInterpretableSensors "
        "EnergyIPMIIgnoreScanningDisabled EnergyIPMIInterpretOemData EnergyIPMIk_g EnergyIPMIk_g_len "
        "EnergyIPMIPassword EnergyIPMIPowerSensors EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
        "EnergyIPMIRegisterSpacing EnergyIPMIRereadSdrCache EnergyIPMIRetransmissionTimeout "
        "EnergyIPMISessionTimeout EnergyIPMISharedSensors EnergyIPMITimeout EnergyIPMIUsername "
        "EnergyIPMIVariable EnergyIPMIWorkaroundFlags"
    ),
    "acct_gather_energy/xcc": (
        "EnergyIPMIAuthenticationType EnergyIPMICalcAdjustment EnergyIPMICipherSuiteId "
        "EnergyIPMIDisableAutoProbe EnergyIPMIDriverAddress EnergyIPMIDriverDevice EnergyIPMIDriverType "
        "EnergyIPMIFrequency EnergyIPMIPassword EnergyIPMIPrivilegeLevel EnergyIPMIProtocolVersion "
        "EnergyIPMIRegisterSpacing EnergyIPMIRetransmissionTimeout EnergyIPMISessionTimeout "
        "EnergyIPMITimeout EnergyIPMIUsername EnergyIPMIWorkaroundFlags EnergyXCCFake"
    ),
    "acct_gather_interconnect/ofed": (
        "InfinibandOFEDPort InterconnectOFEDPort"
    ),
    "acct_gather_interconnect/sysfs": (
        "SysfsInterfaces"
    ),
    "acct_gather_profile/hdf5": (
        "ProfileHDF5Default ProfileHDF5Dir"
    ),
    "acct_gather_profile/influxdb": (
        "ProfileInfluxDBDatabase ProfileInfluxDBDefault ProfileInfluxDBExtraTags ProfileInfluxDBFlags "
        "ProfileInfluxDBFrequency ProfileInfluxDBHost ProfileInfluxDBPass ProfileInfluxDBRTPolicy "
        "ProfileInfluxDBTimeout ProfileInfluxDBUser"
    ),
}
# the slurm.conf keys that load them (slurm.conf(5) AcctGatherEnergyType, AcctGatherProfileType,
# AcctGatherInterconnectType, AcctGatherFilesystemType at slurm-22-05-8-1, slurm-24-11-5-1, slurm-26-05-3-1)
ACCT_GATHER_TYPE_KEYS = ("AcctGatherEnergyType", "AcctGatherProfileType", "AcctGatherInterconnectType",
                         "AcctGatherFilesystemType")


def acct_gather_unloaded(key: str, loaded: set[str]) -> str | None:
    """None when a plugin in ``loaded`` (lower-case ``acct_gather_x/y`` values of ACCT_GATHER_TYPE_KEYS) reads
    ``key``; else the plugins that would (the reason the file is refused)."""
    owners = [p for p, ks in _ACCT_GATHER_OWNERS.items() if key.lower() in {k.lower() for k in ks.split()}]
    if not owners or any(p in loaded for p in owners):
        return None
    return " or ".join(owners)


def acct_gather_loaded(settings: dict[str, str]) -> set[str]:
    """The acct_gather plugins slurm.conf's settings (lower-case key -> value) load."""
    return {v.strip().lower() for k in ACCT_GATHER_TYPE_KEYS for v in settings.get(k.lower(), "").split(",")
            if v.strip()}
