"""The cached root filesystems of other Slurm releases, as the code that runs Slurm sees them: where they are,
which release each holds, and the host's own release. Read-only; ``lab/image.py`` builds and removes them
(``slurmkit lab image``). The real parse (``backend/realparse.py``) and the lab run a release's programs from here.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from slurmkit.backend.run import run
from slurmkit.errors import SlurmCommandError
from slurmkit.release import release_of

DEFAULT_IMAGE_DIR = "/var/cache/slurmkit/roots"


@dataclass(frozen=True)
class Image:
    release: str  # "24.11"
    suite: str  # "trixie"
    slurm_version: str  # what `slurmctld -V` says inside, "24.11.5"
    built: str  # UTC time of the build
    build_seconds: float
    path: str

    @property
    def root(self) -> Path:
        return Path(self.path)


def image_dir() -> Path:
    return Path(os.environ.get("SLURMKIT_IMAGE_DIR", DEFAULT_IMAGE_DIR))


def host_release() -> str | None:
    """The Slurm release installed on this host (``slurmctld -V``), or None when there is none."""
    exe = shutil.which("slurmctld") or ("/usr/sbin/slurmctld" if Path("/usr/sbin/slurmctld").exists() else None)
    if exe is None:
        return None
    try:
        return release_of(run([exe, "-V"], timeout=10).stdout)
    except (SlurmCommandError, ValueError):
        return None


def find(release: str) -> Image | None:
    meta = image_dir() / release / "image.json"
    if not meta.exists():
        return None
    try:
        return Image(**json.loads(meta.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def list_images() -> list[Image]:
    d = image_dir()
    if not d.is_dir():
        return []
    return [img for p in sorted(d.iterdir()) if (img := find(p.name)) is not None]


def hide_host_plugins(root: Path) -> None:
    """Mark the root's Slurm plugin dirs opaque for overlayfs, so the view shows only the root's plugins: Slurm
    loads every ``select_*.so`` it finds, and the host's 22.05 ``select_cons_res.so`` beside 24.11's makes every
    client print "Incompatible Slurm plugin". An opaque directory in a lower layer hides the layers below it
    (Documentation/filesystems/overlayfs.rst, "whiteouts and opaque directories")."""
    for d in root.glob("usr/lib/*/slurm*"):
        if d.is_dir() and not d.is_symlink():
            os.setxattr(d, "trusted.overlay.opaque", b"y")
