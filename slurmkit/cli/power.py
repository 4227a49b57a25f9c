"""`slurmkit power suspend|resume|resume-fail HOSTLIST`: the programs slurmctld runs for power saving (the
generated slurmkit-suspend, slurmkit-resume, slurmkit-resume-fail wrappers call these)."""

from __future__ import annotations

import click


@click.group()
def power() -> None:
    """Power nodes off and on through their group's provider (slurmctld's SuspendProgram/ResumeProgram)."""


def _cmd(action: str, doc: str) -> click.Command:
    @click.command(name=action, help=doc)
    @click.argument("hosts")
    @click.option("--inventory", required=True, type=click.Path(dir_okay=False),
                  help="The site inventory (the wrappers pass the copy beside slurm.conf).")
    @click.option("--foreground", is_flag=True, help="Act before returning (by hand); slurmctld's call returns at once.")
    def cmd(hosts: str, inventory: str, foreground: bool) -> int:
        from slurmkit.power.program import main

        return main(action, hosts, inventory, foreground)

    return cmd


power.add_command(_cmd("suspend", "Power HOSTS off (SuspendProgram)."))
power.add_command(_cmd("resume", "Power HOSTS on (ResumeProgram); a node that fails is set DOWN with the reason."))
power.add_command(_cmd("resume-fail", "HOSTS did not come up by ResumeTimeout (ResumeFailProgram): power them off."))
