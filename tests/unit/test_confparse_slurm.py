"""slurm.conf, gres.conf and cgroup.conf read as Slurm reads them (issue 19, step 1).

Each case cites the source that decides it: src/common/parse_config.c (keyvalue_pattern, _get_next_line,
_parse_include_directive, s_p_parse_file) and src/common/read_config.c (_parse_nodename,
_validate_and_set_defaults), identical in these respects at slurm-22-05-8-1 and slurm-24-11-5-1; gres.conf's
options from src/common/gres.c (22.05) / src/interfaces/gres.c (24.11).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.backend.realparse import rewrite_for_copy
from slurmkit.generate import confparse as cp
from slurmkit.generate.validate import memory_consumable, static_check


def rec(text: str) -> cp.Record:
    recs = cp.parse_records(text)
    assert len(recs) == 1, recs
    return recs[0]


# -- the key=value pattern (parse_config.c keyvalue_pattern; checked against glibc regexec on this host) --------

@pytest.mark.parametrize("line, pairs, leftover", [
    ("SelectType = select/cons_tres", [("SelectType", "select/cons_tres")], ""),
    ("SelectType= select/cons_tres", [("SelectType", "select/cons_tres")], ""),
    ('InteractiveStepOptions="--interactive --pty bash"', [("InteractiveStepOptions", "--interactive --pty bash")], ""),
    ('A="a b"c d', [("A", '"a')], 'b"c d'),  # the quoted alternative needs whitespace after the quote
    ("A=b=c", [("A", "b=c")], ""),
    ("A= B=c", [("A", "B=c")], ""),  # whitespace after '=' is skipped: the value is the next word
    ("A=", [], "A="),  # an empty unquoted value does not match
    ('A="" B=1', [("A", ""), ("B", "1")], ""),
    ("NodeName=n1 Feature=\"a,b c\" Weight=5", [("NodeName", "n1"), ("Feature", "a,b c"), ("Weight", "5")], ""),
])
def test_key_value_pattern(line: str, pairs: list[tuple[str, str]], leftover: str) -> None:
    got, _quoted, _ops, rest = cp.split_line(line)
    assert got == pairs
    assert rest.strip() == leftover


def test_comments_escapes_and_continuation() -> None:
    # _strip_comments: '#' after an even number of backslashes starts a comment; _strip_escapes then drops one
    # backslash of each pair; _strip_continuation: an odd backslash run at the end (trailing blanks allowed) joins
    text = "A=x#comment\nB=a\\#b\nNodeName=n1 \\\n   CPUs=4 \\  \n  RealMemory=100\nC=\\\\\n"
    recs = cp.parse_records(text)
    assert [(r.lineno, r.pairs) for r in recs] == [
        (1, (("A", "x"),)),
        (2, (("B", "a#b"),)),
        (3, (("NodeName", "n1"), ("CPUs", "4"), ("RealMemory", "100"))),
        (6, (("C", "\\"),)),  # an even run is no continuation; "\\\\" reads as one backslash
    ]


def test_render_round_trips_what_slurm_reads() -> None:
    for line in ['InteractiveStepOptions="--interactive --pty $SHELL"', "B=a\\#b", "RebootProgram=\"/sbin/reboot -f\"",
                 "NodeName=n[1-2] Feature=\"CPU_GEN:SKX,x y\" CPUs=4"]:
        r = rec(line)
        assert rec(r.render()).pairs == r.pairs, line


# -- Include (parse_config.c _parse_include_directive; read_config.c get_extra_conf_path) ------------------------

def test_include_any_case_relative_absolute_nested() -> None:
    files = {
        "nodes.conf": "NodeName=n[1-2] CPUs=4\ninclude parts.conf\n",
        "parts.conf": "PartitionName=p Nodes=n[1-2]\n",
        "/etc/slurm/extra.conf": "MinJobAge=30\n",
    }
    conf = cp.parse_slurm_conf("SlurmctldHost=h\nINCLUDE nodes.conf\nInclude /etc/slurm/extra.conf\n", files=files)
    assert conf.problems == []
    assert [n.head for n in conf.nodes] == ["n[1-2]"]
    assert conf.nodes[0].where == "nodes.conf:1"
    assert [p.head for p in conf.partitions] == ["p"]
    assert conf.value("MinJobAge") == "30"


def test_include_failures_are_named() -> None:
    conf = cp.parse_slurm_conf("SlurmctldHost=h\nInclude missing.conf\nInclude conf.d/*.conf\n", files={})
    assert conf.problems[0].startswith("slurm.conf:2: Include missing.conf: file not found")
    assert "glob" in conf.problems[1]


def test_include_percent_c_is_the_lower_case_cluster_name() -> None:
    conf = cp.parse_slurm_conf("ClusterName=Alpha\nSlurmctldHost=h\nInclude nodes-%c.conf\n",
                               files={"nodes-alpha.conf": "NodeName=a1 CPUs=2\n"})
    assert conf.problems == [] and conf.nodes[0].head == "a1"


def test_indented_include_is_a_parse_error() -> None:
    # the directive is matched on the line itself (xstrncasecmp("include", line, 7)), not on a stripped line
    conf = cp.parse_slurm_conf("SlurmctldHost=h\n  Include nodes.conf\n", files={"nodes.conf": ""})
    assert conf.problems and "Parse error" in conf.problems[0]


def test_two_simple_keys_on_one_line_are_a_parse_error() -> None:
    # s_p_parse_file reads one key per line (_parse_next_key); only line keys' handlers read the rest
    conf = cp.parse_slurm_conf("SlurmctldHost=h\nMinJobAge=30 KillWait=5\n")
    assert conf.problems == ['slurm.conf:2: Parse error: "KillWait=5" after MinJobAge= (one key per line; fatal)']


# -- read_config.c semantics ------------------------------------------------------------------------------------

def test_defaults_apply_to_the_lines_after_them() -> None:
    conf = cp.parse_slurm_conf(
        "SlurmctldHost=h\nNodeName=a1 CPUs=2\nNodeName=DEFAULT CPUs=8 RealMemory=1000\nNodeName=b1\n"
        "NodeName=DEFAULT RealMemory=2000\nNodeName=c1 CPUs=4\nPartitionName=DEFAULT MaxTime=60\n"
        "PartitionName=p Nodes=ALL\n")
    d = {n.head: n.as_dict() for n in conf.nodes}
    assert d["a1"] == {"cpus": "2"}
    assert d["b1"] == {"cpus": "8", "realmemory": "1000"}
    assert d["c1"] == {"cpus": "4", "realmemory": "2000"}
    assert conf.partitions[0].as_dict() == {"maxtime": "60", "nodes": "ALL"}


def test_control_machine_is_the_controller() -> None:
    conf = cp.parse_slurm_conf("ControlMachine=ctl1\nBackupController=ctl2\n")
    assert conf.controllers == ["ctl1", "ctl2"]
    rep = static_check({"slurm.conf": "ControlMachine=ctl1\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"}, "22.05")
    assert not [e for e in rep.errors if "SlurmctldHost" in e], rep.errors
    rep = static_check({"slurm.conf": "ClusterName=c\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"}, "22.05")
    assert any("No SlurmctldHost defined" in e for e in rep.errors)
    both = cp.parse_slurm_conf("SlurmctldHost=a\nControlMachine=b\n")
    assert both.controllers == ["a"] and "Ignoring ControlMachine since SlurmctldHost is set" in both.notes[0]


@pytest.mark.parametrize("line, cpus, sockets, cores", [
    ("Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=2", 32, 2, 16),
    ("Sockets=2 CoresPerSocket=8 ThreadsPerCore=2", 32, 2, 16),
    ("Procs=32 CoresPerSocket=8 ThreadsPerCore=2", 32, 2, 16),  # Sockets inferred from CPUs
    ("CPUs=16 CoresPerSocket=8 ThreadsPerCore=2", 16, 1, 8),
    ("Sockets=4 SocketsPerBoard=2 CoresPerSocket=4", 8, 2, 8),  # both: SocketsPerBoard wins
    ("CPUs=7 Sockets=2 CoresPerSocket=2", 4, 2, 4),  # CPUs matching nothing is reset
])
def test_node_geometry(line: str, cpus: int, sockets: int, cores: int) -> None:
    g = cp.node_geometry(rec(f"NodeName=n1 {line}").as_dict())
    assert (g.cpus, g.sockets, g.cores) == (cpus, sockets, cores)


@pytest.mark.parametrize("conf, version, consumable", [
    ("SelectType=select/cons_tres", "24.11", True),  # slurm.conf(5) 24.11: cons_tres uses CR_Core_Memory
    ("SelectType=select/cons_tres", "22.05", True),  # cons_common.c select_p_node_init (22.05)
    ("SelectType=select/cons_res", "22.05", True),
    ("", "24.11", True),  # read_config.h 23.11+: DEFAULT_SELECT_TYPE select/cons_tres
    ("", "22.05", False),  # read_config.h 22.05: select/linear, which tracks no memory by default
    ("SelectType=select/cons_tres\nSelectTypeParameters=CR_Core", "24.11", False),
    ("SelectType=select/linear\nSelectTypeParameters=CR_Memory", "22.05", True),
])
def test_memory_is_consumable_by_default_with_cons_tres(conf: str, version: str, consumable: bool) -> None:
    assert memory_consumable(cp.parse_slurm_conf(conf), version) is consumable


def test_constrain_ram_space_without_select_type_parameters_is_fine_with_cons_tres() -> None:
    files = {"slurm.conf": "SlurmctldHost=h\nSelectType=select/cons_tres\nNodeName=n1 CPUs=2\nPartitionName=p Nodes=n1\n",
             "cgroup.conf": "ConstrainRAMSpace=yes\n"}
    for v in ("22.05", "24.11"):
        assert not [e for e in static_check(files, v).errors if "CR_" in e], v


# -- gres.conf --------------------------------------------------------------------------------------------------

def _gres_site(gres: str) -> dict[str, str]:
    return {"slurm.conf": "SlurmctldHost=h\nGresTypes=gpu\nNodeName=g[1-2] CPUs=16 Gres=gpu:4\nPartitionName=p Nodes=ALL\n",
            "gres.conf": gres}


def test_global_autodetect_applies_to_every_line() -> None:
    # gres.conf(5): "AutoDetect ... If set on a line by itself it applies to all lines"; a GPU line without File=
    # is then filled in by detection
    rep = static_check(_gres_site("AutoDetect=nvml\nName=gpu Count=4\n"), "22.05")
    assert rep.errors == []
    rep = static_check(_gres_site("Name=gpu Count=4\n"), "22.05")
    assert any("without File=" in e for e in rep.errors)


def test_gres_lines_without_node_name_and_file_ranges() -> None:
    assert static_check(_gres_site("Name=gpu File=/dev/nvidia[0-3]\n"), "24.11").errors == []
    assert static_check(_gres_site("Name=gpu File=/dev/nvidia0\nName=gpu File=/dev/nvidia1\nName=gpu File=/dev/nvidia[2-3]\n"),
                        "24.11").errors == []
    rep = static_check(_gres_site("NodeName=g1 Name=gpu File=/dev/nvidia[0-3]\nNodeName=g2 Name=gpu File=/dev/nvidia[0-2]\n"),
                       "24.11")
    assert rep.errors == ["gres.conf vs slurm.conf for g2: gpu: slurm.conf says 4, gres.conf gives 3"]


def test_gres_conf_include_is_followed() -> None:
    files = _gres_site("Include gpus.conf\n") | {"gpus.conf": "Name=gpu File=/dev/nvidia[0-3]\n"}
    assert static_check(files, "24.11").errors == []


# -- the real parse's copy --------------------------------------------------------------------------------------

def test_copy_keeps_quotes_and_inlines_includes(tmp_path: Path) -> None:
    text = ('SlurmctldHost=head\nInteractiveStepOptions="--interactive --pty $SHELL"\nInclude nodes.conf\n'
            "MinJobAge = 30\n")
    copy = rewrite_for_copy(text, tmp_path, files={"nodes.conf": "NodeName=n[1-2] CPUs=2\nPartitionName=p Nodes=ALL\n"})
    assert 'InteractiveStepOptions="--interactive --pty $SHELL"' in copy.text
    assert "NodeName=n[1-2] CPUs=2" in copy.text and "Include" not in copy.text
    assert "MinJobAge=30" in copy.text
    assert {"n1", "n2"} <= set(copy.names)


def test_conf_validate_dir_reads_includes(tmp_path: Path) -> None:
    """`conf validate DIR` follows Include lines: relative beside slurm.conf, and an absolute path absent here read
    from beside slurm.conf with a note (a copy of a site's /etc/slurm)."""
    from click.testing import CliRunner

    from slurmkit.cli.main import cli

    (tmp_path / "slurm.conf").write_text("SlurmctldHost=h\nInclude nodes.conf\nInclude /etc/slurm/parts-absent-here.conf\n")
    (tmp_path / "nodes.conf").write_text("NodeName=n[1-2] CPUs=2\n")
    (tmp_path / "parts-absent-here.conf").write_text("PartitionName=p Nodes=n[1-2] Default=YES\n")
    res = CliRunner().invoke(cli, ["conf", "validate", str(tmp_path), "--slurm-version", "24.11", "--no-real-parse"])
    assert res.exit_code == 0, res.output
    assert "read " in res.output and "parts-absent-here.conf (the path is absent here)" in res.output
