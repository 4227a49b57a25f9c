"""`slurmkit monitor generate` and `slurmkit exporter`: Prometheus and Grafana for the cluster."""

from __future__ import annotations

import os

import click


@click.group()
def monitor() -> None:
    """Prometheus scrape config, alert rules and Grafana dashboards from the inventory."""


@monitor.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False),
              help="Directory for prometheus.yml, slurmkit-alerts.yml, alertmanager.yml, the dashboards' JSON and logs/ "
                   "(shippers, logrotate).")
def generate(inventory: str, out: str) -> None:
    """Write prometheus.yml (node_exporter per node, dcgm-exporter where the inventory says, the slurmkit
    exporter, the Alertmanager), the alert rules, alertmanager.yml (routes by severity, inhibition of per-node
    noise) and the Grafana dashboards into OUT (replaced files are backed up)."""
    from slurmkit.generate.rollout import write_files
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor import logs
    from slurmkit.monitor.generate import generate as gen

    cluster = load_cluster(inventory)
    files = gen(cluster)
    log_files = logs.files(cluster)
    write_files(files, out)
    write_files(log_files, os.path.join(out, "logs"))
    for name in sorted(files):
        click.echo(f"wrote {out.rstrip('/')}/{name}")
    for name in sorted(log_files):
        click.echo(f"wrote {out.rstrip('/')}/logs/{name}")
    if not any(n.startswith("dashboard-") for n in files):
        click.echo("no Grafana dashboards: they are built with grafana-foundation-sdk, which is not installed "
                   "(pip install 'slurmkit[monitor]', Python 3.11+)", err=True)


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--web.listen-address", "--listen", "listen", default=None,
              help="host:port to serve /metrics on (default: the inventory's monitoring.exporter entry that is an "
                   "address of this host, else 127.0.0.1:9799; never every interface unless you say 0.0.0.0).")
@click.option("--web.config.file", "web_config", type=click.Path(dir_okay=False), default=None,
              help="Prometheus exporter-toolkit web config: tls_server_config, basic_auth_users (bcrypt), "
                   "http_server_config.headers.")
@click.option("--web.request-timeout", "request_timeout", default=10.0, show_default=True,
              help="Seconds from connect to a whole request (TLS handshake included), and again to take the answer.")
@click.option("--web.max-connections", "max_connections", default=256, show_default=True,
              help="Open connections at most (also bounded by the fd limit); one more closes the oldest idle one.")
@click.option("--cache", "cache_s", default=15.0, show_default=True,
              help="Seconds a scrape's answer is reused (one batch of Slurm queries per period).")
@click.option("--timeout", default=10.0, show_default=True, help="Seconds each Slurm query may take.")
@click.option("--scrape-wait", "wait_s", default=5.0, show_default=True,
              help="Seconds a scrape waits for Slurm's answer; then it gets the last answer, with "
                   "slurmkit_exporter_up 0 and its age (below Prometheus' scrape_timeout, 10 s by default).")
@click.option("--once", is_flag=True, help="Print one scrape and exit (waits for Slurm's whole answer).")
def exporter(inventory: str, listen: str | None, web_config: str | None, request_timeout: float,
             max_connections: int, cache_s: float, timeout: float, wait_s: float, once: bool) -> None:
    """Serve the cluster's view for Prometheus: GPUs by state per partition/group/type, jobs and GPUs per
    account/QOS/user (user= only where PrivateData and monitoring.per_user_labels allow), pending GPU jobs by reason,
    free nodes per leaf, GPU-hours per account (with accounting)."""
    from slurmkit.backend.cli import default_backend
    from slurmkit.errors import UsageError
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.exporter import Scraper, serve
    from slurmkit.monitor.web import Limits, default_listen, load_web_config, parse_listen

    cluster = load_cluster(inventory)
    web = load_web_config(web_config) if web_config else None
    if request_timeout <= 0 or max_connections < 1:
        raise UsageError("--web.request-timeout and --web.max-connections must be positive")
    if listen is not None:
        host, port = parse_listen(listen)
        why = "--web.listen-address"
    else:
        host, port, why = default_listen(cluster.monitoring.exporter)
    backend = default_backend(timeout=timeout)
    sacct = None
    if cluster.accounting is not None:
        from slurmkit.backend.run import run

        def sacct() -> str:
            return run(["sacct", "-a", "-X", "-n", "-P", "--truncate", "-S", "now-1days", "-E", "now",
                        "-o", "Account,ElapsedRaw,AllocTRES"], timeout=timeout).stdout

    if wait_s <= 0:
        raise UsageError("--scrape-wait must be positive")
    scraper = Scraper(cluster, backend, cache_s, sacct, wait_s=None if once else wait_s)
    if cluster.monitoring.per_user_labels and not once and (web is None or not web.authenticated):
        click.echo(f"slurmkit exporter: warning: monitoring.per_user_labels: true serves user names to anyone who "
                   f"reaches {host}:{port}, PrivateData or not; give --web.config.file basic_auth_users or "
                   "RequireAndVerifyClientCert", err=True)
    if once:
        click.echo(scraper.text(), nl=False)
        return
    try:
        srv = serve(scraper, host, port, web, Limits(request_timeout_s=request_timeout,
                                                     max_connections=max_connections))
    except OSError as exc:
        raise UsageError(f"--web.listen-address {host}:{port}: {exc.strerror or exc}") from None
    scheme = "https" if web is not None and web.tls is not None else "http"
    auth = " (basic auth)" if web is not None and web.users else ""
    click.echo(f"slurmkit exporter on {scheme}://{host}:{port}/metrics{auth} ({why}; at most "
               f"{srv.max_connections} connections)", err=True)
    srv.serve_forever()


@click.command()
@click.argument("nodes", required=False)
@click.option("--inventory", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The inventory: each node's BMC is its group's power: section (provider redfish or ipmi).")
@click.option("--textfile", "textfile_dir", type=click.Path(file_okay=False),
              help="Also write the series to DIR/slurmkit_bmc.prom (node_exporter's textfile collector).")
@click.option("--inlet-max", "inlet_max_c", type=float, default=None,
              help="Inlet temperature limit in C (default: the BMC's own critical threshold).")
@click.option("--state-dir", type=click.Path(file_okay=False),
              help="Also write each node's verdict to DIR/<node>/bmc.json for its health check (the `bmc` check): "
                   "the hooks' state dir, shared with the nodes.")
@click.option("--json", "as_json", is_flag=True, help="Print the readings and findings as JSON.")
def bmc(nodes: str | None, inventory: str, textfile_dir: str | None, inlet_max_c: float | None,
        state_dir: str | None, as_json: bool) -> None:
    """Read the BMC sensors of NODES (a hostlist; default every node whose group has a redfish or ipmi power
    section), print the findings (fan_failed FAIL, psu_redundancy_lost WARN, inlet_over_limit WARN). Exit 1 when a
    finding is FAIL or a BMC does not answer."""
    import json
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import asdict
    from pathlib import Path

    from slurmkit.errors import UsageError
    from slurmkit.hostlist import expand
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor import bmc as bmcmod
    from slurmkit.monitor.metrics import Exposition

    cluster = load_cluster(inventory)
    power_of = {h: g.power for g in cluster.node_groups for h in g.hostnames
                if g.power is not None and g.power.provider in ("redfish", "ipmi")}
    want = expand(nodes) if nodes else sorted(power_of)
    missing = [n for n in want if n not in power_of]
    if missing:
        raise UsageError(f"{missing[0]}: no redfish or ipmi power section for its group in {inventory}")
    if not want:
        raise UsageError(f"{inventory}: no node group has a redfish or ipmi power section")
    with ThreadPoolExecutor(max_workers=min(32, len(want))) as pool:
        reports = list(pool.map(lambda n: bmcmod.read(n, power_of[n]), want))
    bad = False
    out = []
    ex = Exposition()
    for rep in reports:
        found = rep.findings(inlet_max_c)
        bad = bad or bool(rep.error) or any(f.state == "fail" for f in found)
        bmcmod.add_metrics(ex, rep, inlet_max_c)
        if state_dir:
            try:
                bmcmod.write_verdict(state_dir, rep, inlet_max_c)
            except OSError as exc:
                raise UsageError(f"--state-dir {state_dir}: {rep.node}: {exc.strerror or exc}") from None
        out.append({"node": rep.node, "source": rep.source, "error": rep.error,
                    "readings": [asdict(r) for r in rep.readings], "findings": [asdict(f) for f in found]})
        if as_json:
            continue
        if rep.error:
            click.echo(f"{rep.node} {rep.source}: BMC ERROR: {rep.error}")
        elif not found:
            click.echo(f"{rep.node} {rep.source}: ok ({len(rep.readings)} sensors)")
        for f in found:
            click.echo(f"{rep.node} {rep.source}: {f.check} {f.state.upper()}: {f.summary}")
    if as_json:
        click.echo(json.dumps(out, indent=1))
    if textfile_dir:
        from slurmkit.health.state import atomic_write

        Path(textfile_dir).mkdir(parents=True, exist_ok=True)
        atomic_write(str(Path(textfile_dir) / "slurmkit_bmc.prom"), ex.text(), durable=False)
    sys.exit(1 if bad else 0)
