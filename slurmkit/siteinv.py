"""Where the site inventory is: the one lookup gpusub, `slurmkit report` and the hooks share.

In order:
1. ``$SLURMKIT_INVENTORY``: an explicit path; it must exist (a typo is an error, not a silent fallback);
2. ``slurmkit.yaml`` beside the slurm.conf in use (``$SLURM_CONF``'s directory): `slurmkit conf generate|apply`
   writes the inventory copy there, and so does the lab, so a site whose config lives elsewhere and the lab
   work without an extra variable;
3. ``/etc/slurm/slurmkit.yaml`` (beside Slurm's default /etc/slurm/slurm.conf).

The caller is an edge: it passes its environment (no ``os.environ`` read here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurmkit.errors import UsageError

INVENTORY_NAME = "slurmkit.yaml"
DEFAULT_INVENTORY = "/etc/slurm/" + INVENTORY_NAME


def candidates(environ: Mapping[str, str]) -> list[str]:
    """Every place looked at, in order (for messages that say where slurmkit looked)."""
    out = []
    if environ.get("SLURMKIT_INVENTORY"):
        out.append(environ["SLURMKIT_INVENTORY"])
    conf = environ.get("SLURM_CONF")
    if conf:
        out.append(os.path.join(os.path.dirname(os.path.abspath(conf)), INVENTORY_NAME))
    if DEFAULT_INVENTORY not in out:
        out.append(DEFAULT_INVENTORY)
    return out


def find_inventory(environ: Mapping[str, str]) -> str | None:
    """The site inventory's path, or None when there is none (callers then ask Slurm)."""
    explicit = environ.get("SLURMKIT_INVENTORY")
    if explicit:
        if not os.path.isfile(explicit):
            raise UsageError(f"$SLURMKIT_INVENTORY={explicit}: no such file")
        return explicit
    for path in candidates(environ):
        if os.path.isfile(path):
            return path
    return None
