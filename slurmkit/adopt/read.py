"""Read a site's Slurm config directory with every file its ``Include`` lines name (I/O; the parsing is
``slurmkit.generate.confparse``, pure).

Slurm resolves an Include name as confparse.resolve_include says: an absolute path as is, a relative one beside
slurm.conf (23.02+: read_config.c get_extra_conf_path()) or, through 22.05, beside the including file
(parse_config.c _add_full_path()); ``%c`` is the lower-case ClusterName. Both readings are read where they differ
(the release picks one when the set is parsed). A copy of a site's config taken elsewhere (a backup, a repository,
this project's corpus) keeps absolute Include paths that point at the site: where such a path is absent here, each
suffix of it is tried under the directory, longest first (a ParallelCluster head node's
/opt/slurm/etc/pcluster/x.conf is DIR/pcluster/x.conf in a copy of /opt/slurm/etc), and a note says which was read.

An Include of a directory is read as Slurm reads it: as an empty file (s_p_parse_file() stat()s it, its size is
not 0, fopen() succeeds and fgets() gives no line, so the Include succeeds and nothing in the directory is read;
scontrol of 22.05.8, 24.11.5 and 26.05.5 accept it), with a note. A glob is read by no release (confparse).
"""

from __future__ import annotations

from pathlib import Path

from slurmkit.errors import UsageError
from slurmkit.generate import confparse as cp

# the files a Slurm config directory holds that slurmkit reads (slurm.conf's companions, by their fixed names)
CONFIG_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", "topology.yaml")


def _cluster_name(text: str) -> str:
    for rec in cp.parse_records(text):
        if rec.kind == "clustername":
            return rec.head
    return ""


def _read(path: Path) -> str:
    """A site file's text; one that cannot be read (mode 600 of another user: slurmdbd.conf beside it, an Include
    of root's) is one line naming it, not a traceback."""
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc.strerror or exc} (run as a user who can, e.g. root)") from exc


def _locate(target: str, conf_dir: Path) -> tuple[Path | None, str]:
    """Where an Include's resolved name is on this machine: (path or None, how it was found when not as named)."""
    if not target.startswith("/"):
        where = conf_dir / target
        return (where, "") if where.exists() else (None, "")
    if Path(target).exists():
        return Path(target), ""
    parts = Path(target).parts[1:]
    for i in range(len(parts)):
        cand = conf_dir.joinpath(*parts[i:])
        if cand.exists():
            return cand, "the path is absent here"
    return None, ""


def read_site(path: str | Path) -> tuple[dict[str, str], list[str], Path]:
    """-> (files by the name Slurm resolves them under, notes, the config directory). ``path`` is a directory
    or a slurm.conf."""
    p = Path(path)
    conf_dir = p if p.is_dir() else p.parent
    main = p / "slurm.conf" if p.is_dir() else p
    files: dict[str, str] = {}
    notes: list[str] = []
    if not main.is_file():
        return files, [f"{main}: no slurm.conf"], conf_dir
    files["slurm.conf"] = _read(main)
    for name in CONFIG_FILES[1:]:
        if (conf_dir / name).is_file():
            files[name] = _read(conf_dir / name)
    cluster = _cluster_name(files["slurm.conf"])
    todo = [n for n in CONFIG_FILES if n in files and n != "topology.yaml"]
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for rec in cp.parse_records(files[name], name):
            if not rec.include:
                continue
            # 23.02+ and 22.05 resolve a relative name from a file of another directory differently: both are read
            targets = list(dict.fromkeys(cp.resolve_include(rec.head, cluster, name, rel) for rel in (None, "22.05")))
            for n, target in enumerate(targets):
                if target in files or "*" in target:
                    continue
                where, how = _locate(target, conf_dir)
                if where is None:
                    continue
                if where.is_dir():
                    notes.append(f"{rec.where}: Include {rec.head}: {where} is a directory: Slurm reads it as an empty "
                                 "file, none of the files in it (s_p_parse_file)")
                    files[target] = ""
                    continue
                if how:
                    notes.append(f"{rec.where}: Include {rec.head}: read {where} ({how})")
                if n and targets[0] in files:
                    notes.append(f"{rec.where}: Include {rec.head}: Slurm 22.05 reads {target}, 23.02+ {targets[0]} "
                                 "(a relative Include was beside the including file through 22.05)")
                files[target] = _read(where)
                todo.append(target)
    return files, notes, conf_dir
