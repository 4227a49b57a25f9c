"""`slurmkit lab up|status|env|down`."""

from __future__ import annotations

import json
import os
import sys

import click

from slurmkit.lab import DEFAULT_DIR, DEFAULT_PORT_BASE, Lab, LabSpec
from slurmkit.release import DEBIAN_SUITES

_dir = click.option(
    "--dir", "directory", default=lambda: os.environ.get("SLURMKIT_LAB_DIR", DEFAULT_DIR), show_default=DEFAULT_DIR,
    help="Lab directory (env SLURMKIT_LAB_DIR).",
)


@click.group()
def lab() -> None:
    """A real multi-node Slurm (munged, slurmctld, N slurmd) on this one machine."""


@lab.command()
@_dir
@click.option("--nodes", default=None, type=click.IntRange(1, 64),
              help="How many nodes  [default: 8, or the sum of --gpu-type's TYPE:NODES]")
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 16))
@click.option("--gpu-type", default="h100", show_default=True,
              help="TYPE for every node, or TYPE:NODES,... (a100:2,h100:2: node[1-2] a100, node[3-4] h100): one node "
                   "group and one partition per type beside partition gpu (all), for typed quotas.")
@click.option("--nodes-per-leaf", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--accounting", is_flag=True,
              help="Add MariaDB + slurmdbd so sacct works; they listen on --port-base+1000 (slurmdbd) and +1001 "
                   "(MariaDB), ports of their own that must be free too.")
@click.option("--hooks", is_flag=True, help="Wire slurmkit's prolog/epilog/health hooks (fake NVML per node).")
@click.option("--healthcheck-interval", default=0, type=click.IntRange(0), help="HealthCheckInterval with --hooks.")
@click.option("--fake-nvml", "fake_nvml", type=click.Path(exists=True, dir_okay=False),
              help="With --hooks: recorded NVML state (JSON) served to every node's checks, with exactly "
                   "--gpus-per-node GPUs of --gpu-type [a healthy state synthesized for that shape].")
@click.option("--port-base", default=lambda: int(os.environ.get("SLURMKIT_LAB_PORT_BASE", DEFAULT_PORT_BASE)),
              show_default=str(DEFAULT_PORT_BASE), type=click.IntRange(1024, 60000),
              help="slurmctld port; slurmd of nodeI on base+I; with --accounting slurmdbd on base+1000 and MariaDB "
                   "on base+1001 (env SLURMKIT_LAB_PORT_BASE). Ports inside the host's ephemeral range "
                   "(net.ipv4.ip_local_port_range) are refused: any outgoing connection may hold them.")
@click.option("--slurm", "slurm", type=click.Choice(sorted(DEBIAN_SUITES)), default=None,
              help="Slurm release to run (default: the host's own); another release runs from a cached root "
                   "filesystem, built on first use (see `slurmkit lab image`).")
@click.option("--topology", type=click.Choice(["tree", "block"]), default="tree", show_default=True,
              help="tree: leaf switches of --nodes-per-leaf under a spine; block: blocks of --nodes-per-leaf "
                   "(topology/block, Slurm 24.05+).")
@click.option("--spare", default=0, show_default=True, type=click.IntRange(0, 64),
              help="Room for this many more nodes (node<N+1>..), not in the cluster yet: ports, hosts and spool "
                   "ready for `slurmkit nodes add` (or power-managed nodes).")
@click.option("--power", default=0, show_default=True, type=click.IntRange(0, 64),
              help="The last N nodes are powered on demand (Slurm power saving through slurmkit's lab provider: "
                   "their slurmd stops when idle for --suspend-time and starts when a job needs them).")
@click.option("--suspend-time", default=10, show_default=True, type=click.IntRange(1),
              help="With --power: idle seconds before a node is powered off (SuspendTime).")
@click.option("--configless", is_flag=True,
              help="slurmd fetch their config from slurmctld (SlurmctldParameters=enable_configless, "
                   "slurmd --conf-server), the way large sites keep thousands of nodes in sync.")
@click.option("--preset", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Shape the lab after a site inventory (examples/gb200-nvl72.yaml): its GPU node group, partitions "
                   "and topology kind, scaled to --nodes and --nodes-per-leaf; its GPUs replace --gpus-per-node/--gpu-type.")
@click.option("--slow-node", "slow_nodes", multiple=True, metavar="NODE",
              help="Cap NODE's slurmd and its jobs with a CPU quota (cgroup v1 cpu), making it really slower "
                   "(repeatable; see `slurmkit lab slow`).")
@click.option("--submit-policy", "submit_policy", is_flag=True,
              help="Run with the job_submit.lua generated from a submit_policy (JobSubmitPlugins=lua): GPU jobs need "
                   "--time, get per-GPU CPU/memory defaults, multi-node jobs that fit a leaf get --switches=1.")
@click.option("--cgroups", is_flag=True,
              help="Isolation in the kernel: proctrack/cgroup + task/cgroup (ConstrainCores, ConstrainRAMSpace, "
                   "ConstrainDevices) on cgroup v1, one cgroup tree per node; nodes get this host's core count.")
@click.option("--monitoring", is_flag=True,
              help="Also run Debian's prometheus, one prometheus-node-exporter per node (its textfile dir) and "
                   "`slurmkit exporter`, with the rules `slurmkit monitor generate` writes.")
@click.option("--monitoring-port", default=0, type=click.IntRange(0, 65000),
              help="Prometheus's port (default: port base + 140); the exporter +1, nodeI's node_exporter +1+I.")
@click.option("--slow-cpus", default=0.1, show_default=True, type=float, help="The quota of --slow-node, in CPUs.")
def up(directory: str, nodes: int | None, gpus_per_node: int, gpu_type: str, nodes_per_leaf: int, accounting: bool,
       hooks: bool, healthcheck_interval: int, fake_nvml: str | None, port_base: int, slurm: str | None,
       topology: str, submit_policy: bool, cgroups: bool, spare: int, power: int, suspend_time: int,
       configless: bool, preset: str | None, slow_nodes: tuple[str, ...], slow_cpus: float, monitoring: bool,
       monitoring_port: int) -> None:
    """Start the lab and wait until every node is idle."""
    from slurmkit.lab.inventory import parse_gpu_type_counts

    try:
        counts = [n for _t, n in parse_gpu_type_counts(gpu_type)]
    except ValueError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], param_hint="--gpu-type") from None
    if nodes is None:
        nodes = sum(n for n in counts if n) if all(counts) else 8
    spec = LabSpec(dir=directory, nodes=nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type,
                   nodes_per_leaf=nodes_per_leaf, accounting=accounting, port_base=port_base, hooks=hooks,
                   healthcheck_interval=healthcheck_interval, fake_nvml_template=fake_nvml, slurm=slurm,
                   topology=topology, submit_policy=submit_policy, cgroups=cgroups, spare=spare, power=power,
                   suspend_time=suspend_time, configless=configless, preset=preset, monitoring=monitoring,
                   monitoring_port=monitoring_port)
    lab_ = Lab(spec)
    for n in slow_nodes:  # refused before anything starts
        if n not in spec.node_names:
            raise click.BadParameter(f"{n!r} is not a lab node ({spec.node_names[0]}..{spec.node_names[-1]})",
                                     param_hint="--slow-node")
    took = lab_.up(progress=lambda m: click.echo(f"lab: {m}", err=True))
    if slow_nodes:
        from slurmkit.lab import slow as slowmod

        try:
            for n in slow_nodes:
                slowmod.slow(lab_, n, slow_cpus)
                click.echo(f"lab: {n} capped at {slow_cpus:g} CPU", err=True)
        except BaseException:
            lab_.down()
            slowmod.restore(lab_)
            raise
    click.echo(f"lab: up in {took:.2f}s: Slurm {lab_.release}, {nodes} nodes x {spec.gpus_per_node} {spec.gpu_type}, "
               f"{'blocks' if spec.topology == 'block' else 'leaves'} of {nodes_per_leaf}, in {lab_.dir}"
               + (f"; room for {spare} more ({spec.all_node_names[nodes]}..{spec.all_node_names[-1]})" if spare else ""))
    click.echo("Use it:")
    click.echo(f"  eval \"$(slurmkit lab env --dir {lab_.dir})\"     # SLURM_CONF (and PATH for another release)")
    click.echo("  sinfo; srun -N4 hostname; gpusub train.py --nodes 4 --dry-run")
    if monitoring:
        from slurmkit.lab.monitoring import url

        click.echo(f"  curl -s '{url(lab_)}/api/v1/alerts'     # Prometheus (SLURMKIT_PROMETHEUS_URL in lab env)")
    click.echo(f"  slurmkit lab down --dir {lab_.dir}")


@lab.command()
@_dir
@click.option("--json", "as_json", is_flag=True, help="The same as one JSON document.")
def status(directory: str, as_json: bool) -> None:
    """Daemons and node states of the lab."""
    st = Lab.load(directory).status()
    if as_json:
        click.echo(json.dumps(st, indent=1))
        return
    if not st["up"]:
        click.echo(f"lab: not running in {directory}")
        return
    daemons = st["daemons"]
    assert isinstance(daemons, dict)
    problems = st["problems"]
    assert isinstance(problems, list)
    state = "DEGRADED" if problems else "up"
    click.echo(f"lab: {state} in {st['dir']}  (Slurm {st['slurm']}, SLURM_CONF={st['slurm_conf']})")
    for p in problems:
        click.echo(f"problem: {p}")
    click.echo("daemons: " + ", ".join(f"{k}[{v}]" for k, v in daemons.items()))
    click.echo(f"{'NODE':<10} {'STATE':<22} {'GRES':<22} REASON")
    nodes = st["nodes"]
    assert isinstance(nodes, list)
    for n in nodes:
        click.echo(f"{n['name']:<10} {n['state']:<22} {n['gres']:<22} {n['reason']}")
    if problems:
        sys.exit(1)


@lab.command()
@_dir
def env(directory: str) -> None:
    """Print the exports a shell using the lab needs (use with eval): SLURM_CONF, SLURMKIT_LAB_DIR, with --hooks
    SLURMKIT_FAKE_NVML, with --monitoring SLURMKIT_PROMETHEUS_URL, for another release PATH; PATH also loses any other lab's Slurm wrappers (a lab env run
    before in the same shell). gpusub and `slurmkit report` find the inventory beside SLURM_CONF."""
    import shlex

    lab_ = Lab.load(directory)
    if not lab_.conf.exists():
        raise click.ClickException(f"no lab config in {lab_.dir}; run `slurmkit lab up` first")
    for k, v in lab_.user_env.items():
        click.echo(f"export {k}={shlex.quote(v)}")
    # the wrappers that run a foreign release's sinfo, sbatch, ... first on PATH, and no other lab's (a lab env
    # run before in this shell): the PATH this command sees is the shell's, so it is printed whole
    path = lab_.env.get("PATH")
    if path is not None:
        click.echo(f"export PATH={shlex.quote(path)}")


@lab.command()
@_dir
def down(directory: str) -> None:
    """Cancel jobs and stop exactly what `up` started (and processes jobs left behind)."""
    from slurmkit.lab.procs import pids_with_arg

    lab_ = Lab.load(directory)
    if not lab_.is_up() and not pids_with_arg(str(lab_.conf)):  # no pid file, and no daemon of its slurm.conf
        click.echo(f"lab: nothing running in {lab_.dir}")
        return
    from slurmkit.lab import slow as slowmod

    try:
        stopped = lab_.down()
    finally:
        slowmod.restore(lab_)
    click.echo(f"lab: stopped {len(stopped)} daemons in {lab_.dir}")


@lab.command()
@_dir
@click.argument("node", required=False)
@click.option("--cpus", default=0.1, show_default=True, type=float, help="The quota, in CPUs.")
@click.option("--off", is_flag=True, help="Lift the cap (of NODE, or of every node).")
def slow(directory: str, node: str | None, cpus: float, off: bool) -> None:
    """Make NODE really slower: cap its slurmd and everything it runs at --cpus CPUs (cgroup v1 cpu quota).
    Without NODE: list the capped nodes."""
    from slurmkit.lab import slow as slowmod

    lab_ = Lab.load(directory)
    if off:
        done = slowmod.restore(lab_, node)
        click.echo(f"lab: cap lifted on {', '.join(done) or 'nothing (no node was capped)'}")
        return
    if node is None:
        capped = slowmod.slowed(lab_)
        for n, c in capped.items():
            click.echo(f"{n} {c:g}")
        if not capped:
            click.echo("lab: no node is capped", err=True)
        return
    if node not in lab_.spec.node_names:
        raise click.BadParameter(f"{node!r} is not a node of the lab in {lab_.dir}", param_hint="NODE")
    group = slowmod.slow(lab_, node, cpus)
    click.echo(f"lab: {node} capped at {cpus:g} CPU ({group})")


@lab.group()
def image() -> None:
    """Cached root filesystems with another Slurm release (under /var/cache/slurmkit/roots, env SLURMKIT_IMAGE_DIR)."""


@image.command("build")
@click.argument("release", type=click.Choice(sorted(DEBIAN_SUITES)))
@click.option("--mirror", default=None, help="Debian mirror (default: the one apt already uses).")
def image_build(release: str, mirror: str | None) -> None:
    """Build (or rebuild) the root for RELEASE: debootstrap the Debian suite that packages it, install Slurm."""
    from slurmkit.lab import image as img

    built = img.build(release, progress=lambda m: click.echo(f"image: {m}", err=True), mirror=mirror)
    click.echo(f"image: Slurm {built.slurm_version} ({built.suite}) in {built.path}, built in {built.build_seconds:.0f}s")


@image.command("list")
@click.option("--json", "as_json", is_flag=True, help="The same as one JSON document.")
def image_list(as_json: bool) -> None:
    """The cached roots."""
    from dataclasses import asdict

    from slurmkit.lab import image as img

    images = img.list_images()
    if as_json:
        click.echo(json.dumps([asdict(i) for i in images], indent=1))
        return
    if not images:
        click.echo(f"image: none in {img.image_dir()}; build one with `slurmkit lab image build 24.11`")
        return
    click.echo(f"{'RELEASE':<8} {'SLURM':<10} {'SUITE':<10} {'BUILT':<21} PATH")
    for i in images:
        click.echo(f"{i.release:<8} {i.slurm_version:<10} {i.suite:<10} {i.built:<21} {i.path}")


@image.command("rm")
@click.argument("release", type=click.Choice(sorted(DEBIAN_SUITES)))
def image_rm(release: str) -> None:
    """Delete the cached root for RELEASE."""
    from slurmkit.lab import image as img

    if img.remove(release):
        click.echo(f"image: removed the Slurm {release} root")
    else:
        click.echo(f"image: no Slurm {release} root in {img.image_dir()}")
