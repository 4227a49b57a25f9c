"""Facts about Slurm releases that every layer may need (no imports from the rest of slurmkit).

Today: how to spell a release, and where a lab gets a release the host does not have (the Debian suite that
packages it). The config-level facts still live in ``generate/versions.py`` (owned by the generator); new facts
that the backend and the lab need go here, so neither has to import the generator.
"""

from __future__ import annotations

import re

# Debian suites that ship a Slurm release as `slurmctld`/`slurmd`/`slurm-client`/`slurmdbd` packages:
# bookworm (Debian 12) ships 22.05.8, trixie (Debian 13) ships 24.11.5 (packages.debian.org, source `slurm-wlm`).
DEBIAN_SUITES: dict[str, str] = {"22.05": "bookworm", "24.11": "trixie"}

_RELEASE = re.compile(r"(\d{2})\.(\d{2})")


def release_of(version: str) -> str:
    """``"slurm-wlm 24.11.5"`` / ``"24.11.5"`` / ``"24.11"`` -> ``"24.11"``; ValueError for anything else."""
    m = _RELEASE.search(version)
    if not m:
        raise ValueError(f"not a Slurm version: {version!r}")
    return f"{m.group(1)}.{m.group(2)}"


def release_key(release: str) -> tuple[int, int]:
    a, b = release_of(release).split(".")
    return int(a), int(b)


def scontrol_json(release: str) -> bool:
    """``scontrol --json show node|job|partition`` exists from 23.02 (scontrol.1 of slurm-23-02-7-1: "Formats
    information from the show command as JSON ... implicitly sets the --details option"; absent in 22.05's)."""
    return release_key(release) >= (23, 2)
