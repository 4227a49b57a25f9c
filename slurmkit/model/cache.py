"""A per-user cache of parsed inventories, for the hot paths that read the same site inventory on every call
(gpusub on the login node, the prolog on every job start).

The key is the sha256 of the inventory's bytes and slurmkit's version, so an edited file or an upgraded slurmkit
is parsed again; a hit skips importing PyYAML and re-validating the whole inventory. Entries live in
``$XDG_CACHE_HOME/slurmkit/inventory/`` (mode 0700, written atomically). The cache is an optimisation only: any
problem reading or writing it falls back to a normal load, and a bad inventory is never cached.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from slurmkit import __version__
from slurmkit.errors import UsageError

if TYPE_CHECKING:
    from slurmkit.model.cluster import Cluster


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slurmkit" / "inventory"


def load_cluster_cached(path: str | Path) -> Cluster:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read inventory: {exc.strerror}") from exc
    key = hashlib.sha256(data + b"\0" + __version__.encode() + b"\0" + str(p).encode()).hexdigest()
    entry = cache_dir() / f"{key}.pickle"
    try:
        st = entry.stat()
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:  # only our own, unshared entries
            with open(entry, "rb") as fh:
                cluster = pickle.load(fh)  # noqa: S301 - written by this user into a 0700 directory
            return cluster  # type: ignore[no-any-return]
    except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError, TypeError):
        pass
    from slurmkit.model.load import load_cluster_text

    cluster = load_cluster_text(data.decode(), source=str(p))
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(entry.parent)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(cluster, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o600)
        os.replace(tmp, entry)
    except OSError:
        pass
    return cluster
