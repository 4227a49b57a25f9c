"""Root filesystems that give the lab a Slurm release the host does not have (``slurmkit lab image``).

A root is a minbase Debian of the suite that packages the release (``slurmkit.release.DEBIAN_SUITES``), built
once with ``debootstrap`` from the Debian mirror apt already uses, with Slurm and munge installed inside, and kept
under ``/var/cache/slurmkit/roots/<release>`` (env ``SLURMKIT_IMAGE_DIR``) so later labs and CI runs on the same
machine reuse it. A root is complete only when its ``image.json`` exists: a build is made in a temporary sibling
directory and renamed into place, so an interrupted build never looks like a usable root.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from slurmkit.backend.roots import DEFAULT_IMAGE_DIR, Image, find, host_release, image_dir, list_images
from slurmkit.backend.run import run
from slurmkit.errors import LabError
from slurmkit.release import DEBIAN_SUITES, ROLLING_SUITES, release_of

__all__ = ["DEFAULT_IMAGE_DIR", "Image", "build", "ensure", "find", "host_release", "image_dir", "list_images", "remove"]

# what a lab needs inside the root; slurm-wlm-basic-plugins has job_submit/lua and the other optional plugins
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "slurm-wlm-basic-plugins")
# what one root carries besides: the bookworm root also gives `lab up --accounting` MariaDB 10.11 where the host's
# MariaDB does not work with slurmdbd (a Debian 13 host's 11.8; slurmkit/lab/accounting.py mariadb_root)
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {"22.05": ("mariadb-server",)}


def packages(release: str) -> tuple[str, ...]:
    return PACKAGES + EXTRA_PACKAGES.get(release, ())


Progress = Callable[[str], None]


def remove(release: str) -> bool:
    p = image_dir() / release
    if not p.exists():
        return False
    _unmount_below(p)
    shutil.rmtree(p)
    return True


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses (deb822 ``*.sources`` or one-line ``sources.list``), else deb.debian.org."""
    candidates: list[str] = []
    for f in sorted((sources / "sources.list.d").glob("*.sources")) if (sources / "sources.list.d").is_dir() else []:
        candidates += re.findall(r"^URIs:\s*(\S+)", f.read_text(errors="replace"), re.M)
    for f in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]:
        if f.is_file():
            candidates += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", f.read_text(errors="replace"), re.M)
    for uri in candidates:
        if uri.rstrip("/").endswith("/debian"):
            return uri
    return "http://deb.debian.org/debian"


def build(release: str, progress: Progress = lambda m: None, mirror: str | None = None) -> Image:
    """Build (or rebuild) the root for ``release``; refuses in one line naming what is missing."""
    if release not in DEBIAN_SUITES:
        raise LabError(f"no root recipe for Slurm {release}; known: {', '.join(sorted(DEBIAN_SUITES))}")
    if os.geteuid() != 0:
        raise LabError("building a root needs root (debootstrap, chroot, mount)")
    if shutil.which("debootstrap") is None:
        raise LabError("missing debootstrap; install with: apt-get install -y --no-install-recommends debootstrap")
    suite = DEBIAN_SUITES[release]
    mirror = mirror or apt_mirror()
    final = image_dir() / release
    tmp = image_dir() / f".build-{release}-{os.getpid()}"
    image_dir().mkdir(parents=True, exist_ok=True)
    _unmount_below(tmp)
    if tmp.exists():
        shutil.rmtree(tmp)
    t0 = time.monotonic()
    try:
        progress(f"debootstrap --variant=minbase {suite} from {mirror} (about a minute)")
        _stream(debootstrap_argv(suite, tmp, mirror), progress, _debootstrap_line, what=f"debootstrap {suite}",
                timeout=1800)
        # keep package scripts from starting daemons inside the root (invoke-rc.d honours policy-rc.d exit 101)
        policy = tmp / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        progress(f"apt-get install {' '.join(packages(release))} (inside the {suite} root)")
        script = (
            f"set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -q {apt_options(suite)}; "
            f"apt-get install -y -q --no-install-recommends {' '.join(packages(release))}; apt-get clean; "
            "rm -rf /var/lib/apt/lists/*"
        )
        # /proc for the package scripts, mounted in a private mount namespace: it never appears on the host, so a
        # lab view made meanwhile (it bind-mounts the host's /var, /tmp, ...) cannot pin a copy of it, and it goes
        # away with the namespace whatever happens
        inner = f"mount -t proc proc {shlex.quote(str(tmp / 'proc'))} && exec chroot {shlex.quote(str(tmp))} sh -c {shlex.quote(script)}"
        _stream(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner], progress, _apt_line,
                what=f"apt-get install in the {suite} root", timeout=1800)
        out = run(["chroot", str(tmp), "/usr/sbin/slurmctld", "-V"], timeout=30).stdout.strip()
        version = out.split()[-1] if out else "?"
        if release_of(version) != release:
            raise LabError(f"the {suite} root has Slurm {version}, not {release}; the suite's packages changed")
        if final.exists():
            remove(release)
        img = Image(release=release, suite=suite, slurm_version=version, built=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    build_seconds=round(time.monotonic() - t0, 1), path=str(final))
        (tmp / "image.json").write_text(json.dumps(asdict(img), indent=1) + "\n")
        tmp.rename(final)
        progress(f"root for Slurm {version} ready in {img.build_seconds:.0f}s: {final}")
        return img
    except BaseException:
        _unmount_below(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def debootstrap_argv(suite: str, target: Path, mirror: str) -> list[str]:
    """debootstrap in a private mount namespace: its second stage mounts /proc and /sys inside the target
    (debootstrap's functions setup_proc), and a lab view made meanwhile bind-mounts the host's trees, so a mount made
    on the host could be pinned by that view; in its own namespace it never appears on the host and goes away with
    the namespace whatever happens."""
    return ["unshare", "--mount", "--propagation", "private",
            "debootstrap", "--variant=minbase", suite, str(target), mirror]


def apt_options(suite: str) -> str:
    """Options for ``apt-get update`` inside a root of ``suite`` (ROLLING_SUITES: the Release file's Valid-Until)."""
    return "-o Acquire::Check-Valid-Until=false" if suite in ROLLING_SUITES else ""


def ensure(release: str, progress: Progress = lambda m: None) -> Image:
    img = find(release)
    if img is not None:
        return img
    progress(f"no cached root for Slurm {release} in {image_dir()}; building it once")
    return build(release, progress)


def _debootstrap_line(line: str) -> str | None:
    # "I: Retrieving libc6 2.41-12" -> shown every so often; the "I: Base system installed" lines always
    if line.startswith("I: ") and not line.startswith(("I: Retrieving", "I: Validating", "I: Extracting", "I: Unpacking ", "I: Configuring ")):
        return line[3:]
    return None


def _apt_line(line: str) -> str | None:
    if line.startswith(("Get:", "Setting up slurm", "Setting up munge")):
        return line
    return None


_MISSING = [
    # apt-get: "E: Failed to fetch http://.../slurmctld_24.11.5-4_amd64.deb  Could not resolve ..."
    re.compile(r"Failed to fetch \S*/([a-z0-9.+-]+?)_[^/\s]+\.deb"),
    re.compile(r"Unable to locate package (\S+)"),
    # debootstrap: "E: Couldn't download package libc6 (ver 2.41-12 arch amd64)" / "Failed getting release file"
    re.compile(r"Couldn't download package (\S+)"),
    re.compile(r"Failed getting release file (\S+)"),
    re.compile(r"Couldn't download (\S+)"),
]


def _stream(argv: list[str], progress: Progress, pick: Callable[[str], str | None], what: str, timeout: float) -> None:
    """Run a long build step, passing selected output lines to ``progress``; on failure one line naming the package
    that could not be had (offline) or the step's last error line."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    tail: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip()
        tail = (tail + [line])[-40:]
        shown = pick(line)
        if shown:
            progress(shown)
        if time.monotonic() > deadline:
            proc.kill()
            raise LabError(f"{what} took more than {timeout:.0f}s")
    rc = proc.wait()
    if rc == 0:
        return
    text = "\n".join(tail)
    for pat in _MISSING:
        m = pat.search(text)
        if m:
            raise LabError(f"{what} failed: could not download {m.group(1)} (offline, or the mirror lacks it)")
    last = next((ln for ln in reversed(tail) if ln.startswith(("E:", "W:"))), tail[-1] if tail else "")
    raise LabError(f"{what} failed (rc={rc}): {last}")


def _unmount_below(path: Path) -> None:
    """Lazily unmount anything mounted at or below ``path`` (a build killed while /proc was mounted inside)."""
    prefix = str(path.resolve())
    for mnt in sorted(mounts_below(prefix), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)


def mounts_below(prefix: str) -> list[str]:
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for ln in lines:
        target = ln.split()[4].encode().decode("unicode_escape")
        if target == prefix or target.startswith(prefix.rstrip("/") + "/"):
            out.append(target)
    return out
