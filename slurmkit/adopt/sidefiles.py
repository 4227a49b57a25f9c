"""`conf import` of the files beside slurm.conf that `conf generate` writes (slurmdbd.conf, plugstack.conf,
job_container.conf, acct_gather.conf): each read back into the inventory keys it is generated from
(``accounting``, ``runtime.pyxis``, ``runtime.tmpfs``, ``runtime.energy``), and what the model does not hold into
that file's pass-through key (``slurmdbd_conf``, ``plugstack_conf``, ``job_container_conf``, ``acct_gather_conf``),
which the generator merges over its own lines (an empty value drops one of them). So a site whose files slurmkit
wrote, or that an admin edited since, generates the same files again. Pure: texts in, inventory keys out.

What cannot be carried is a ``lost`` line naming file:line (the CLI prints "not carried: ..." and exits 1): a
password (slurmdbd.conf StoragePass, acct_gather.conf EnergyIPMIPassword/ProfileInfluxDBPass: the inventory is
shared and versioned; the site overlay holds StoragePass), a key the release's reader refuses, a value the
reader would refuse (a port out of range), an Include, job_container.conf's per-node NodeName= lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from slurmkit.generate import confparse as cp
from slurmkit.generate import sidekeys
from slurmkit.generate.versions import features_for
from slurmkit.model.cluster import Accounting, Runtime

SIDE_FILES = ("slurmdbd.conf", "plugstack.conf", "job_container.conf", "acct_gather.conf")

# what model/load.py accepts for each modelled field (the same patterns: a value outside them stays as written,
# in the pass-through key, rather than failing the inventory)
_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_DB_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$", re.ASCII)
_PURGE_RE = re.compile(r"^[1-9][0-9]*(month|months|day|days|hour|hours)?$", re.ASCII)
_PATH_RE = re.compile(r"^/[A-Za-z0-9_./+@%:,\[\]-]*$")
_SAFE_WORD_RE = re.compile(r"^[A-Za-z0-9_./=+:@%,-]+$")
_SPANK_WORD_RE = re.compile(r"^[A-Za-z0-9_./=+:@%,*?\[\]-]+$")
_VALUE_BAD_RE = re.compile(r'["\x00-\x1f\x7f]|[^\x00-\x7e]')
# model/load.py PURGE_KINDS, inverted: slurmdbd.conf Purge<Kind>After -> accounting.purge key
_PURGE_KEYS = {"event": "events", "job": "jobs", "resv": "reservations", "step": "steps", "suspend": "suspend",
               "txn": "txn", "usage": "usage"}


def _host_ok(v: str) -> bool:
    return bool(v) and all(_LABEL_RE.fullmatch(label) for label in v.split("."))


def _port(v: str) -> int | None:
    """slurmdbd.conf(5) DbdPort / StoragePort (22.05, 24.11, 26.05): a port number; read_config.c reads them as
    S_P_UINT16 (DbdPort) and S_P_UINT32 (StoragePort) and a port outside 1-65535 is no port a socket can use."""
    return int(v) if v.isdigit() and 0 < int(v) < 65536 else None


def _passthrough(site: list[tuple[str, str, cp.Record]], base: list[tuple[str, str]],
                 skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """What the site's file says beyond ``base`` (the generator's own pairs for the modelled keys): its keys whose
    value differs or that ``base`` lacks, in the site's order, then ``base``'s keys the site lacks as "" (drop)."""
    b = {k.lower(): v for k, v in base}
    out: dict[str, str] = {}
    seen = set()
    for k, v, _rec in site:
        seen.add(k.lower())
        if k.lower() in skip:
            continue
        if b.get(k.lower()) != v:
            out[k] = v
    for k, _v in base:
        if k.lower() not in seen and k.lower() not in skip:
            out[k] = ""
    return out


def _settings(name: str, text: str, files: Mapping[str, str], version: str, lost: list[str],
              line_keys: frozenset[str] = frozenset()) -> list[tuple[str, str, cp.Record]]:
    """The file's pairs (last wins, the site's spelling), each key checked against the release's reader."""
    probs: list[str] = []
    recs = cp.expand_includes(text, name, files, probs, line_keys=line_keys, release=version)
    # an Include is one line below (the inventory holds the file as one); its target is not read here
    lost += [f"{p} (Slurm itself would not read this file)" for p in probs if ": Include " not in p]
    for rec in cp.parse_records(text, name):
        if rec.include:
            lost.append(f"{rec.where}: Include {rec.head}: not carried (the inventory holds {name} as one file)")
    known = sidekeys.keys(name, version)
    out: dict[str, tuple[str, str, cp.Record]] = {}
    for rec in recs:
        if rec.include or (name == "job_container.conf" and rec.kind == "nodename"):
            if not rec.include:
                lost.append(f"{rec.where}: NodeName={rec.head}: a per-node job_container.conf line: not carried "
                            "(runtime.tmpfs is one BasePath for every node)")
            continue
        for k, v in rec.pairs:
            if k.lower() not in known:
                lost.append(f"{rec.where}: {k}: Slurm {version}'s {name} has no such key (its reader refuses the "
                            "file; generate/sidekeys.py)")
            elif k.lower() in sidekeys.SECRET_KEYS:
                # the value is never printed: only that it is there
                lost.append(f"{rec.where}: {k}: a password, never carried into the inventory: give it in the site "
                            f"overlay ('{name.replace('.conf', '')}_conf: {{{k}: ...}}', --overrides), or the next "
                            "apply drops it")
            elif _VALUE_BAD_RE.search(v) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", k):
                lost.append(f"{rec.where}: {k}={v}: a key or value the inventory cannot hold")
            else:
                out[k.lower()] = (k, v, rec)
    return list(out.values())


def import_side_files(files: Mapping[str, str], inv: dict[str, Any], conf: cp.SlurmConf, version: str,
                      lost: list[str], notes: list[str]) -> None:
    """Fill ``inv`` from whichever of SIDE_FILES ``files`` holds."""
    if "slurmdbd.conf" in files:
        _slurmdbd(files, inv, conf, version, lost, notes)
    if "plugstack.conf" in files:
        other = conf.value("PlugStackConfig")
        if other and not other.endswith("/plugstack.conf"):
            # slurm.conf(5) PlugStackConfig (22.05, 24.11, 26.05): "Location of the config file for Slurm stackable
            # plugins ... Default: plugstack.conf (in the same directory as slurm.conf)"
            notes.append(f"plugstack.conf: Slurm reads PlugStackConfig={other}, not this file (imported as the "
                         "plugstack.conf slurmkit writes beside slurm.conf)")
        _plugstack(files["plugstack.conf"], inv, lost, notes)
    if "job_container.conf" in files:
        if not conf.value("JobContainerType").endswith("/tmpfs") and not conf.value("NamespaceType").endswith("/tmpfs"):
            # job_container.conf(5): "parameters used by Slurm's job_container/tmpfs plugin" (namespace/tmpfs 25.11+)
            notes.append("job_container.conf: slurm.conf loads no tmpfs plugin (JobContainerType/NamespaceType), so "
                         "no slurmd reads this file; imported as it is")
        _job_container(files, inv, version, lost, notes)
    if "acct_gather.conf" in files:
        _acct_gather(files, inv, conf, version, lost, notes)


def _carried(name: str, key: str, extra: Mapping[str, str], site: list[tuple[str, str, cp.Record]],
             notes: list[str]) -> None:
    where = {k.lower(): rec.where for k, _v, rec in site}
    for k, v in extra.items():
        what = f"{k}={v}" if v else f"{k} absent (slurmkit writes one)"
        notes.append(f"{where.get(k.lower(), name)}: {what}: carried in the inventory's {key} (not modelled)")


def _slurmdbd(files: Mapping[str, str], inv: dict[str, Any], conf: cp.SlurmConf, version: str, lost: list[str],
              notes: list[str]) -> None:
    """slurmdbd.conf(5) (slurm-22-05-8-1, slurm-24-11-5-1, slurm-26-05-3-1): DbdHost "The short, or long, hostname
    of the machine where Slurm Database Daemon is executed", DbdBackupHost, DbdPort "The port number that the Slurm
    Database Daemon (slurmdbd) listens to for work. The default value is SLURMDBD_PORT" (6819), StorageHost, StoragePort,
    StorageUser, StorageLoc "the name of the database" (default slurm_acct_db), Purge<Kind>After."""
    site = _settings("slurmdbd.conf", files["slurmdbd.conf"], files, version, lost)
    d = {k.lower(): (v, rec) for k, v, rec in site}
    acct: dict[str, Any] = {}
    storage: dict[str, Any] = {}
    purge: dict[str, str] = {}

    def val(key: str) -> tuple[str, str]:
        v, rec = d.get(key, ("", None))
        return v, rec.where if rec else "slurmdbd.conf"

    host, _w = val("dbdhost")
    # slurmdbd's own host: DbdHost, else what slurm.conf's AccountingStorageHost points slurmctld at
    host = host if _host_ok(host) else conf.value("AccountingStorageHost") if _host_ok(conf.value("AccountingStorageHost")) \
        else "localhost"
    acct["host"] = host
    backup, _w = val("dbdbackuphost")
    if _host_ok(backup) and backup != host:
        acct["backup_host"] = backup
    for key, field, target, default in (("dbdport", "port", acct, 6819), ("storageport", "port", storage, 3306)):
        v, where = val(key)
        if v and _port(v) is None:
            lost.append(f"{where}: {key == 'dbdport' and 'DbdPort' or 'StoragePort'}={v}: not a port (1-65535)")
        elif v and _port(v) != default:
            target[field] = _port(v)
    sh, _w = val("storagehost")
    if _host_ok(sh):
        storage["host"] = sh
    for key, field in (("storageuser", "user"), ("storageloc", "database")):
        v, _w = val(key)
        if _DB_NAME_RE.fullmatch(v):
            storage[field] = v
    for k, v, _rec in site:
        m = re.fullmatch(r"purge(event|job|resv|step|suspend|txn|usage)after", k.lower())
        if m and _PURGE_RE.fullmatch(v):
            purge[_PURGE_KEYS[m.group(1)]] = v
    acct["storage"] = storage
    if purge:
        acct["purge"] = purge
    from slurmkit.generate.slurmconf import slurmdbd_base
    from slurmkit.model.load import PURGE_KINDS

    model = Accounting(host=acct["host"], port=acct.get("port", 6819), backup_host=acct.get("backup_host", ""),
                       storage_host=storage.get("host", "localhost"), storage_port=storage.get("port", 3306),
                       storage_user=storage.get("user", "slurm"), storage_loc=storage.get("database", "slurm_acct_db"),
                       purge=tuple((PURGE_KINDS[k], v) for k, v in purge.items()), storage=True)
    bad = {k.lower() for k, v, _r in site if k.lower() in ("dbdport", "storageport") and _port(v) is None}
    extra = _passthrough(site, slurmdbd_base(model), frozenset(sidekeys.SECRET_KEYS | bad))
    inv["accounting"] = acct
    _unpin_slurm_conf(inv, acct)
    if extra:
        inv["slurmdbd_conf"] = extra
        _carried("slurmdbd.conf", "slurmdbd_conf", extra, site, notes)


def _unpin_slurm_conf(inv: dict[str, Any], acct: Mapping[str, Any]) -> None:
    """slurm.conf's AccountingStorageHost/Port/BackupHost, read as pass-through ``slurm_conf`` keys, leave it where
    they say what ``accounting`` now says: an adopted slurm.conf writes them from it (slurmconf.adopted_accounting),
    so a later accounting.port change moves slurmctld (AccountingStoragePort) with slurmdbd (DbdPort) -- before,
    slurm.conf kept the old port and slurmctld lost slurmdbd. One that differs stays as written; one slurm.conf
    lacks is "" (the generator writes none, as the site)."""
    sc = inv.setdefault("slurm_conf", {})
    derived = {"AccountingStorageHost": acct["host"], "AccountingStoragePort": str(acct.get("port", 6819)),
               "AccountingStorageBackupHost": acct.get("backup_host", "")}
    have = {k.lower(): k for k in sc}
    for key, want in derived.items():
        k = have.get(key.lower())
        if k is None:
            if want:
                sc[key] = ""
        elif isinstance(sc[k], str) and sc[k] == want:
            del sc[k]
    if not sc:
        del inv["slurm_conf"]


def _plugstack(text: str, inv: dict[str, Any], lost: list[str], notes: list[str]) -> None:
    """spank(8) at slurm-22-05-8-1, slurm-24-11-5-1 and slurm-26-05-3-1: "The format of each non-comment line in the
    configuration file is: required/optional plugin arguments", "Comments are preceded with '#' and extend to the
    end of the line", and an "include" line takes a glob. The first line, when it is a required spank_pyxis.so
    (what the generator writes for runtime.pyxis), becomes runtime.pyxis; every other line is carried in order in
    ``plugstack_conf`` ("The plugins will simply be called in order")."""
    lines: list[tuple[int, list[str]]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if (words[0] in ("required", "optional") and len(words) >= 2) or (words[0] == "include" and len(words) == 2):
            if all(_SPANK_WORD_RE.fullmatch(w) for w in words[1:]):
                lines.append((n, words))
                continue
            lost.append(f"plugstack.conf:{n}: {raw.strip()}: a word the inventory cannot hold (quotes, '#')")
            continue
        lost.append(f"plugstack.conf:{n}: {raw.strip()}: not a plugstack.conf line (spank(8): 'required|optional "
                    "PLUGIN [ARGS]' or 'include GLOB'): srun and slurmd fail to load the stack")
    rest = lines
    if lines:
        _n, w = lines[0]
        if (w[0] == "required" and w[1].endswith("/spank_pyxis.so") and _PATH_RE.fullmatch(w[1])
                and all(_SAFE_WORD_RE.fullmatch(a) for a in w[2:])):
            rt = inv.setdefault("runtime", {})
            rt["pyxis"] = {"plugin": w[1], **({"args": w[2:]} if w[2:] else {})}
            rest = lines[1:]
    if rest:
        inv["plugstack_conf"] = [" ".join(w) for _n, w in rest]
        for n, w in rest:
            notes.append(f"plugstack.conf:{n}: {' '.join(w)}: carried in the inventory's plugstack_conf (not modelled)")


def _job_container(files: Mapping[str, str], inv: dict[str, Any], version: str, lost: list[str],
                   notes: list[str]) -> None:
    """job_container.conf(5): BasePath "the PATH that the tmpfs plugin should use", AutoBasePath, and from 23.02 Dirs
    "A list of mount points separated with commas ... if not specified it defaults to "/tmp,/dev/shm"" (slurm-24-11-5-1,
    slurm-26-05-3-1; slurm-22-05-8-1 has no Dirs: read_jcconf.c's options are AutoBasePath, BasePath, InitScript,
    NodeName). BasePath reads the rest of its line (S_P_ARRAY with a line handler, read_jcconf.c 23.02+), NodeName too."""
    site = _settings("job_container.conf", files["job_container.conf"], files, version, lost,
                     frozenset({"nodename", "basepath"}))
    d = {k.lower(): (v, rec) for k, v, rec in site}
    if "basepath" not in d:
        if not any(ln.startswith("job_container.conf:") and "NodeName" in ln for ln in lost):
            lost.append("job_container.conf:1: no BasePath: runtime.tmpfs needs one (slurmd: \"BasePath must be "
                        "specified\", read_jcconf.c)")
        return
    base, rec = d["basepath"]
    if not _PATH_RE.fullmatch(base):
        lost.append(f"{rec.where}: BasePath={base}: not an absolute path the inventory can hold")
        return
    tmpfs: dict[str, Any] = {"base_path": base}
    feats = features_for(version)
    if "dirs" in d:
        dv, drec = d["dirs"]
        dirs = [x for x in dv.split(",")]
        if not dirs or not all(_PATH_RE.fullmatch(x) for x in dirs):
            lost.append(f"{drec.where}: Dirs={dv}: a list of absolute paths the inventory cannot hold")
            return
        if dirs != ["/tmp", "/dev/shm"]:
            tmpfs["dirs"] = dirs
    inv.setdefault("runtime", {})["tmpfs"] = tmpfs
    from slurmkit.generate.slurmconf import job_container_base

    model = Runtime(tmpfs_base=base, tmpfs_dirs=tuple(tmpfs.get("dirs", ("/tmp", "/dev/shm"))))
    # a file without Dirs (Slurm's default /tmp,/dev/shm) stays without: ``Dirs: ""`` drops the generator's line
    skip = frozenset({"basepath"} | ({"dirs"} if "dirs" in d else set()))
    extra = _passthrough(site, job_container_base(model, feats), skip)
    if extra:
        inv["job_container_conf"] = extra
        _carried("job_container.conf", "job_container_conf", extra, site, notes)


def _acct_gather(files: Mapping[str, str], inv: dict[str, Any], conf: cp.SlurmConf, version: str, lost: list[str],
                 notes: list[str]) -> None:
    """acct_gather.conf(5) (22.05, 24.11, 26.05): the keys of every acct_gather plugin in one file. runtime.energy is
    ipmi where slurm.conf loads acct_gather_energy/ipmi (slurm.conf(5) AcctGatherEnergyType); the generator's
    EnergyIPMIFrequency/EnergyIPMICalcAdjustment and whatever else the site set (profile, interconnect,
    filesystem) are read against it."""
    site = _settings("acct_gather.conf", files["acct_gather.conf"], files, version, lost)
    loaded = sidekeys.acct_gather_loaded({k: v for k, (_k, v, _r) in conf.settings.items()})
    unloaded = set()
    for k, _v, rec in site:
        owner = sidekeys.acct_gather_unloaded(k, loaded)
        if owner:
            unloaded.add(k.lower())
        if owner and k.lower() not in sidekeys.SECRET_KEYS:
            lost.append(f"{rec.where}: {k}: read by {owner}, which slurm.conf does not load "
                        f"({'/'.join(sidekeys.ACCT_GATHER_TYPE_KEYS)}): every daemon then refuses the file (\"Could "
                        "not open/read/parse acct_gather.conf\", src/interfaces/acct_gather.c)")
    energy = conf.value("AcctGatherEnergyType").lower() == "acct_gather_energy/ipmi"
    if energy:
        inv.setdefault("runtime", {})["energy"] = "ipmi"
    from slurmkit.generate.slurmconf import acct_gather_base

    extra = _passthrough(site, acct_gather_base(Runtime(energy="ipmi" if energy else "none")),
                         frozenset(sidekeys.SECRET_KEYS | unloaded))
    if extra:
        inv["acct_gather_conf"] = extra
        _carried("acct_gather.conf", "acct_gather_conf", extra, site, notes)


def site_comments(files: Mapping[str, str], regenerated: Mapping[str, str]) -> list[str]:
    """One note per comment line of a side file that the regenerated file lacks (the site's own: the inventory holds
    no comment; `conf apply` edits the site's file line by line, so the comment stays there)."""
    out = []
    for name in SIDE_FILES:
        if name not in files:
            continue
        ours = {ln.strip() for ln in regenerated.get(name, "").splitlines() if ln.lstrip().startswith("#")}
        for n, ln in enumerate(files[name].splitlines(), 1):
            s = ln.strip()
            if s.startswith("#") and s not in ours and not s.startswith(("# generated by slurmkit", "# target:")):
                out.append(f"{name}:{n}: the site's comment stays in its file (apply edits lines in place), not in "
                           "the inventory")
    return out
