"""What the inventory says reads true (issue 33 item 7): the controller's FQDN and a SlurmctldPort range are carried
in ``controller.hosts`` and ``controller.port``, where an admin reads them, not as ``[localhost]`` and 6817 beside
the real values in ``slurm_conf``. On AWS ParallelCluster's head node (tests/data/realconf/aws-parallelcluster-gpu:
SlurmctldPort=6820-6829 in slurm.conf.erb) and its SlurmctldHost as an Amazon Linux head node writes it (the
generator takes socket.gethostname(), which is the FQDN there, e.g. ip-10-0-0-1.ec2.internal)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmkit.adopt.importer import import_site
from slurmkit.adopt.read import read_site
from slurmkit.errors import InventoryError
from slurmkit.generate import confparse as cp
from slurmkit.generate.rollout import semantic_diff
from slurmkit.generate.slurmconf import generate
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster_text

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "realconf"


def test_a_port_range_is_controller_port_and_generated_back() -> None:
    files, _n, _d = read_site(CORPUS / "aws-parallelcluster-gpu")
    res = import_site(files, "24.11")
    assert res.lost == []
    ctl = res.inventory["controller"]
    assert ctl == {"hosts": ["ip-1-0-0-0"], "port": "6820-6829", "state_dir": "/var/spool/slurm.state"}
    assert "SlurmctldPort" not in res.inventory["slurm_conf"]
    cluster = load_cluster_text(yamlio.dump(res.inventory))
    assert (cluster.controller.port, cluster.controller.port_count) == (6820, 10)
    gen = generate(cluster, version="24.11")
    assert cp.parse_slurm_conf(gen["slurm.conf"], "slurm.conf", gen).value("SlurmctldPort") == "6820-6829"
    assert semantic_diff(files, gen, "24.11") == []


@pytest.mark.parametrize("port", ["6829-6820", "6820-6820", "6820-70000", "68x0"])
def test_a_port_range_slurm_refuses_is_refused(port: str) -> None:
    # read_config.c (22.05-26.05): the range's end must exceed its start, else "Invalid SlurmctldPort"
    text = (f"cluster: c\ncontroller: {{hosts: [h], port: '{port}'}}\nnode_groups:\n  - {{name: g, hosts: 'n[1-2]', "
            "cpu: {sockets: 1, cores_per_socket: 2, threads_per_core: 1}, memory_mb: 1000}\npartitions:\n"
            "  - {name: p, nodes: 'n[1-2]'}\n")
    with pytest.raises(InventoryError, match="controller.port"):
        load_cluster_text(text)


def test_an_fqdn_controller_is_controller_hosts(tmp_path: Path) -> None:
    site = tmp_path / "etc"
    shutil.copytree(CORPUS / "aws-parallelcluster-gpu", site)
    pc = site / "slurm_parallelcluster.conf"
    pc.write_text(pc.read_text().replace("SlurmctldHost=ip-1-0-0-0(ip.1.0.0.0)",
                                         "SlurmctldHost=ip-10-0-0-1.ec2.internal(10.0.0.1)"))
    files, _n, _d = read_site(site)
    res = import_site(files, "24.11")
    assert res.lost == []
    assert res.inventory["controller"]["hosts"] == ["ip-10-0-0-1.ec2.internal"]  # was [localhost]
    gen = generate(load_cluster_text(yamlio.dump(res.inventory)), version="24.11")
    assert semantic_diff(files, gen, "24.11") == []
    # the old spelling, ControlMachine (dask-jobqueue-ci), with an FQDN; an address stays a SlurmctldHost line
    conf = (CORPUS / "dask-jobqueue-ci" / "slurm.conf").read_text()
    res = import_site({"slurm.conf": conf.replace("ControlMachine=slurmctld", "ControlMachine=slurmctld.example.org")},
                      "22.05")
    assert res.inventory["controller"]["hosts"] == ["slurmctld.example.org"]
    res = import_site({"slurm.conf": conf.replace("ControlMachine=slurmctld", "ControlMachine=10.0.0.1")}, "22.05")
    assert res.inventory["slurm_conf"]["SlurmctldHost"].startswith("10.0.0.1")
