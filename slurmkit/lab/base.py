"""The lab's core that every concern shares: its dir and paths, the Slurm release it runs (the host's, or another
from a root through a view: ``foreign``), the environment its clients need, and which of its daemons run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from slurmkit.errors import LabError
from slurmkit.lab.procs import alive, host_bin, is_program, read_pid
from slurmkit.lab.spec import LabSpec

Progress = Callable[[str], None]


class LabBase:
    def __init__(self, spec: LabSpec):
        self.spec = spec
        self.dir = Path(spec.dir).resolve()
        self._host_release: str | None = None
        self._node_cgroups: dict[str, dict[str, Path]] = {}

    # --- release -------------------------------------------------------------------------------------------
    @property
    def host_release(self) -> str | None:
        if self._host_release is None:
            from slurmkit.lab.image import host_release

            self._host_release = host_release() or ""
        return self._host_release or None

    @property
    def foreign(self) -> bool:
        """True when the lab runs a Slurm release other than the host's (from a root, through a view)."""
        return self.spec.slurm is not None and self.spec.slurm != self.host_release

    @property
    def release(self) -> str:
        """The Slurm release this lab runs ("22.05", "24.11")."""
        rel = self.spec.slurm or self.host_release
        if rel is None:
            raise LabError("no Slurm on this host; pass --slurm RELEASE to run one from a root filesystem")
        return rel

    @property
    def bin_dir(self) -> Path:
        """Wrappers that run the lab's release of every Slurm program (only for a foreign release)."""
        return self.dir / "bin"

    def exe(self, name: str) -> str:
        """The program ``name`` of the lab's release: a wrapper into the view, or the host's binary."""
        from slurmkit.lab.view import PROGRAMS

        if self.foreign and name in PROGRAMS:
            return str(self.bin_dir / name)
        return host_bin(name)

    # --- paths ---------------------------------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.dir / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        from slurmkit.lab.view import is_lab_bin, lab_path

        path = os.environ.get("PATH", os.defpath)
        if self.foreign:
            return {"SLURM_CONF": str(self.conf), "PATH": lab_path(path, self.bin_dir)}
        if any(is_lab_bin(e) for e in path.split(os.pathsep)):  # another lab's wrappers would answer first
            return {"SLURM_CONF": str(self.conf), "PATH": lab_path(path, None)}
        return {"SLURM_CONF": str(self.conf)}

    @property
    def user_env(self) -> dict[str, str]:
        """What a shell using the lab needs (`slurmkit lab env`): SLURM_CONF for Slurm's commands and gpusub (which
        finds the inventory copy slurmkit.yaml beside it), SLURMKIT_LAB_DIR for `slurmkit lab status|down`, and with
        --hooks the per-node fake NVML states for running `slurmkit hook|check` by hand. (PATH, for a foreign
        release's wrappers, is printed by `lab env` itself: it extends the shell's own $PATH.)"""
        env = {"SLURM_CONF": str(self.conf), "SLURMKIT_LAB_DIR": str(self.dir)}
        if self.spec.hooks:
            env["SLURMKIT_FAKE_NVML"] = str(self.dir / "fake-nvml")
        if self.spec.monitoring:
            from slurmkit.lab.monitoring import url

            env["SLURMKIT_PROMETHEUS_URL"] = url(self)
        return env

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @property
    def view(self) -> Path:
        from slurmkit.lab.view import view_path

        return view_path(self.dir)

    # --- state ---------------------------------------------------------------------------------------------
    def _pidfiles(self) -> Iterator[Path]:
        if self.run_dir.is_dir():
            yield from sorted(self.run_dir.glob("*.pid"))

    def running_pids(self) -> dict[str, int]:
        """Daemons from our pid files that are alive *and* still the program the file names: a pid file left by
        a crash may hold a number the kernel has since given to an unrelated process, which must never be
        signalled."""
        out = {}
        for pf in self._pidfiles():
            pid = read_pid(pf)
            if pid and alive(pid) and is_program(pid, pf.stem.split("-", 1)[0]):
                out[pf.stem] = pid
        return out

    def is_up(self) -> bool:
        return bool(self.running_pids())
