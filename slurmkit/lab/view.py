"""The host as seen by another Slurm release: a mounted tree where ``/usr`` and ``/etc`` are the root's (its Slurm,
its munge, its C library) laid over the host's, and every other top-level directory is the host's own.

Why not a plain chroot: slurmd runs prologs, epilogs and jobs inside the tree it was started in, and those are
slurmkit's hooks and the tests' jobs, which need the host's Python, venv and work directories. With the root's
``/usr`` *over* the host's, Slurm's binaries find their own (newer) libraries while everything that only the host
has (``/usr/local``, pyenv under ``/root``, a venv under ``/work``) is still there; programs built for the older
host C library run on the newer one (glibc keeps old symbol versions).
This works when the root's release is the newer distribution (a trixie root on a bookworm host). A root whose C
library is older than the host's (a bookworm root for 22.05 on a trixie host) would hide the host's newer C
library from the host's own programs; ``mount_view`` refuses that case in one line rather than start daemons that
fail in odd ways (see docs/architecture.md, "Other Slurm releases").

The tree is mounted at ``/run/slurmkit-views/<hash of the lab dir>``, outside the lab dir, so that nothing that
removes a lab dir can walk into the host through it. It is read-only where it is the root's (overlay without an
upper dir): the cached root never changes. ``/.slurmkit-view`` marks the inside, so a wrapper started from a job
(already inside) does not chroot again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
from pathlib import Path

from slurmkit.backend.roots import WRAPPER_MARK, hide_host_plugins, is_lab_bin
from slurmkit.errors import LabError
from slurmkit.lab.image import Image, mounts_below

VIEWS = Path("/run/slurmkit-views")
MARKER = ".slurmkit-view"
OVERLAID = ("usr", "etc")
# host files that must win over the root's /etc: who the users are, how names resolve
HOST_ETC = ("passwd", "group", "shadow", "gshadow", "hosts", "resolv.conf", "nsswitch.conf", "localtime")
# every Slurm program a lab or a test runs, and where the root keeps it
PROGRAMS = {
    **{p: "/usr/sbin/" + p for p in ("slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged")},
    **{p: "/usr/bin/" + p for p in ("sinfo", "squeue", "scontrol", "sbatch", "srun", "salloc", "scancel", "sacct",
                                     "sacctmgr", "sstat", "sprio", "sshare", "sreport", "sdiag", "scrontab", "sattach",
                                     "sbcast", "strigger", "munge", "unmunge", "remunge")},
}


def view_path(lab_dir: Path) -> Path:
    return VIEWS / hashlib.sha1(str(lab_dir.resolve()).encode()).hexdigest()[:12]


def _glibc(prefix: str) -> tuple[int, ...]:
    for d in ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib"):
        for p in sorted(Path(prefix, d).glob("libc.so.6")):
            m = re.search(rb"GNU C Library[^\n]*?version (\d+)\.(\d+)", p.read_bytes())
            if m:
                return int(m.group(1)), int(m.group(2))
    return ()


def mount_view(image: Image, lab_dir: Path) -> Path:
    root = image.root
    hide_host_plugins(root)
    host_libc, root_libc = _glibc("/"), _glibc(str(root))
    if host_libc and root_libc and root_libc < host_libc:
        raise LabError(
            f"the Slurm {image.release} root has glibc {'.'.join(map(str, root_libc))}, older than the host's "
            f"{'.'.join(map(str, host_libc))}: laying it over the host would break the host's programs in jobs; "
            "not supported yet"
        )
    target = view_path(lab_dir)
    unmount_view(lab_dir)
    target.mkdir(parents=True, exist_ok=True)
    try:
        _mount(["-t", "tmpfs", "-o", "mode=755,size=16m", "slurmkit-view", str(target)])
        _mount(["--make-private", str(target)])
        (target / MARKER).write_text(f"{image.release} {root}\n")
        for entry in sorted(os.listdir("/")):
            host = Path("/", entry)
            mine = root / entry
            dest = target / entry
            if entry in OVERLAID and mine.is_dir() and host.is_dir():
                dest.mkdir()
                _mount(["-t", "overlay", "slurmkit-view", "-o", f"lowerdir={mine}:{host}", str(dest)])
            elif mine.is_symlink():  # bin -> usr/bin, lib -> usr/lib, ... (merged /usr)
                dest.symlink_to(os.readlink(mine))
            elif host.is_dir() and not host.is_symlink():
                dest.mkdir()
                _mount(["--rbind", str(host), str(dest)])
            elif host.is_symlink():
                dest.symlink_to(os.readlink(host))
        _mount(["--make-rprivate", str(target)])
        # the copy of the views dir that --rbind /run brought in (it holds this very tree)
        inner = target / str(VIEWS).lstrip("/")
        for mnt in sorted(mounts_below(str(inner)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        for f in HOST_ETC:
            dest = target / "etc" / f
            # never onto a symlink: mount(8) follows it in the host's namespace, and the root's etc/localtime ->
            # /usr/share/zoneinfo/Etc/UTC put one bind mount on the HOST's zoneinfo file per view, never unmounted
            # (391 after a day of labs, and then job_container/tmpfs of the host's 22.05 failed every job: "_create_ns:
            # ns base mount failed: Invalid argument"). A link resolves inside the view (its /usr) as it is.
            if Path("/etc", f).is_file() and dest.exists() and not dest.is_symlink():
                _mount(["--bind", f"/etc/{f}", str(dest)])
    except BaseException:
        unmount_view(lab_dir)
        raise
    return target


def unmount_view(lab_dir: Path) -> None:
    target = view_path(lab_dir)
    for mnt in sorted(mounts_below(str(target)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
    if target.is_dir() and not mounts_below(str(target)):
        try:
            target.rmdir()
        except OSError:
            pass


DAEMONS = frozenset({"slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged"})


def loader(root: Path) -> tuple[Path, str]:
    """The root's dynamic loader and the library path that makes a root program use the root's libraries."""
    for pattern in ("usr/lib64/ld-linux-*.so.*", "lib64/ld-linux-*.so.*", "usr/lib/ld-linux-*.so.*", "lib/ld-linux-*.so.*"):
        found = sorted(root.glob(pattern))
        if found:
            break
    else:
        raise LabError(f"no dynamic loader (ld-linux*.so) in {root}")
    triplets = sorted(p for p in root.glob("usr/lib/*-linux-gnu") if p.is_dir())
    dirs = [d for t in triplets for d in (t / "slurm-wlm", t)] + [root / "usr/lib"]
    return found[0], ":".join(str(d) for d in dirs)


def plugin_dir(root: Path) -> str:
    """Where the root keeps Slurm's plugins (slurm.conf ``PluginDir`` for a lab of this release)."""
    found = sorted(root.glob("usr/lib/*/slurm-wlm"))
    if not found:
        raise LabError(f"no Slurm plugin dir (usr/lib/*/slurm-wlm) in {root}")
    return str(found[0])


def lab_path(path: str, bin_dir: Path | None) -> str:
    """``path`` with every lab's wrapper dir taken out and ``bin_dir`` (this lab's, for a foreign release) put
    first: one lab's Slurm commands on PATH, never a previous lab's in front of this one's (whose plugins then
    refuse the other release: "Incompatible Slurm plugin")."""
    keep = [e for e in path.split(os.pathsep) if not is_lab_bin(e) and (bin_dir is None or e != str(bin_dir))]
    return os.pathsep.join(([str(bin_dir)] if bin_dir is not None else []) + keep)


def write_wrappers(view: Path, bin_dir: Path, root: Path) -> None:
    """One small script per Slurm program in ``bin_dir`` that runs the root's program, in the caller's working
    directory and environment; put ``bin_dir`` first on PATH (``Lab.env`` does).

    Clients (sinfo, sbatch, srun, ...) run through the root's own dynamic loader with the root's libraries first
    (``ld.so --library-path``), so any user can run them, not only root (chroot needs CAP_SYS_CHROOT, and tests
    submit as other users); their plugins come from the root through slurm.conf's PluginDir. Daemons run inside the
    view (``chroot``; the lab starts them as root), where their prologs and jobs find the root's Slurm. Inside the
    view (a job calling srun) every wrapper runs the program directly."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    ld, libs = loader(root)
    for name, path in PROGRAMS.items():
        # bash, not sh: dash drops environment variables whose names are not identifiers, and a batch script's
        # exported functions (BASH_FUNC_name%%, gpusub's task setup) must reach srun's tasks
        if name in DAEMONS:
            outside = (
                f"exec /usr/sbin/chroot {shlex.quote(str(view))} /bin/bash -c 'cd \"$1\" 2>/dev/null || cd /; shift; "
                f"exec \"$@\"' bash \"$PWD\" {path} \"$@\"\n"
            )
        else:
            outside = (
                f"exec {shlex.quote(str(ld))} --argv0 {name} --library-path {shlex.quote(libs)} "
                f"{shlex.quote(str(root) + path)} \"$@\"\n"
            )
        body = (
            "#!/bin/bash\n"
            f"{WRAPPER_MARK}\n"
            f"if [ -e /{MARKER} ]; then exec {path} \"$@\"; fi\n" + outside
        )
        p = bin_dir / name
        p.write_text(body)
        p.chmod(0o755)


def _mount(args: list[str]) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise LabError(f"mount {' '.join(args)} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:] or ['?']}")
