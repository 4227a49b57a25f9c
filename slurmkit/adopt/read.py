"""Read a site's Slurm config directory with every file its ``Include`` lines name (I/O; the parsing is
``slurmkit.generate.confparse``, pure).

Slurm resolves an Include name as read_config.c get_extra_conf_path() does (22.05-25.11): an absolute path as is,
a relative one beside slurm.conf (not beside the including file); ``%c`` is the lower-case ClusterName. A copy of
a site's /etc/slurm taken elsewhere (a backup, a repository, this project's corpus) keeps absolute Include paths
that point at the site: where such a path is absent here, the file of the same name beside slurm.conf is read
instead, and a note says so.
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
            target = cp.resolve_include(rec.head, cluster)
            if target in files or "*" in target:
                continue
            where = Path(target) if target.startswith("/") else conf_dir / target
            if not where.is_file() and target.startswith("/") and (conf_dir / Path(target).name).is_file():
                notes.append(f"{rec.where}: Include {rec.head}: read {conf_dir / Path(target).name} (the path is absent here)")
                where = conf_dir / Path(target).name
            if where.is_file():
                files[target] = _read(where)
                todo.append(target)
    return files, notes, conf_dir
