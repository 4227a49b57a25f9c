"""Lab roots for other Slurm releases: mirror discovery, offline refusal naming the package, view safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.errors import LabError
from slurmkit.lab import image, view
from slurmkit.release import DEBIAN_SUITES, release_key, release_of, scontrol_json

ROOT = Path(__file__).resolve().parents[2]


def test_apt_mirror_from_deb822_and_one_line_sources(tmp_path: Path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert image.apt_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert image.apt_mirror(tmp_path) == "http://old.example/debian"
    (tmp_path / "sources.list").write_text("# nothing\n")
    assert image.apt_mirror(tmp_path) == "http://deb.debian.org/debian"


@pytest.mark.parametrize(
    "output,named",
    [
        ("Get:1 http://x/debian trixie/main amd64 munge\nE: Failed to fetch http://x/debian/pool/main/s/slurm-wlm/"
         "slurmctld_24.11.5-4_amd64.deb  Could not resolve 'x'\n", "slurmctld"),
        ("E: Unable to locate package slurmdbd\n", "slurmdbd"),
        ("I: Retrieving InRelease\nE: Failed getting release file http://127.0.0.1:9/debian/dists/trixie/Release\n",
         "http://127.0.0.1:9/debian/dists/trixie/Release"),
        ("W: Couldn't download package libc6 (ver 2.41-12 arch amd64)\n", "libc6"),
    ],
)
def test_build_step_failure_names_what_could_not_be_downloaded(output: str, named: str, tmp_path: Path):
    # a real process printing what apt-get/debootstrap print when offline, then failing like them
    (tmp_path / "out").write_text(output)
    argv = ["sh", "-c", f"cat {tmp_path / 'out'}; exit 100"]
    seen: list[str] = []
    with pytest.raises(LabError) as ei:
        image._stream(argv, seen.append, image._apt_line, what="apt-get install", timeout=30)
    msg = str(ei.value)
    assert msg == f"apt-get install failed: could not download {named} (offline, or the mirror lacks it)"
    assert "\n" not in msg


def test_build_step_failure_without_a_package_quotes_the_error_line():
    with pytest.raises(LabError, match=r"failed \(rc=3\): E: disk full$"):
        image._stream(["sh", "-c", "echo progress; echo 'E: disk full'; exit 3"], lambda m: None, image._apt_line,
                      what="apt-get install", timeout=30)


def test_unknown_release_is_refused_in_one_line():
    with pytest.raises(LabError, match=r"^no root recipe for Slurm 23.02; known: 22.05, 24.11, 26.05$"):
        image.build("23.02")


def test_cached_image_needs_its_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLURMKIT_IMAGE_DIR", str(tmp_path))
    (tmp_path / "24.11" / "usr").mkdir(parents=True)  # an interrupted build: no image.json
    assert image.find("24.11") is None and image.list_images() == []
    (tmp_path / "24.11" / "image.json").write_text(
        '{"release": "24.11", "suite": "trixie", "slurm_version": "24.11.5", "built": "t", "build_seconds": 1.0, '
        f'"path": "{tmp_path / "24.11"}"}}'
    )
    assert [i.slurm_version for i in image.list_images()] == ["24.11.5"]
    assert image.remove("24.11") and not (tmp_path / "24.11").exists() and not image.remove("24.11")


def test_release_facts():
    assert release_of("slurm-wlm 24.11.5") == "24.11" and release_key("22.05.8") == (22, 5)
    assert not scontrol_json("22.05") and scontrol_json("24.11")
    assert DEBIAN_SUITES == {"22.05": "bookworm", "24.11": "trixie", "26.05": "unstable"}
    with pytest.raises(ValueError):
        release_of("garbage")


def test_view_lives_outside_the_lab_dir(tmp_path: Path):
    """Removing a lab dir must never walk into the host through the view's bind mounts."""
    v = view.view_path(tmp_path / "lab")
    assert not str(v).startswith(str(tmp_path)) and v.parent == view.VIEWS
    assert view.view_path(tmp_path / "lab") == v != view.view_path(tmp_path / "other")


def test_wrappers_run_the_roots_program_and_keep_bash_functions(tmp_path: Path):
    root = tmp_path / "root"
    (root / "usr/lib64").mkdir(parents=True)
    (root / "usr/lib64/ld-linux-x86-64.so.2").touch()
    (root / "usr/lib/x86_64-linux-gnu/slurm-wlm").mkdir(parents=True)
    view.write_wrappers(tmp_path / "view", tmp_path / "bin", root)
    body = (tmp_path / "bin" / "srun").read_text()
    assert body.startswith("#!/bin/bash\n")  # dash would drop BASH_FUNC_x%% variables on the way to srun
    lib = root / "usr/lib/x86_64-linux-gnu"
    assert f"{root}/usr/lib64/ld-linux-x86-64.so.2 --argv0 srun --library-path {lib}/slurm-wlm:{lib}:{root}/usr/lib" in body
    assert f"{root}/usr/bin/srun" in body and "chroot" not in body  # any user may run a client
    daemon = (tmp_path / "bin" / "slurmd").read_text()
    assert f"chroot {tmp_path / 'view'} /bin/bash" in daemon and "exec /usr/sbin/slurmd" in daemon
    assert view.plugin_dir(root) == str(lib / "slurm-wlm")


def test_lab_from_the_gb200_preset_keeps_its_shape_at_lab_scale() -> None:
    """`lab up --preset examples/gb200-nvl72.yaml`: the preset's group, partition and blocks, cut to the lab."""
    from slurmkit.generate import generate
    from slurmkit.lab.inventory import lab_from_preset, preset_shape
    from slurmkit.model import load_cluster_text
    from slurmkit.model.yamlio import load

    preset = load((ROOT / "examples" / "gb200-nvl72.yaml").read_text())
    assert preset_shape(preset) == ("gb200", 4, "gb200", "block")
    inv = lab_from_preset(preset, 8, 4, slurm_version="24.11")
    g = inv["node_groups"][0]
    assert g["hosts"] == "node[1-8]" and g["cpu"] == preset["node_groups"][0]["cpu"] and "nics" not in g
    assert inv["cluster"] == "nvl72" and [p["name"] for p in inv["partitions"]] == ["batch"]
    assert inv["topology"] == {"blocks": [{"name": "nvl01", "nodes": "node[1-4]"}, {"name": "nvl02", "nodes": "node[5-8]"}],
                               "block_sizes": [4, 8]}
    assert "hooks" not in inv
    import yaml

    topo = generate(load_cluster_text(yaml.safe_dump(inv), source="lab"))["topology.conf"]
    assert "BlockName=nvl01 Nodes=node[1-4]" in topo and "BlockSizes=4,8" in topo


def test_lab_from_a_preset_with_two_gpu_groups_is_refused() -> None:
    from slurmkit.lab.inventory import preset_shape
    from slurmkit.model.yamlio import load

    preset = load((ROOT / "examples" / "mixed-pcie.yaml").read_text())
    n = sum(1 for g in preset["node_groups"] if (g.get("gpus") or {}).get("count"))
    if n == 1:
        preset["node_groups"].append(dict(preset["node_groups"][0], name="second"))
    with pytest.raises(ValueError, match=r"node_groups: a lab from a preset takes exactly one GPU node group"):
        preset_shape(preset)


@pytest.mark.parametrize(("printed", "root"), [
    # Debian 12: measured good with slurmdbd 22.05.8 and 24.11.5 -> the host's
    ("/usr/sbin/mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)", None),
    # Debian 13: slurmdbd 24.11.5 dies in _check_mysql_concat_is_sane -> MariaDB 10.11 from the bookworm root
    ("/usr/sbin/mariadbd  Ver 11.8.3-MariaDB-0+deb13u1 from Debian -- Please help get to 10k stars at "
     "https://github.com/MariaDB/Server for debian-linux-gnu on x86_64 (Debian 13)", "22.05"),
    ("mariadbd  Ver 11.4.5-MariaDB for Linux on x86_64 (MariaDB Server)", "22.05"),  # not known good
    (None, "22.05"),  # no MariaDB on the host
])
def test_accounting_mariadb_comes_from_the_host_only_where_it_serves_slurmdbd(printed: str | None, root: str | None) -> None:
    from slurmkit.lab.accounting import mariadb_root

    assert mariadb_root(printed) == root
    if root:
        assert DEBIAN_SUITES[root] == "bookworm" and "mariadb-server" in image.packages(root)


def test_a_lab_with_mariadb_from_a_root_runs_it_chrooted_on_a_private_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmkit.lab import Lab, LabSpec

    root = tmp_path / "roots" / "22.05"
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/mariadbd").write_text("")
    img = image.Image("22.05", "bookworm", "22.05.8", "2026-11-30T00:00:00Z", 1.0, str(root))
    monkeypatch.setattr(image, "ensure", lambda rel, progress=None: img)
    lab = Lab(LabSpec(dir=str(tmp_path / "lab"), accounting=True))
    lab._mariadb_root = "22.05"
    argv = lab._mariadb_argv(["mariadbd", f"--datadir={lab.dir}/mysql", f"--socket={lab.run_dir}/mysqld.sock"])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "sh"]
    assert f"mount --bind {lab.dir} {root}/mnt" in argv[-1] and f"slurmkit-tmp {root}/tmp" in argv[-1]
    assert argv[-1].endswith(f"exec chroot {root} /usr/sbin/mariadbd --datadir=/mnt/mysql --socket=/mnt/run/mysqld.sock "
                                   "--skip-name-resolve")
    lab._mariadb_root = None
    assert lab._mariadb_argv(["mariadbd", "--x"])[1:] == ["--x"]
