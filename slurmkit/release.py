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


# slurmctld reads gres.conf through 23.02: read_config.c's _gres_reconfig() parses it (gres_parse_config_dummy()
# where it does not load it), so an unknown key is an error line there. slurm-23-11-0-1 removed that call
# (SchedMD commit b9831861a1 "Remove usage of now unneeded gres_parse_config_dummy()"): from 23.11 only slurmd
# reads gres.conf, and only `slurmd -G` (slurmd.c _print_gres() after gres_init()) judges it without a node.
def slurmctld_reads_gres_conf(release: str) -> bool:
    return release_key(release) < (23, 11)


def judge_floor(release: str) -> str:
    """The oldest target release whose config a slurmctld of ``release`` can judge without false findings:
    23.11 removed what older configs may hold and newer daemons refuse (select/cons_res, cgroup.conf's
    CgroupAutomount and Kmem keys: slurm-23-11-0-1 RELEASE_NOTES), so a 23.11+ slurmctld judges 23.11+ only."""
    return "23.11" if release_key(release) >= (23, 11) else "22.05"


def judges(judge: str, target: str) -> bool:
    """A slurmctld of release ``judge`` can real-parse a config for ``target``: not newer than itself (it would
    reject keys and plugins it does not know) and not older than its floor (``judge_floor``)."""
    return release_key(judge_floor(judge)) <= release_key(target) <= release_key(judge)
