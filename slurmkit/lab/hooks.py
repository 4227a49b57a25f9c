"""``lab up --hooks``: slurmkit's prolog/epilog/health hooks wired into the lab's slurm.conf, run with a fake NVML
state per node (DIR/fake-nvml/<node>.json, seeded before slurmd starts; edit one to inject a fault), their state
and textfile dirs under the lab's dir. The power program (``--power``) runs through the same command."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from slurmkit.lab.base import LabBase


class HooksMixin(LabBase):
    def _hooks_command(self) -> str:
        env = [
            f"SLURMKIT_FAKE_NVML={self.dir / 'fake-nvml'}",
            f"SLURMKIT_STATE_DIR={self.dir / 'hookstate'}",
            # each virtual node's textfile in its own dir (never the host's node_exporter dir, one file per node)
            f"SLURMKIT_TEXTFILE_DIR={self.dir / 'textfile' / '%n'}",
            f"SLURMKIT_POWER_LOG={self.dir / 'log' / 'power.log'}",
            f"PYTHONPATH={Path(__file__).resolve().parents[2]}",
        ]
        return " ".join(["/usr/bin/env", *(shlex.quote(e) for e in env), shlex.quote(sys.executable), "-m", "slurmkit.cli.main"])

    def fake_nvml_file(self, node: str) -> Path:
        return self.dir / "fake-nvml" / f"{node}.json"

    def _nvml_state(self) -> dict:
        """The state every node starts with: --fake-nvml's, checked against the lab's shape, or a healthy one (per
        GPU type: {type: state})."""
        from slurmkit.lab.nvmlstate import healthy_state, load_template

        s = self.spec
        if s.fake_nvml_template:
            return {t: load_template(s.fake_nvml_template, s.gpus_per_node, t) for t, _n in s.gpu_types}
        return {t: healthy_state(s.gpus_per_node, t) for t, _n in s.gpu_types}

    def _seed_fake_nvml(self, states: dict) -> None:
        for n in self.spec.all_node_names:
            self.fake_nvml_file(n).write_text(json.dumps(states[self.spec.node_gpu_type(n)], indent=1))
