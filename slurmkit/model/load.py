"""Inventory YAML -> Cluster. The only place that parses an inventory.

Every error names its key path (``node_groups[2].gpus.count``) and, for an unknown key, the closest known one.
Hand-written rather than pydantic/jsonschema: the product card fixes the dependencies, and the checks that
matter (hosts in two groups, files vs count, cores outside the node) are cross-field anyway.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmkit import hostlist
from slurmkit.errors import InventoryError, UsageError
from slurmkit.model import yamlio
from slurmkit.model.cluster import (
    CPU,
    GPU_AUTODETECT_MODES,
    NIC,
    POWER_PROVIDERS,
    REPEATABLE_SLURM_KEYS,
    SUBMIT_CHOICES,
    SUPPORTED_SLURM_VERSIONS,
    Accounting,
    Block,
    Capacity,
    Cluster,
    Controller,
    GPUs,
    Hooks,
    Logs,
    MigInstance,
    Monitoring,
    NodeGroup,
    Partition,
    Policy,
    Power,
    RailUnit,
    Reserve,
    Ring,
    Rollout,
    Runtime,
    Site,
    SubmitPolicy,
    Switch,
    Topology,
    Torus,
)

# Names written into a config file (partitions, features, switches, blocks, GPU types, groups, NICs): letters,
# digits, '_', '.', '-'. Nothing Slurm's parser reads as syntax (whitespace ends a value, '#' starts a comment,
# '=' a new key, ',' ':' '&' '|' '[' ']' separate list items, GRES fields, feature operators and host ranges).
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
# node features as sites write them (slurm.conf(5) Features, e.g. "CPU_GEN:SKX"): a colon is allowed too
_FEATURE_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")
# Hostnames (nodes, controllers, slurmdbd): dot-separated RFC 1123 labels (1-63 letters, digits, hyphens, not
# starting or ending with a hyphen), which is what slurmd's `hostname -s` and getaddrinfo() can give back.
_IPV4_RE = re.compile(r"\d+(\.\d+){3}")
_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# Node names of an adopted site: Slurm takes any NodeName its hostlist parser can split (src/common/hostlist.c only
# reads ',' '[' ']' as syntax) and Slurm's own testsuite names nodes test_node[0-9]
# (testsuite/expect/test7.17_configs, 22.05-24.11); whether such a name resolves is a fact of the site's hosts
_NODE_LABEL_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
# re.ASCII throughout: a bare \d also matches other scripts' digits ('١٢'), which Python's int() reads but Slurm's
# parsers do not (they go straight into a GRES type or a MaxTime otherwise)
_RANGE_ITEM_RE = re.compile(r"^(\d+)(?:-(\d+))?$", re.ASCII)
# Slurm's hostlist parser refuses a bracket range of more than MAX_RANGE = 64*1024 hosts ("Too many hosts in
# range", src/common/hostlist.c, every release 22.05-25.11; 24.11+ spell it MAX_SLURM_NODES, slurm/slurm.h);
# hostlist.fold/canonical split a longer run at it, so what the loader folds never has such a range either.
MAX_RANGE = hostlist.MAX_RANGE
# slurmkit's own bound on one hostlist (all brackets multiplied out): far above any cluster, and what keeps a
# typo like gpu[1-9999]-[1-9999] from expanding 10^8 names into memory.
MAX_HOSTS = 1 << 20
# A path Slurm or a shell reads unquoted (File=, StateSaveLocation=): absolute, no whitespace, '#', '=' or quotes.
_PATH_RE = re.compile(r"^/[A-Za-z0-9_./+@%:,\[\]-]*$")
# One word of hooks.command: nothing a shell treats specially (the wrapper quotes it too).
_SAFE_WORD_RE = re.compile(r"^[A-Za-z0-9_./=+:@%,-]+$")
REPEATABLE_SLURM_KEYS_LOWER = frozenset(k.lower() for k in REPEATABLE_SLURM_KEYS)
_TIME_RE = re.compile(r"^(UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}(:\d{2})?)?)$", re.ASCII)
# Words slurm.conf reserves (src/common/read_config.c, 22.05-25.11, compared with xstrcasecmp, so any case):
# NodeName=DEFAULT and PartitionName=DEFAULT set defaults for the lines after them (no such node or partition
# exists), and NodeName=ALL is fatal ("'%s' is a reserved word disallowed for use with NodeName").
_RESERVED_NODE_NAMES = frozenset({"default", "all"})
_RESERVED_PARTITION_NAMES = frozenset({"default"})
# slurm.conf(5) ClusterName (22.05-25.11): "must be 40 characters or less" (MySQL/MariaDB table-name limit)
_MAX_CLUSTER_NAME = 40
_MAX_PORT = 65535


class _Ctx:
    def __init__(self, source: str | None):
        self.source = source
        # an adopted site keeps the node names its slurm.conf has, '_' included (see _NODE_LABEL_RE)
        self.adopted = False

    def err(self, path: str, msg: str) -> InventoryError:
        return InventoryError(path, msg, self.source)


def _mapping(ctx: _Ctx, value: Any, path: str, allowed: set[str], required: set[str] = frozenset()) -> dict:  # type: ignore[assignment]
    if not isinstance(value, dict):
        raise ctx.err(path or "(top level)", f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise ctx.err(path, f"key {key!r} is not a string")
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(allowed))}"
            raise ctx.err(_join(path, key), f"unknown key{hint}")
    for key in sorted(required):
        if key not in value or value[key] is None:
            raise ctx.err(_join(path, key), "required key is missing")
    return value


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _int(ctx: _Ctx, value: Any, path: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.err(path, f"expected an integer, got {value!r}")
    if value < minimum:
        raise ctx.err(path, f"must be >= {minimum}, got {value}")
    return value


def _str(ctx: _Ctx, value: Any, path: str, pattern: re.Pattern[str] | None = None) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ctx.err(path, f"expected a non-empty string, got {value!r}")
    if pattern is not None and not pattern.fullmatch(value):
        raise ctx.err(path, f"invalid value {value!r}")
    return value


def _bool(ctx: _Ctx, value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ctx.err(path, f"expected true or false, got {value!r}")
    return value


def _list(ctx: _Ctx, value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise ctx.err(path, f"expected a list, got {type(value).__name__}")
    return value




def ranges_problem(text: str, hostnames: bool = True, pattern: re.Pattern[str] | None = None,
                   node_names: bool = False) -> str | None:
    """Why Slurm's hostlist parser (or a config file) cannot take ``text``, found without expanding it; None if
    fine. Checks bracket syntax (``[1-4,7]``), each range against ``MAX_RANGE``, the total against ``MAX_HOSTS``
    and, for ``hostnames``, that every name the list can produce is an RFC 1123 hostname (with ``node_names``,
    an adopted site's node names, '_' allowed too)."""
    total = 0
    for item in hostlist.split_top(text):
        if not item:
            return "empty entry (stray comma)"
        parts = re.split(r"(\[[^\[\]]*\])", item)
        n = 1
        template = []
        for part in parts:
            if part.startswith("[") and part.endswith("]"):
                width = 0
                size = 0
                for r in part[1:-1].split(","):
                    m = _RANGE_ITEM_RE.fullmatch(r)
                    if not m:
                        return f"{part!r} is not a bracket range like [1-4,7]"
                    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                    if lo > hi:
                        return f"range {r!r} runs backwards"
                    if hi - lo + 1 > MAX_RANGE:
                        return (f"range [{r}] has {hi - lo + 1:,} hosts; Slurm's hostlist parser refuses more than "
                                f"{MAX_RANGE:,} in one range")
                    width = max(width, len(m.group(1)), len(m.group(2) or ""), len(str(hi)))
                    size += hi - lo + 1
                n *= size
                template.append("0" * width)
            elif "[" in part or "]" in part:
                return f"unbalanced bracket in {item!r}"
            else:
                template.append(part)
        total += n
        if total > MAX_HOSTS:
            return f"names {total:,}+ hosts; slurmkit reads at most {MAX_HOSTS:,} in one list"
        if pattern is not None and not pattern.fullmatch("".join(template)):
            return f"{item!r} has characters outside letters, digits, _ . -"
        if hostnames:
            name = "".join(template)
            if item.lower() in _RESERVED_NODE_NAMES:
                return (f"{item!r} is a word slurm.conf reserves (NodeName=DEFAULT sets defaults, NodeName=ALL is "
                        "fatal to slurmctld); rename the host")
            label_re = _NODE_LABEL_RE if node_names else _LABEL_RE
            if not all(label_re.fullmatch(label) for label in name.split(".")):
                return (f"{item!r} is not a hostname (RFC 1123: labels of letters, digits and inner hyphens, "
                        "1-63 characters, joined by dots)")
    return None


def _hosts(ctx: _Ctx, value: Any, path: str, hostnames: bool = True) -> str:
    """A hostlist (``gpu[001-032]`` or a list of them), folded; ``hostnames=False`` for lists of switch names,
    which only need to be known names (checked by the caller)."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            t = _str(ctx, v, _join(path, i))
            problem = ranges_problem(t, hostnames, None if hostnames else _NAME_RE, ctx.adopted)
            if problem:
                raise ctx.err(_join(path, i), f"invalid hostlist {t!r}: {problem}")
        value = hostlist.fold(str(v) for v in value)
    text = _str(ctx, value, path)
    problem = ranges_problem(text, hostnames, None if hostnames else _NAME_RE, ctx.adopted)
    if problem:
        raise ctx.err(path, f"invalid hostlist {text!r}: {problem}")
    try:
        return hostlist.canonical(text, path)
    except UsageError as exc:
        raise ctx.err(path, f"invalid hostlist {text!r}") from exc


def _hostname(ctx: _Ctx, value: Any, path: str) -> str:
    """One host (a controller, slurmdbd): an RFC 1123 hostname or an IPv4 address, no ranges."""
    text = _str(ctx, value, path)
    if not all(_LABEL_RE.fullmatch(label) for label in text.split(".")):
        raise ctx.err(path, f"{text!r} is not a hostname (RFC 1123: labels of letters, digits and inner hyphens)")
    return text


def _path(ctx: _Ctx, value: Any, path: str) -> str:
    text = _str(ctx, value, path)
    if not _PATH_RE.fullmatch(text):
        raise ctx.err(path, f"{text!r} is not an absolute path of letters, digits and _ . / + @ % : , - "
                            "(Slurm reads it unquoted)")
    return text


def _command(ctx: _Ctx, value: Any, path: str) -> str:
    """hooks.command: words without shell metacharacters, returned shell-quoted (root runs it on every node)."""
    text = _str(ctx, value, path)
    words = text.split(" ")
    for w in words:
        if not _SAFE_WORD_RE.fullmatch(w):
            raise ctx.err(path, f"{w!r} has shell metacharacters (or an extra space): words separated by single "
                                "spaces, each of letters, digits and _ . / = + : @ % , - only")
    if not words[0].startswith("/"):
        raise ctx.err(path, f"{words[0]!r} must be an absolute path (slurmd runs hooks with a minimal PATH)")
    return shlex.join(words)


def _port(ctx: _Ctx, value: Any, path: str) -> int:
    port = _int(ctx, value, path, 1)
    if port > _MAX_PORT:
        raise ctx.err(path, f"{port} is not a TCP port (1-{_MAX_PORT})")
    return port


def _port_range(ctx: _Ctx, value: Any, path: str) -> tuple[int, int]:
    """A port, or a range "LOW-HIGH" as SlurmctldPort takes it (read_config.c: HIGH must exceed LOW, else "Invalid
    SlurmctldPort", 22.05-26.05) -> (LOW, count)."""
    m = re.fullmatch(r"(\d+)-(\d+)", value) if isinstance(value, str) else None
    if m is None:
        return _port(ctx, value, path), 1
    low, high = _port(ctx, int(m.group(1)), path), _port(ctx, int(m.group(2)), path)
    if high <= low:
        raise ctx.err(path, f"{value!r}: the range's end must exceed its start (Slurm: Invalid SlurmctldPort)")
    return low, high - low + 1


def _cluster_name(ctx: _Ctx, value: Any) -> str:
    name = _str(ctx, value, "cluster", re.compile(r"^[a-z0-9_-]+$"))
    if len(name) > _MAX_CLUSTER_NAME:
        raise ctx.err("cluster", f"{len(name)} characters; slurm.conf(5) ClusterName must be {_MAX_CLUSTER_NAME} or "
                                 "less (MySQL/MariaDB table names)")
    return name


def _choice(ctx: _Ctx, value: Any, path: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ctx.err(path, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _version(ctx: _Ctx, value: Any, path: str) -> str:
    text = _str(ctx, value, path)
    m = re.match(r"^(\d{2})\.(\d{2})", text)
    if not m or f"{m.group(1)}.{m.group(2)}" not in SUPPORTED_SLURM_VERSIONS:
        raise ctx.err(path, f"unsupported Slurm version {text!r}; supported: {', '.join(SUPPORTED_SLURM_VERSIONS)}")
    return f"{m.group(1)}.{m.group(2)}"


def _cpu(ctx: _Ctx, raw: Any, path: str) -> CPU:
    m = _mapping(ctx, raw, path, {"sockets", "cores_per_socket", "threads_per_core"}, {"sockets", "cores_per_socket"})
    return CPU(
        sockets=_int(ctx, m["sockets"], _join(path, "sockets"), 1),
        cores_per_socket=_int(ctx, m["cores_per_socket"], _join(path, "cores_per_socket"), 1),
        threads_per_core=_int(ctx, m.get("threads_per_core", 1), _join(path, "threads_per_core"), 1),
    )


def _core_range_ok(spec: str, ncores: int) -> bool:
    try:
        idx = hostlist.expand_ints(spec)
    except ValueError:
        return False
    return bool(idx) and max(idx) < ncores


def _gpus(ctx: _Ctx, raw: Any, path: str, cpu: CPU) -> GPUs:
    m = _mapping(
        ctx, raw, path,
        {"type", "count", "memory_mb", "files", "cores", "links", "mig", "shards", "autodetect", "env_uuid"},
        {"type", "count", "files"},
    )
    gtype = _str(ctx, m["type"], _join(path, "type"), _NAME_RE)
    count = _int(ctx, m["count"], _join(path, "count"), 1)
    files = _str(ctx, m["files"], _join(path, "files"))
    problem = ranges_problem(files, hostnames=False) or next(
        (f"{f!r} is not an absolute device path" for f in hostlist.split_top(files) if not _PATH_RE.fullmatch(f)), None)
    if problem:
        raise ctx.err(_join(path, "files"), f"invalid file list {files!r}: {problem}")
    try:
        flist = hostlist.expand(files, _join(path, "files"))
    except UsageError as exc:
        raise ctx.err(_join(path, "files"), f"invalid file list {files!r}") from exc
    if len(flist) != count:
        raise ctx.err(_join(path, "files"), f"{files!r} names {len(flist)} device files but count is {count}")
    cores: tuple[str, ...] = ()
    if m.get("cores") is not None:
        cl = _list(ctx, m["cores"], _join(path, "cores"))
        if len(cl) != count:
            raise ctx.err(_join(path, "cores"), f"has {len(cl)} entries but count is {count}")
        for i, c in enumerate(cl):
            spec = _str(ctx, c, _join(_join(path, "cores"), i))
            if not _core_range_ok(spec, cpu.cores):
                raise ctx.err(
                    _join(_join(path, "cores"), i),
                    f"{spec!r} is not a core range inside the node's {cpu.cores} cores (0-{cpu.cores - 1})",
                )
        cores = tuple(str(c) for c in cl)
    links_raw = m.get("links", "none")
    links: str | tuple[tuple[int, ...], ...]
    if isinstance(links_raw, list):
        rows = []
        for i, row in enumerate(links_raw):
            r = _list(ctx, row, _join(_join(path, "links"), i))
            if len(r) != count:
                raise ctx.err(_join(_join(path, "links"), i), f"row has {len(r)} entries, expected {count}")
            rows.append(tuple(_int(ctx, v, _join(_join(_join(path, "links"), i), j), -1) for j, v in enumerate(r)))
        if len(rows) != count:
            raise ctx.err(_join(path, "links"), f"matrix has {len(rows)} rows, expected {count}")
        links = tuple(rows)
    else:
        links = _choice(ctx, links_raw if links_raw is not None else "none", _join(path, "links"), ("nvlink", "none"))
    mig_layout = _mig(ctx, m.get("mig"), _join(path, "mig"), count)
    mig = tuple(inst.profile for layout in mig_layout for inst in layout) or None
    shards = _int(ctx, m.get("shards", 0), _join(path, "shards"))
    if shards and mig_layout:
        # Slurm cannot shard a MIG-partitioned GPU (gres.shtml: sharding is for whole GPUs)
        raise ctx.err(_join(path, "shards"), "shards and MIG cannot be combined on the same GPUs")
    if shards and shards < count:
        raise ctx.err(_join(path, "shards"), f"{shards} shards cannot be spread over {count} GPUs (at least 1 each)")
    return GPUs(
        type=gtype,
        count=count,
        files=files,
        memory_mb=_int(ctx, m.get("memory_mb", 0), _join(path, "memory_mb")),
        cores=cores,
        links=links,
        mig=mig,
        shards=shards,
        mig_layout=mig_layout,
        autodetect=_choice(ctx, m.get("autodetect", "off"), _join(path, "autodetect"), GPU_AUTODETECT_MODES),
        env_uuid=_bool(ctx, m.get("env_uuid", False), _join(path, "env_uuid")),
    )


_MIG_PROFILE_RE = re.compile(r"^\d+g\.\d+gb(\+me)?$", re.ASCII)


def _mig_instance(ctx: _Ctx, raw: Any, path: str) -> MigInstance:
    """``"3g.40gb@1"`` (profile@gi, ci 0) or ``{profile: 3g.40gb, gi: 1, ci: 0}``."""
    if isinstance(raw, str):
        prof, sep, gi_text = raw.partition("@")
        if not sep or not gi_text.isdigit():
            raise ctx.err(path, f"{raw!r}: write PROFILE@GI, e.g. '3g.40gb@1' (GI = GPU instance id, see `nvidia-smi mig -lgi`)")
        raw = {"profile": prof, "gi": int(gi_text)}
    m = _mapping(ctx, raw, path, {"profile", "gi", "ci"}, {"profile", "gi"})
    profile = _str(ctx, m["profile"], _join(path, "profile"))
    if not _MIG_PROFILE_RE.fullmatch(profile):
        raise ctx.err(_join(path, "profile"), f"{profile!r} is not a MIG profile name like '3g.40gb'")
    gi = _int(ctx, m["gi"], _join(path, "gi"))
    ci = _int(ctx, m.get("ci", 0), _join(path, "ci"))
    # NVIDIA's caps layout (/proc/driver/nvidia-caps/mig-minors) has GI ids 0-14 and CI ids 0-7
    if gi > 14:
        raise ctx.err(_join(path, "gi"), f"GPU instance id {gi} is outside 0-14")
    if ci > 7:
        raise ctx.err(_join(path, "ci"), f"compute instance id {ci} is outside 0-7")
    return MigInstance(profile, gi, ci)


def _mig(ctx: _Ctx, raw: Any, path: str, count: int) -> tuple[tuple[MigInstance, ...], ...]:
    """Either one layout for every GPU (a list of instances) or one list per GPU (``[]``/null = not MIG)."""
    if raw is None:
        return ()
    items = _list(ctx, raw, path)
    if not items:
        return ()
    per_gpu = all(v is None or isinstance(v, list) for v in items)
    if per_gpu:
        if len(items) != count:
            raise ctx.err(path, f"has {len(items)} per-GPU layouts but count is {count}")
        layouts = [
            [_mig_instance(ctx, v, _join(_join(path, i), j)) for j, v in enumerate(row or [])]
            for i, row in enumerate(items)
        ]
    else:
        one = [_mig_instance(ctx, v, _join(path, j)) for j, v in enumerate(items)]
        layouts = [list(one) for _ in range(count)]
    for i, layout in enumerate(layouts):
        ids = [(x.gi, x.ci) for x in layout]
        if len(set(ids)) != len(ids):
            raise ctx.err(_join(path, i) if per_gpu else path, "the same GPU/compute instance id is listed twice")
    if not any(layouts):
        return ()
    return tuple(tuple(layout) for layout in layouts)


def _nic(ctx: _Ctx, raw: Any, path: str) -> NIC:
    m = _mapping(ctx, raw, path, {"name", "kind", "rate_gbps", "role"}, {"name"})
    return NIC(
        name=_str(ctx, m["name"], _join(path, "name"), _NAME_RE),
        kind=_choice(ctx, m.get("kind", "ib"), _join(path, "kind"), ("ib", "roce", "eth")),
        rate_gbps=_int(ctx, m.get("rate_gbps", 0), _join(path, "rate_gbps")),
        role=_choice(ctx, m.get("role", "compute"), _join(path, "role"), ("compute", "storage", "mgmt")),
    )


def _group(ctx: _Ctx, raw: Any, path: str) -> NodeGroup:
    m = _mapping(
        ctx, raw, path,
        {"name", "hosts", "cpu", "memory_mb", "reserve", "gpus", "nics", "features", "weight", "power", "slurm",
         "gres_conf"},
        {"name", "hosts", "cpu", "memory_mb"},
    )
    cpu = _cpu(ctx, m["cpu"], _join(path, "cpu"))
    memory = _int(ctx, m["memory_mb"], _join(path, "memory_mb"), 1)
    reserve = Reserve()
    if m.get("reserve") is not None:
        r = _mapping(ctx, m["reserve"], _join(path, "reserve"), {"memory_mb", "cores"})
        reserve = Reserve(
            memory_mb=_int(ctx, r.get("memory_mb", 0), _join(path, "reserve.memory_mb")),
            cores=_int(ctx, r.get("cores", 0), _join(path, "reserve.cores")),
        )
        if reserve.memory_mb >= memory:
            raise ctx.err(_join(path, "reserve.memory_mb"), f"{reserve.memory_mb} >= memory_mb {memory}")
        if reserve.cores >= cpu.cores:
            raise ctx.err(_join(path, "reserve.cores"), f"{reserve.cores} >= the node's {cpu.cores} cores")
    gpus = _gpus(ctx, m["gpus"], _join(path, "gpus"), cpu) if m.get("gpus") is not None else None
    nics = tuple(_nic(ctx, n, _join(_join(path, "nics"), i)) for i, n in enumerate(_list(ctx, m.get("nics") or [], _join(path, "nics"))))
    feats = tuple(
        _str(ctx, f, _join(_join(path, "features"), i), _FEATURE_RE)
        for i, f in enumerate(_list(ctx, m.get("features") or [], _join(path, "features")))
    )
    return NodeGroup(
        name=_str(ctx, m["name"], _join(path, "name"), _NAME_RE),
        hosts=_hosts(ctx, m["hosts"], _join(path, "hosts")),
        cpu=cpu,
        memory_mb=memory,
        reserve=reserve,
        gpus=gpus,
        nics=nics,
        features=feats,
        weight=_int(ctx, m.get("weight", 1), _join(path, "weight"), 0),
        power=_power(ctx, m["power"], _join(path, "power")) if m.get("power") is not None else None,
        slurm=_node_keys(ctx, m.get("slurm"), _join(path, "slurm")),
        gres_conf=_records(ctx, m.get("gres_conf"), _join(path, "gres_conf")),
    )


# NodeName keys a group's ``slurm:`` may not set: the name is the group's hosts
_NODE_OWNED = frozenset({"nodename"})


def _node_keys(ctx: _Ctx, raw: Any, path: str) -> tuple[tuple[str, str], ...]:
    pairs = _kv_map(ctx, raw, path)
    for k, _ in pairs:
        if k.lower() in _NODE_OWNED:
            raise ctx.err(_join(path, k), "the group's hosts are its NodeName: set hosts instead")
    return pairs


def _records(ctx: _Ctx, raw: Any, path: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """gres.conf records as given: a list of ``Key: Value`` mappings (NodeName comes from the group)."""
    out = []
    for i, r in enumerate(_list(ctx, raw or [], path)):
        pairs = _kv_map(ctx, r, _join(path, i))
        if not pairs:
            raise ctx.err(_join(path, i), "an empty record")
        for k, _ in pairs:
            if k.lower() == "nodename":
                raise ctx.err(_join(_join(path, i), k), "NodeName comes from where the record is (the group's hosts, "
                                                        "or every node at the top level)")
        out.append(pairs)
    return tuple(out)


def _power(ctx: _Ctx, raw: Any, path: str) -> Power:
    m = _mapping(ctx, raw, path, {"provider", "suspend_time", "resume_timeout", "suspend_timeout", "cloud", "command",
                                  "bmc", "system", "credentials", "verify_tls", "timeout", "cipher_suite"},
                 {"provider"})
    provider = _choice(ctx, m["provider"], _join(path, "provider"), POWER_PROVIDERS)
    p = Power(
        provider=provider,
        suspend_time=_int(ctx, m.get("suspend_time", 600), _join(path, "suspend_time"), 1),
        resume_timeout=_int(ctx, m.get("resume_timeout", 600), _join(path, "resume_timeout"), 1),
        suspend_timeout=_int(ctx, m.get("suspend_timeout", 60), _join(path, "suspend_timeout"), 1),
        cloud=_bool(ctx, m.get("cloud", False), _join(path, "cloud")),
        command=_command(ctx, m["command"], _join(path, "command")) if m.get("command") else "",
        bmc=_str(ctx, m["bmc"], _join(path, "bmc")) if m.get("bmc") else "",
        system=_str(ctx, m.get("system", "{host}"), _join(path, "system")),
        credentials=_path(ctx, m["credentials"], _join(path, "credentials")) if m.get("credentials") else "",
        verify_tls=_bool(ctx, m.get("verify_tls", True), _join(path, "verify_tls")),
        timeout=_int(ctx, m.get("timeout", 60), _join(path, "timeout"), 1),
        cipher_suite=_int(ctx, m.get("cipher_suite", 0), _join(path, "cipher_suite"), 0),
    )
    if provider == "command" and not p.command:
        raise ctx.err(_join(path, "command"), "provider 'command' needs the site script: command: /path/to/script "
                                              "(called as SCRIPT on|off HOST)")
    if provider == "redfish" and not re.fullmatch(r"https?://\S+", p.bmc):
        raise ctx.err(_join(path, "bmc"), "provider 'redfish' needs the BMC URL, e.g. https://{host}-bmc "
                                          "({host} is replaced by the node name)")
    if provider == "ipmi" and not re.fullmatch(r"[A-Za-z0-9_.{}\[\]:-]+", p.bmc):
        raise ctx.err(_join(path, "bmc"), "provider 'ipmi' needs the BMC's address, host or host:port, e.g. "
                                          "{host}-bmc ({host} is replaced by the node name)")
    if p.timeout >= p.resume_timeout:
        # slurm.conf(5) 24.11 ResumeProgram: "Programs will be killed if they run longer than the largest configured,
        # global or partition, ResumeTimeout or SuspendTimeout"
        raise ctx.err(_join(path, "timeout"), f"{p.timeout} must be below resume_timeout {p.resume_timeout} (Slurm "
                                              "kills power programs that run longer)")
    return p


# PartitionName keys that slurmkit writes from a partition's own inventory keys: not settable through ``extra``
_PARTITION_OWNED = {
    "partitionname": "name", "nodes": "groups", "default": "default", "maxtime": "max_time",
    "defaulttime": "default_time", "prioritytier": "priority_tier", "qos": "qos", "exclusive": "exclusive",
}
# the spellings of partition exclusivity, one of which ``exclusive:`` writes per release: not beside it in ``extra``
_EXCLUSIVITY_KEYS = {"oversubscribe", "shared", "exclusiveuser", "exclusivetopo"}


def _partition_nodes(ctx: _Ctx, raw: Any, path: str, groups: dict[str, NodeGroup], nodesets: set[str] | frozenset[str]) -> str:
    """A partition's Nodes= as Slurm reads it (slurm.conf(5) PartitionName Nodes, 22.05 and 24.11: node names
    as a hostlist, NodeSet names, or ALL): every name must be a node of some group or a NodeSet."""
    text = _kv_value(ctx, raw, path)
    if text.upper() == "ALL":
        return text
    try:
        names = hostlist.expand(text)
    except ValueError as exc:
        raise ctx.err(path, f"invalid hostlist {text!r}: {exc}") from None
    known = {h for g in groups.values() for h in g.hostnames}
    for n in names:
        if n not in known and n not in nodesets:
            close = difflib.get_close_matches(n, sorted(nodesets) + sorted(known)[:2000], n=1)
            raise ctx.err(path, f"{n!r} is neither a node of a group nor a NodeSet" +
                          (f"; did you mean '{close[0]}'?" if close else ""))
    return text


def _partition(ctx: _Ctx, raw: Any, path: str, groups: dict[str, NodeGroup],
               nodesets: set[str] | frozenset[str] = frozenset()) -> Partition:
    m = _mapping(
        ctx, raw, path,
        {"name", "groups", "default", "max_time", "default_time", "priority_tier", "qos", "extra", "nodes", "exclusive"},
        {"name"},
    )
    nodes = _partition_nodes(ctx, m["nodes"], _join(path, "nodes"), groups, nodesets) if m.get("nodes") else ""
    if nodes and m.get("groups"):
        raise ctx.err(_join(path, "nodes"), "use either groups (whole node groups) or nodes (any hostlist), not both")
    gl = _list(ctx, m.get("groups") or [], _join(path, "groups"))
    if not gl and not nodes:
        raise ctx.err(_join(path, "groups"), "a partition needs at least one node group (or nodes: a hostlist)")
    names = []
    for i, g in enumerate(gl):
        gp = _join(_join(path, "groups"), i)
        name = _str(ctx, g, gp)
        if name not in groups:
            close = difflib.get_close_matches(name, sorted(groups), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known groups: {', '.join(sorted(groups))}"
            raise ctx.err(gp, f"unknown node group {name!r}{hint}")
        names.append(name)
    extra: tuple[tuple[str, str], ...] = ()
    if m.get("extra") is not None:
        extra = _kv_map(ctx, m["extra"], _join(path, "extra"))
        for k, _ in extra:
            if k.lower() in _PARTITION_OWNED:
                # PartitionName= in extra renamed the partition (and Nodes= dropped the NodeSet) with exit 0;
                # these come from the partition's own keys (generate/slurmconf.py partition_lines)
                raise ctx.err(_join(_join(path, "extra"), k), f"{k} is written by slurmkit: set "
                                                               f"{_join(path, _PARTITION_OWNED[k.lower()])} instead")
            if k.lower() in _EXCLUSIVITY_KEYS and m.get("exclusive"):
                raise ctx.err(_join(_join(path, "extra"), k), f"{k} beside {_join(path, 'exclusive')}: one says how "
                                                               "the partition is exclusive (written per release)")
    tmax = _str(ctx, m.get("max_time", "UNLIMITED"), _join(path, "max_time"), _TIME_RE)
    tdef = _str(ctx, m["default_time"], _join(path, "default_time"), _TIME_RE) if m.get("default_time") else None
    pname = _str(ctx, m["name"], _join(path, "name"), _NAME_RE)
    if pname.lower() in _RESERVED_PARTITION_NAMES:
        raise ctx.err(_join(path, "name"), f"{pname!r} is reserved: PartitionName=DEFAULT only sets defaults for the "
                                           "partitions after it, so no partition of that name would exist")
    return Partition(
        name=pname,
        groups=tuple(names),
        default=_bool(ctx, m.get("default", False), _join(path, "default")),
        max_time=tmax,
        default_time=tdef,
        priority_tier=_int(ctx, m["priority_tier"], _join(path, "priority_tier")) if m.get("priority_tier") is not None else None,
        qos=_str(ctx, m["qos"], _join(path, "qos"), _NAME_RE) if m.get("qos") else None,
        extra=extra,
        nodes=nodes,
        exclusive=_choice(ctx, m["exclusive"], _join(path, "exclusive"), ("node", "user", "topo"))
        if m.get("exclusive") else None,
    )


def _rail_optimized(ctx: _Ctx, raw: Any, path: str, compute_nics: dict[str, int]) -> dict[str, Any]:
    """``topology.rail_optimized``: the SUs of a rail-optimized fabric, lowered to what Slurm can express (one
    leaf switch per SU under one ``spine`` for topology/tree, or one block per SU for topology/block)."""
    m = _mapping(ctx, raw, path, {"units", "plugin", "spine", "block_sizes"}, {"units"})
    plugin = _choice(ctx, m.get("plugin", "tree"), _join(path, "plugin"), ("tree", "block"))
    units = []
    up = _join(path, "units")
    for i, u in enumerate(_list(ctx, m["units"], up)):
        p = _join(up, i)
        um = _mapping(ctx, u, p, {"name", "nodes", "rails"}, {"name", "nodes"})
        unit = RailUnit(_str(ctx, um["name"], _join(p, "name"), _NAME_RE), _hosts(ctx, um["nodes"], _join(p, "nodes")),
                        _int(ctx, um["rails"], _join(p, "rails"), 1) if um.get("rails") is not None else 0)
        if unit.rails:
            # rail i of the SU is compute HCA i of every node: a node with another number of compute HCAs is
            # cabled differently from what the inventory says
            for h in hostlist.expand(unit.nodes):
                n = compute_nics.get(h, 0)
                if n and n != unit.rails:
                    raise ctx.err(_join(p, "rails"), f"{unit.rails} rails, but host {h!r} has {n} compute HCAs "
                                                     "(rail i is each node's compute HCA i)")
        units.append(unit)
    if not units:
        raise ctx.err(up, "at least one scalable unit")
    if m.get("block_sizes") is not None and plugin != "block":
        raise ctx.err(_join(path, "block_sizes"), "block_sizes needs plugin: block")
    if plugin == "block":
        out: dict[str, Any] = {"blocks": [{"name": u.name, "nodes": u.nodes} for u in units]}
        if m.get("block_sizes") is not None:
            out["block_sizes"] = m["block_sizes"]
    else:
        out = {"switches": [{"name": u.name, "nodes": u.nodes} for u in units]}
        if len(units) > 1:
            spine = _str(ctx, m.get("spine", "spine"), _join(path, "spine"), _NAME_RE)
            if spine in {u.name for u in units}:
                raise ctx.err(_join(path, "spine"), f"{spine!r} is also a unit name")
            out["switches"].append({"name": spine, "switches": hostlist.fold(u.name for u in units)})
    out["_units"] = tuple(units)
    return out


def _rail_path(got: str, path: str, n_units: int) -> str:
    """A key path inside rail_optimized's lowering -> the key the inventory has: ``topology.switches[2].nodes`` ->
    ``topology.rail_optimized.units[2].nodes``, ``topology.switches`` -> ``topology.rail_optimized.units``; the spine
    (the switch after the units) -> ``topology.rail_optimized.spine``."""
    base = _join(path, "rail_optimized")
    if got == _join(path, "block_sizes") or got.startswith(_join(path, "block_sizes") + "["):
        return base + got[len(path):]  # given inside rail_optimized (a top-level one is refused before the lowering)
    m = re.fullmatch(rf"{re.escape(path)}\.(?:switches|blocks)(?:\[(\d+)\])?(.*)", got)
    if not m:
        return base if got == path else got
    if m.group(1) is not None and int(m.group(1)) >= n_units:
        return _join(base, "spine")
    return _join(base, "units") + (f"[{m.group(1)}]" if m.group(1) is not None else "") + m.group(2)


def _xyz(ctx: _Ctx, raw: Any, path: str) -> tuple[int, int, int]:
    if isinstance(raw, dict):
        m = _mapping(ctx, raw, path, {"x", "y", "z"}, {"x", "y", "z"})
        return (_int(ctx, m["x"], _join(path, "x"), 1), _int(ctx, m["y"], _join(path, "y"), 1), _int(ctx, m["z"], _join(path, "z"), 1))
    v = _list(ctx, raw, path)
    if len(v) != 3:
        raise ctx.err(path, f"expected [x, y, z], got {raw!r}")
    return (_int(ctx, v[0], _join(path, 0), 1), _int(ctx, v[1], _join(path, 1), 1), _int(ctx, v[2], _join(path, 2), 1))


# topology/ring: ring_record.c at slurm-26-05-3-1, `if (ring_ptr->ring_size >= MAX_RING_SIZE) fatal("Ring (%s) is
# bigger than %d")` with ring_record.h `#define MAX_RING_SIZE 16`; topology.yaml(5) "A maximum of 16 nodes".
MAX_RING_NODES = 16


def _rings(ctx: _Ctx, raw: Any, path: str) -> tuple[Ring, ...]:
    rings = []
    for i, r in enumerate(_list(ctx, raw, path)):
        p = _join(path, i)
        rm = _mapping(ctx, r, p, {"name", "nodes"}, {"name", "nodes"})
        # ring order matters (topology.yaml(5): "Ordered list of child nodes in the ring"): keep the order written,
        # one host name per entry or a hostlist expanded in its own order
        raw_nodes = rm["nodes"] if isinstance(rm["nodes"], list) else [rm["nodes"]]
        nodes: list[str] = []
        for j, v in enumerate(raw_nodes):
            nodes += hostlist.expand(_hosts(ctx, v, _join(_join(p, "nodes"), j) if isinstance(rm["nodes"], list) else _join(p, "nodes")))
        if len(nodes) > MAX_RING_NODES:
            raise ctx.err(_join(p, "nodes"), f"{len(nodes)} nodes; topology/ring takes at most {MAX_RING_NODES} per ring "
                                             "(fatal to slurmctld)")
        if len(set(nodes)) != len(nodes):
            raise ctx.err(_join(p, "nodes"), "a node appears twice in the ring")
        rings.append(Ring(_str(ctx, rm["name"], _join(p, "name"), _NAME_RE), tuple(nodes)))
    return tuple(rings)


def _toruses(ctx: _Ctx, raw: Any, path: str) -> tuple[Torus, ...]:
    out = []
    for i, t in enumerate(_list(ctx, raw, path)):
        p = _join(path, i)
        tm = _mapping(ctx, t, p, {"name", "dims", "nodes", "placements"}, {"name", "dims", "nodes", "placements"})
        dims = _xyz(ctx, tm["dims"], _join(p, "dims"))
        nodes = _hosts(ctx, tm["nodes"], _join(p, "nodes"))
        n = len(hostlist.expand(nodes))
        # torus3d_record.c _validate_config at slurm-26-05-3-1: "Torus3d dimensions %ux%ux%u=%PRIu64 do not match
        # node count %u" (an invalid torus is fatal: "Torus3d (%s) has invalid configuration")
        if dims[0] * dims[1] * dims[2] != n:
            raise ctx.err(_join(p, "nodes"), f"{n} nodes, but dims {dims[0]}x{dims[1]}x{dims[2]} need "
                                             f"{dims[0] * dims[1] * dims[2]}")
        pp = _join(p, "placements")
        places = tuple(_xyz(ctx, v, _join(pp, j)) for j, v in enumerate(_list(ctx, tm["placements"], pp)))
        if not places:
            # topology.yaml(5): "Jobs that don't match any placement size will not receive an allocation"
            raise ctx.err(pp, "at least one placement: a job whose node count matches no placement is never allocated")
        for j, d in enumerate(places):
            if any(d[k] > dims[k] for k in range(3)):
                # torus3d_record.c: "Torus3d placement dims exceed torus dimensions"
                raise ctx.err(_join(pp, j), f"placement {d[0]}x{d[1]}x{d[2]} exceeds the torus {dims[0]}x{dims[1]}x{dims[2]}")
        out.append(Torus(_str(ctx, tm["name"], _join(p, "name"), _NAME_RE), dims, nodes, places))
    return tuple(out)


def _topology(ctx: _Ctx, raw: Any, path: str, known_hosts: set[str], adopted: bool = False,
              compute_nics: dict[str, int] | None = None, group_specs: list[str] | None = None) -> Topology:
    m = _mapping(ctx, raw, path, {"switches", "blocks", "block_sizes", "rail_optimized", "rings", "toruses", "file"})
    if "file" in m:
        import dataclasses

        f = m.pop("file")
        if f not in ("topology.conf", "topology.yaml"):
            raise ctx.err(_join(path, "file"), f"expected topology.conf or topology.yaml, got {f!r}")
        if f == "topology.conf" and (m.get("rings") or m.get("toruses")):
            # topology.conf(5) has SwitchName and BlockName lines only; rings and tori exist in topology.yaml(5)
            raise ctx.err(_join(path, "file"), "rings and toruses exist only in topology.yaml")
        return dataclasses.replace(_topology(ctx, m, path, known_hosts, adopted, compute_nics, group_specs), file=f)
    given = [k for k in ("switches", "blocks", "rail_optimized", "rings", "toruses") if m.get(k)]
    if len(given) > 1:
        if set(given) == {"switches", "blocks"}:
            raise ctx.err(path, "use either 'switches' (tree) or 'blocks' (block topology), not both")
        raise ctx.err(path, f"use one of 'switches', 'blocks', 'rail_optimized', 'rings', 'toruses', not {' and '.join(given)}")
    units: tuple[RailUnit, ...] = ()
    if m.get("rail_optimized"):
        lowered = _rail_optimized(ctx, m["rail_optimized"], _join(path, "rail_optimized"), compute_nics or {})
        units = lowered.pop("_units")
        if m.get("block_sizes"):
            raise ctx.err(_join(path, "block_sizes"), "with rail_optimized, give block_sizes inside it")
        try:
            t = _topology(ctx, lowered, path, known_hosts, adopted)
        except InventoryError as exc:
            # the lowered tree/blocks are slurmkit's own: name the key the admin wrote (units[i], spine)
            raise ctx.err(_rail_path(exc.path, path, len(units)), exc.message) from None
        return Topology(t.switches, t.blocks, t.block_sizes, rail_units=units)
    if m.get("rings") or m.get("toruses"):
        rings = _rings(ctx, m.get("rings") or [], _join(path, "rings"))
        toruses = _toruses(ctx, m.get("toruses") or [], _join(path, "toruses"))
        kind, items = ("rings", [(r.name, r.nodes) for r in rings]) if rings else (
            "toruses", [(t.name, tuple(hostlist.expand(t.nodes))) for t in toruses])
        seen_names: set[str] = set()
        holder: dict[str, str] = {}
        for i, (name, hosts) in enumerate(items):
            p = _join(_join(path, kind), i)
            if name in seen_names:
                raise ctx.err(_join(p, "name"), f"{name!r} is already defined")  # "has already been defined" is fatal
            seen_names.add(name)
            for h in hosts:
                if h not in known_hosts:
                    raise ctx.err(_join(p, "nodes"), f"host {h!r} is not in any node group")
                if h in holder:
                    # torus3d_record.c: "Torus3d (%s) and (%s) share nodes" (fatal)
                    raise ctx.err(_join(p, "nodes"), f"host {h!r} is in both {holder[h]!r} and {name!r}")
                holder[h] = name
        return Topology(rings=rings, toruses=toruses)
    switches = []
    for i, s in enumerate(_list(ctx, m.get("switches") or [], _join(path, "switches"))):
        sp = _join(_join(path, "switches"), i)
        sm = _mapping(ctx, s, sp, {"name", "nodes", "switches", "link_speed"}, {"name"})
        if bool(sm.get("nodes")) == bool(sm.get("switches")):
            raise ctx.err(sp, "a switch has exactly one of 'nodes' (leaf) or 'switches' (upper level)")
        speed = sm.get("link_speed")
        if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int) or not 0 <= speed <= 0xFFFFFFFF):
            # tree/switch_record.c reads LinkSpeed as S_P_UINT32
            raise ctx.err(_join(sp, "link_speed"), "expected an integer from 0 to 4294967295")
        switches.append(
            Switch(
                name=_str(ctx, sm["name"], _join(sp, "name"), _NAME_RE),
                nodes=_hosts(ctx, sm["nodes"], _join(sp, "nodes")) if sm.get("nodes") else "",
                switches=_hosts(ctx, sm["switches"], _join(sp, "switches"), hostnames=False) if sm.get("switches") else "",
                link_speed=speed,
            )
        )
    blocks: list[Block] = []
    for i, b in enumerate(_list(ctx, m.get("blocks") or [], _join(path, "blocks"))):
        bp = _join(_join(path, "blocks"), i)
        bm = _mapping(ctx, b, bp, {"name", "nodes"}, {"name", "nodes"})
        bname = _str(ctx, bm["name"], _join(bp, "name"), _NAME_RE)
        prior = next((j for j, x in enumerate(blocks) if x.name == bname), None)
        if prior is not None:
            # topology/block block_record.c: fatal("Block (%s) has already been defined") (slurm-24-11-5-1,
            # slurm-26-05-3-1). Refused here, not only by the generator (slurmconf.py), so that a rail_optimized unit
            # is named as written (units[i].name), not as the lowered topology.blocks[i]
            raise ctx.err(_join(bp, "name"), f"{bname!r} is already defined (entry {prior}); slurmctld: \"Block "
                                             f"({bname}) has already been defined\", fatal")
        blocks.append(Block(bname, _hosts(ctx, bm["nodes"], _join(bp, "nodes"))))
    sizes = tuple(
        _int(ctx, v, _join(_join(path, "block_sizes"), i), 1)
        for i, v in enumerate(_list(ctx, m.get("block_sizes") or [], _join(path, "block_sizes")))
    )
    if sizes and not blocks:
        raise ctx.err(_join(path, "block_sizes"), "block_sizes needs 'blocks'")
    if sizes:
        in_blocks = sum(len(hostlist.expand(b.nodes)) for b in blocks)
        if max(sizes) > in_blocks:
            raise ctx.err(_join(path, "block_sizes"), f"{max(sizes)} is larger than all {in_blocks} nodes in blocks")
    # every leaf/block host must be a known node, and in exactly one leaf/block
    # per leaf/block with set operations (issue 20 item 8: 3,125 leaves of a 100,000-node tree); the first leaf with
    # a finding is walked host by host, so the error names the same host as before
    seen: set[str] = set()
    members = [(s.name, s.nodes, "switches", i) for i, s in enumerate(switches) if s.nodes]
    members += [(b.name, b.nodes, "blocks", i) for i, b in enumerate(blocks)]
    # a generated tree (leaves of one range each, together exactly the node groups) is shown sound on its ranges
    exact = group_specs is not None and hostlist.exact_cover([mem[1] for mem in members], group_specs) is not None
    for k, (name, nodes, kind, i) in enumerate(members if not exact else ()):
        leaf_hosts = hostlist.expand(nodes)
        hset = set(leaf_hosts)
        if hset <= known_hosts and seen.isdisjoint(hset):
            seen |= hset
            continue
        where = _join(_join(_join(path, kind), i), "nodes")
        first: dict[str, str] = {}
        for name_, nodes_, _kind, _i in members[:k]:
            for h in hostlist.expand(nodes_):
                first.setdefault(h, name_)
        for h in leaf_hosts:
            if h not in known_hosts:
                raise ctx.err(where, f"host {h!r} is not in any node group")
            if h in first:
                raise ctx.err(where, f"host {h!r} is in both {first[h]!r} and {name!r}")
            first[h] = name
    if members and not adopted and not exact:
        # (an adopted site keeps its topology as it is: Slurm allows nodes in no switch, topology/tree logs
        # "switches lack access to N nodes" and schedules them apart; `conf validate` warns)
        # a node in no leaf switch / block cannot be placed with the rest (topology/tree: "switches lack access";
        # topology/block: "blocks lack access"): name the inventory key, not the generated file
        loose = sorted(known_hosts - set(seen))
        if loose:
            kind = "switches" if switches else "blocks"
            what = "leaf switch" if switches else "block"
            raise ctx.err(_join(path, kind), f"nodes {hostlist.fold(loose)} are in no {what}; add them to one "
                                             "(Slurm cannot place them with the rest)")
    names = {s.name for s in switches}
    if len(names) != len(switches):
        raise ctx.err(_join(path, "switches"), "duplicate switch names")
    for i, s in enumerate(switches):
        for child in hostlist.expand(s.switches):
            if child not in names:
                raise ctx.err(_join(_join(_join(path, "switches"), i), "switches"), f"unknown switch {child!r}")
            if child == s.name:
                raise ctx.err(_join(_join(_join(path, "switches"), i), "switches"), "a switch cannot contain itself")
    return Topology(tuple(switches), tuple(blocks), sizes)


# A value in slurm.conf/cgroup.conf: Slurm ends it at whitespace, starts a comment at '#', and reads the rest of
# the line as more keys; a quote would change how it tokenizes. Refused here so nothing can inject a key.
# A value may hold spaces, '#' and backslashes (written in double quotes and escaped, as parse_config.c reads them
# back: confparse.quote); a double quote cannot be written inside a quoted value, nor a control character at all
_VALUE_BAD_RE = re.compile(r'["\x00-\x08\x0a-\x1f\x7f]|[^\x00-\x7e]')


def _kv_value(ctx: _Ctx, v: Any, path: str) -> str:
    if v is None:  # `Key:` with nothing after it: unset, like an empty string (not the word "None")
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (dict, list)):
        raise ctx.err(path, "expected a single value")
    text = str(v)
    bad = _VALUE_BAD_RE.search(text)
    if bad:
        raise ctx.err(path, f"value {text!r} contains {bad.group()!r}; Slurm cannot read that back (no double "
                            "quotes, control characters or non-ASCII)")
    return text


def _kv_map(ctx: _Ctx, raw: Any, path: str, repeatable: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
    """``Key: Value`` pairs in order. A key in ``repeatable`` (case-insensitive) may take a list: one line each."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ctx.err(path, "expected a mapping of Key: Value")
    out = []
    for k, v in raw.items():
        if not isinstance(k, str) or not re.fullmatch(r"^[A-Za-z][A-Za-z0-9]*$", k):
            raise ctx.err(_join(path, str(k)), "not a Slurm config key")
        if isinstance(v, list) and k.lower() in repeatable:
            if not v:
                raise ctx.err(_join(path, k), "expected at least one value")
            out += [(k, _kv_value(ctx, x, _join(_join(path, k), i))) for i, x in enumerate(v)]
            continue
        if isinstance(v, list) and repeatable:
            raise ctx.err(_join(path, k), f"expected a single value ({k} cannot be repeated in slurm.conf)")
        out.append((k, _kv_value(ctx, v, _join(path, k))))
    return tuple(out)


def load_cluster_dict(data: Any, *, source: str | None = None, sha256: str = "") -> Cluster:
    ctx = _Ctx(source)
    top = _mapping(
        ctx, data, "",
        {"cluster", "slurm_version", "controller", "accounting", "node_groups", "partitions", "topology",
         "policy", "hooks", "site", "slurm_conf", "cgroup_conf", "submit_policy", "tenants", "rollout",
         "defrag", "monitoring", "adopted", "nodesets", "gres_conf", "dynamic_nodes", "runtime", "capacity",
         "slurmdbd_conf", "job_container_conf", "acct_gather_conf", "plugstack_conf"},
        {"cluster"},
    )
    ctx.adopted = top.get("adopted") is True
    cm = _mapping(ctx, top.get("controller") or {"hosts": ["localhost"]}, "controller", {"hosts", "port", "state_dir"}, {"hosts"})
    port, port_count = _port_range(ctx, cm.get("port", 6817), "controller.port")
    controller = Controller(
        hosts=tuple(_hostname(ctx, h, f"controller.hosts[{i}]") for i, h in enumerate(_list(ctx, cm["hosts"], "controller.hosts"))),
        port=port,
        port_count=port_count,
        state_dir=_path(ctx, cm.get("state_dir", "/var/spool/slurmctld"), "controller.state_dir"),
    )
    if not controller.hosts:
        raise ctx.err("controller.hosts", "at least one controller host is required")
    for i, h in enumerate(controller.hosts):
        if _IPV4_RE.fullmatch(h):
            # slurm.conf(5) SlurmctldHost (22.05-25.11): "the name returned by the command hostname -s"; slurmctld
            # finds its own entry by comparing its short and long hostname with each name (controller.c
            # _controller_index, 22.05 and 24.11), so an address matches no host: "not a valid controller", exit.
            # (slurm.conf's name(address) form is not an inventory form; accounting.host may stay an address)
            raise ctx.err(f"controller.hosts[{i}]", f"{h!r} is an address: SlurmctldHost takes the controller's "
                                                    "hostname (what `hostname -s` prints on it), slurm.conf(5)")
    for i, h in enumerate(controller.hosts):
        if h in controller.hosts[:i]:
            # read_config.c: "Duplicate SlurmctldHost records" is fatal to every daemon (22.05-25.11)
            raise ctx.err(f"controller.hosts[{i}]", f"{h!r} is listed twice (Slurm: Duplicate SlurmctldHost records)")
    if len(controller.hosts) > 1 and cm.get("state_dir") is None:
        # slurm.conf(5) StateSaveLocation (22.05 and 24.11): "If you have a secondary SlurmctldHost configured,
        # this location should be readable and writable by both systems": a local default (/var/spool/slurmctld)
        # makes the backup take over with none of the primary's job state
        raise ctx.err("controller.state_dir", "required with more than one controller host: StateSaveLocation must "
                                              "be a directory both controllers share (e.g. on NFS), slurm.conf(5)")
    accounting = _accounting(ctx, top["accounting"]) if top.get("accounting") is not None else None
    max_nodes = _dynamic_nodes(ctx, top.get("dynamic_nodes"), top.get("slurm_conf"))
    if "node_groups" not in top and max_nodes is None:
        raise ctx.err("node_groups", "required key is missing (only a dynamic-node site, dynamic_nodes:, has none)")
    glist = _list(ctx, top.get("node_groups") or [], "node_groups")
    if not glist and max_nodes is None:
        raise ctx.err("node_groups", "at least one node group is required (or dynamic_nodes: for nodes that register "
                                     "with slurmd -Z)")
    groups: dict[str, NodeGroup] = {}
    owner: dict[str, str] = {}
    for i, g in enumerate(glist):
        grp = _group(ctx, g, f"node_groups[{i}]")
        if grp.name in groups:
            raise ctx.err(f"node_groups[{i}].name", f"duplicate group name {grp.name!r}")
        for h in grp.hostnames:
            if h in owner:
                raise ctx.err(f"node_groups[{i}].hosts", f"host {h!r} is already in group {owner[h]!r}")
            owner[h] = grp.name
        groups[grp.name] = grp
    adopted = _bool(ctx, top.get("adopted", False), "adopted")
    if max_nodes is not None and max_nodes <= len(owner):
        # slurm.conf(5) MaxNodeCount (22.05, 24.11): "MaxNodeCount will be ignored if less than the number of nodes
        # found in the slurm.conf" -- and equal leaves no room for a node to register
        raise ctx.err("dynamic_nodes.max_node_count", f"is {max_nodes}, not more than the {len(owner)} nodes of "
                                                      "node_groups: no dynamic node could register")
    nodesets = _nodesets(ctx, top.get("nodesets"), "nodesets")
    parts = tuple(
        _partition(ctx, p, f"partitions[{i}]", groups, {n for n, _ in nodesets}) for i, p in enumerate(_list(ctx, top.get("partitions") or [], "partitions"))
    )
    if len({p.name for p in parts}) != len(parts):
        raise ctx.err("partitions", "duplicate partition names")
    if sum(p.default for p in parts) > 1 and not adopted:
        # an adopted site keeps its Default=YES lines as written: slurmctld makes the last one the default
        # (read_config.c _build_single_partitionline_info, 22.05 and 24.11); `conf validate` warns
        raise ctx.err("partitions", "more than one partition has default: true")
    # per host only where a rail-optimized fabric is described (100,000 nodes: no per-host work otherwise)
    rail = isinstance(top.get("topology"), dict) and bool(top["topology"].get("rail_optimized"))
    compute_nics = {h: sum(1 for n in groups[g].nics if n.role == "compute") for h, g in owner.items()} if rail else None
    topo = (_topology(ctx, top["topology"], "topology", set(owner), adopted, compute_nics,
                      [g.hosts for g in groups.values()])
            if top.get("topology") is not None else Topology())
    policy = Policy()
    if top.get("policy") is not None:
        pm = _mapping(ctx, top["policy"], "policy", {"fairshare", "preemption"})
        policy = Policy(
            fairshare=_bool(ctx, pm.get("fairshare", False), "policy.fairshare"),
            preemption=_choice(ctx, pm.get("preemption", "none"), "policy.preemption", ("none", "qos", "partition")),
        )
        # Fair-share usage and QOS records live in slurmdbd: with accounting_storage/none Slurm has no usage to
        # share (priority/multifactor's fair-share factor needs it, slurm.conf(5) PriorityWeightFairshare) and
        # no QOS to compare (preempt/qos: "QOS ... defined with sacctmgr", slurm.conf(5) PreemptType).
        if accounting is None:
            if policy.fairshare:
                raise ctx.err("policy.fairshare", "fair-share needs accounting (slurmdbd): add 'accounting: {host: ...}'"
                                                  " or set fairshare: false")
            if policy.preemption == "qos":
                raise ctx.err("policy.preemption", "preemption: qos needs accounting (slurmdbd holds the QOS): add "
                                                   "'accounting: {host: ...}' or use preemption: partition")
    hooks = Hooks()
    if top.get("hooks") is not None:
        hm = _mapping(
            ctx, top["hooks"], "hooks",
            {"prolog", "epilog", "healthcheck_interval", "healthcheck_start_only", "command", "prolog_epilog_timeout",
             "checks"},
        )
        checks = hm.get("checks") or {}
        if not isinstance(checks, dict):
            raise ctx.err("hooks.checks", "expected a mapping of check name -> settings")
        hooks = Hooks(
            prolog=_bool(ctx, hm.get("prolog", False), "hooks.prolog"),
            epilog=_bool(ctx, hm.get("epilog", False), "hooks.epilog"),
            healthcheck_interval=_int(ctx, hm.get("healthcheck_interval", 0), "hooks.healthcheck_interval"),
            command=_command(ctx, hm.get("command", "/usr/bin/slurmkit"), "hooks.command"),
            prolog_epilog_timeout=_int(ctx, hm.get("prolog_epilog_timeout", 60), "hooks.prolog_epilog_timeout", 1),
            checks=dict(checks),
            healthcheck_start_only=_bool(ctx, hm.get("healthcheck_start_only", False), "hooks.healthcheck_start_only"),
        )
        if hooks.healthcheck_start_only and hooks.healthcheck_interval:
            # slurmctld never starts a periodic check with START_ONLY (controller.c at slurm-25-11-0-1 and
            # slurm-26-05-3-1), so an interval would promise checks that never run
            raise ctx.err("hooks.healthcheck_start_only", "runs the health check only when slurmd starts: leave "
                                                          "hooks.healthcheck_interval unset (or 0) beside it")
        _hook_policy(ctx, hooks)
    site = Site()
    if top.get("site") is not None:
        sm = _mapping(ctx, top["site"], "site", {"default_partition", "socket_ifname", "nccl_ib_hca_exclude", "env", "run_root"})
        if sm.get("default_partition") and sm["default_partition"] not in {p.name for p in parts}:
            raise ctx.err("site.default_partition", f"unknown partition {sm['default_partition']!r}")
        site = Site(
            default_partition=sm.get("default_partition"),
            socket_ifname=_str(ctx, sm["socket_ifname"], "site.socket_ifname") if sm.get("socket_ifname") else None,
            nccl_ib_hca_exclude=tuple(str(x) for x in _list(ctx, sm.get("nccl_ib_hca_exclude") or [], "site.nccl_ib_hca_exclude")),
            env=_kv_env(ctx, sm.get("env"), "site.env"),
            run_root=_str(ctx, sm["run_root"], "site.run_root") if sm.get("run_root") else None,
        )
    version = _version(ctx, top.get("slurm_version", "22.05"), "slurm_version")
    submit = _submit_policy(ctx, top["submit_policy"], parts, topo) if top.get("submit_policy") is not None else None
    tenants = None
    if top.get("defrag") is not None:
        _defrag(ctx, top["defrag"])
    if top.get("tenants") is not None:
        from slurmkit.model.load_tenants import load_tenants

        tenants = load_tenants(ctx, top["tenants"], groups, parts, accounting is not None, submit is not None)
        if tenants.preempts and policy.preemption == "partition":
            # slurm.conf takes one PreemptType: preempt/partition_prio ignores the QOS preempt lists
            raise ctx.err("policy.preemption", "tenants.qos preempt lists need preempt/qos; set preemption: qos "
                                               "(or remove the preempt lists)")
        said_none = isinstance(top.get("policy"), dict) and top["policy"].get("preemption") == "none"
        if tenants.preempts and said_none:
            # an explicit 'none' and a preempt list contradict each other; slurmkit would otherwise render
            # preempt/qos from the lists (generate/slurmconf.py tenant_settings) against what the policy says
            first = next(i for i, q in enumerate(tenants.qos) if q.preempt)
            raise ctx.err("policy.preemption", f"none, but tenants.qos[{first}] ({tenants.qos[first].name}) has a "
                                               "preempt list: set preemption: qos, or remove the preempt lists")
    rollout = _rollout(ctx, top["rollout"]) if top.get("rollout") is not None else Rollout()
    monitoring = _monitoring(ctx, top["monitoring"], groups) if top.get("monitoring") is not None else Monitoring()
    return Cluster(
        name=_cluster_name(ctx, top["cluster"]),
        slurm_version=version,
        controller=controller,
        node_groups=tuple(groups.values()),
        partitions=parts,
        accounting=accounting,
        topology=topo,
        policy=policy,
        hooks=hooks,
        site=site,
        submit_policy=submit,
        slurm_conf=_kv_map(ctx, top.get("slurm_conf"), "slurm_conf", REPEATABLE_SLURM_KEYS_LOWER),
        cgroup_conf=_kv_map(ctx, top.get("cgroup_conf"), "cgroup_conf"),
        source_sha256=sha256,
        tenants=tenants,
        rollout=rollout,
        monitoring=monitoring,
        capacity=_capacity(ctx, top.get("capacity")),
        adopted=adopted,
        nodesets=nodesets,
        gres_conf=_records(ctx, top.get("gres_conf"), "gres_conf"),
        max_node_count=max_nodes,
        runtime=_runtime(ctx, top["runtime"]) if top.get("runtime") is not None else Runtime(),
        slurmdbd_conf=_no_secret(ctx, top.get("slurmdbd_conf"), "slurmdbd_conf"),
        job_container_conf=_kv_map(ctx, top.get("job_container_conf"), "job_container_conf"),
        acct_gather_conf=_no_secret(ctx, top.get("acct_gather_conf"), "acct_gather_conf"),
        plugstack_conf=_plugstack(ctx, top.get("plugstack_conf")),
    )


def _no_secret(ctx: _Ctx, raw: Any, path: str) -> tuple[tuple[str, str], ...]:
    from slurmkit.generate.sidekeys import SECRET_KEYS

    pairs = _kv_map(ctx, raw, path)
    for k, _v in pairs:
        if k.lower() in SECRET_KEYS:
            # the same rule as accounting.storage.password: the file (slurmdbd.conf mode 600) holds it, never the
            # inventory, which is shared and versioned
            raise ctx.err(f"{path}.{k}", f"a password does not belong in the inventory: put '{path}: {{{k}: ...}}' "
                                         "in the site overlay (--overrides)")
    return pairs


# spank(8) at slurm-22-05-8-1, slurm-24-11-5-1 and slurm-26-05-3-1: "The format of each non-comment line in the
# configuration file is: required/optional plugin arguments", and "The include keyword must appear on its own line,
# and takes a glob as its parameter"; a word here is one the file reads back unchanged (no quote, '#', space)
_SPANK_LINE_RE = re.compile(r"^(required|optional)( [A-Za-z0-9_./=+:@%,*?\[\]-]+)+$|^include [A-Za-z0-9_./+:@%,*?\[\]-]+$")


def _plugstack(ctx: _Ctx, raw: Any) -> tuple[str, ...]:
    out = []
    for i, line in enumerate(_list(ctx, raw or [], "plugstack_conf")):
        text = _str(ctx, line, f"plugstack_conf[{i}]")
        if not _SPANK_LINE_RE.fullmatch(text):
            raise ctx.err(f"plugstack_conf[{i}]", f"{text!r}: not a plugstack.conf line (spank(8): 'required|optional "
                                                  "PLUGIN [ARGS]' or 'include GLOB', words without quotes or '#')")
        out.append(text)
    return tuple(out)


# slurmdbd.conf(5) Purge<Kind>After, the same seven at slurm-22-05-8-1, slurm-24-11-5-1 and slurm-26-05-3-1 (26.05
# adds PurgeJobScriptAfter/PurgeJobEnvAfter, not offered here): "The time is a numeric value and is a number of
# months. If you want to purge more often you can include "hours", or "days" behind the numeric value"
PURGE_KINDS = {"events": "Event", "jobs": "Job", "reservations": "Resv", "steps": "Step", "suspend": "Suspend",
               "txn": "TXN", "usage": "Usage"}
_PURGE_RE = re.compile(r"^[1-9][0-9]*(month|months|day|days|hour|hours)?$", re.ASCII)
# a MariaDB/MySQL database or user name slurmdbd puts into SQL and slurmdbd.conf unquoted
_DB_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$", re.ASCII)


def _accounting(ctx: _Ctx, raw: Any) -> Accounting:
    am = _mapping(ctx, raw, "accounting", {"host", "port", "backup_host", "storage", "purge"}, {"host"})
    host = _hostname(ctx, am["host"], "accounting.host")
    backup = _hostname(ctx, am["backup_host"], "accounting.backup_host") if am.get("backup_host") else ""
    if backup == host:
        raise ctx.err("accounting.backup_host", f"{backup!r} is accounting.host: a backup slurmdbd runs on another host")
    d = Accounting(host)
    st = _mapping(ctx, am.get("storage") or {}, "accounting.storage", {"host", "port", "user", "database", "password"})
    if "password" in st:
        # slurmdbd.conf is the only place the password belongs (mode 600, owned by SlurmUser: slurmdbd refuses
        # anything else); an inventory is shared and versioned
        raise ctx.err("accounting.storage.password", "the database password does not belong in the inventory: put "
                                                     "'slurmdbd_conf: {StoragePass: ...}' in the site overlay "
                                                     "(--overrides)")
    purge: list[tuple[str, str]] = []
    pm = _mapping(ctx, am.get("purge") or {}, "accounting.purge", set(PURGE_KINDS))
    for k, v in pm.items():
        text = _str(ctx, v, f"accounting.purge.{k}")
        if not _PURGE_RE.fullmatch(text):
            raise ctx.err(f"accounting.purge.{k}", f"{text!r}: a number of months, or N followed by months, days or "
                                                   "hours (slurmdbd.conf(5) Purge*After)")
        purge.append((PURGE_KINDS[k], text))
    return Accounting(
        host=host,
        port=_port(ctx, am.get("port", d.port), "accounting.port"),
        backup_host=backup,
        storage_host=_hostname(ctx, st["host"], "accounting.storage.host") if st.get("host") else d.storage_host,
        storage_port=_port(ctx, st.get("port", d.storage_port), "accounting.storage.port"),
        storage_user=_str(ctx, st.get("user", d.storage_user), "accounting.storage.user", _DB_NAME_RE),
        storage_loc=_str(ctx, st.get("database", d.storage_loc), "accounting.storage.database", _DB_NAME_RE),
        purge=tuple(purge),
        storage=am.get("storage") is not None,
    )


MPI_DEFAULTS = ("none", "pmi2", "pmix")


def _runtime(ctx: _Ctx, raw: Any) -> Runtime:
    m = _mapping(ctx, raw, "runtime", {"pyxis", "tmpfs", "energy", "reboot_program", "mpi_default", "interactive_step"})
    d = Runtime()
    pyxis = ""
    args: tuple[str, ...] = ()
    if m.get("pyxis") is not None:
        pm = _mapping(ctx, m["pyxis"], "runtime.pyxis", {"plugin", "args"}, {"plugin"})
        pyxis = _path(ctx, pm["plugin"], "runtime.pyxis.plugin")
        if not pyxis.endswith(".so"):
            raise ctx.err("runtime.pyxis.plugin", f"{pyxis!r}: the path of spank_pyxis.so (plugstack.conf(5) loads a "
                                                  "shared object)")
        args = tuple(_str(ctx, a, f"runtime.pyxis.args[{i}]", _SAFE_WORD_RE)
                     for i, a in enumerate(_list(ctx, pm.get("args") or [], "runtime.pyxis.args")))
    base, dirs = "", d.tmpfs_dirs
    if m.get("tmpfs") is not None:
        tm = _mapping(ctx, m["tmpfs"], "runtime.tmpfs", {"base_path", "dirs"}, {"base_path"})
        base = _path(ctx, tm["base_path"], "runtime.tmpfs.base_path")
        if tm.get("dirs") is not None:
            dirs = tuple(_path(ctx, x, f"runtime.tmpfs.dirs[{i}]") for i, x in enumerate(_list(ctx, tm["dirs"], "runtime.tmpfs.dirs")))
            if not dirs:
                raise ctx.err("runtime.tmpfs.dirs", "at least one directory (the default is /tmp and /dev/shm)")
    energy = _choice(ctx, m.get("energy", "none"), "runtime.energy", ("none", "ipmi", "gpu"))
    if energy == "gpu":
        # acct_gather_energy/gpu asks the GPU plugin, and gpu/nvml's gpu_p_energy_read() is an empty function
        # returning SLURM_SUCCESS (src/plugins/gpu/nvml/gpu_nvml.c at slurm-22-05-8-1, slurm-24-11-5-1 and
        # slurm-26-05-3-1); slurm.conf(5): "Only available for rsmi at present" (AMD). On NVIDIA GPUs it records 0.
        raise ctx.err("runtime.energy", "gpu: Slurm reads GPU energy from AMD's rsmi only (gpu/nvml's energy read is "
                                        "empty, src/plugins/gpu/nvml/gpu_nvml.c); use ipmi (node power from the BMC)")
    return Runtime(
        pyxis=pyxis,
        pyxis_args=args,
        tmpfs_base=base,
        tmpfs_dirs=dirs,
        energy=energy,
        reboot_program=_command(ctx, m["reboot_program"], "runtime.reboot_program") if m.get("reboot_program") else "",
        mpi_default=_choice(ctx, m.get("mpi_default", "none"), "runtime.mpi_default", MPI_DEFAULTS),
        interactive_step=_bool(ctx, m.get("interactive_step", True), "runtime.interactive_step"),
    )


def _dynamic_nodes(ctx: _Ctx, value: Any, slurm_conf: Any) -> int | None:
    """``dynamic_nodes: {max_node_count: N}``: nodes that register themselves (``slurmd -Z --conf ...``,
    dynamic_nodes.shtml of 22.05 and 24.11) up to N nodes in all (slurm.conf MaxNodeCount). None: no such nodes."""
    if value is None:
        return None
    dm = _mapping(ctx, value, "dynamic_nodes", {"max_node_count"}, {"max_node_count"})
    if isinstance(slurm_conf, dict) and any(str(k).lower() == "maxnodecount" for k in slurm_conf):
        raise ctx.err("slurm_conf.MaxNodeCount", "set it once, as dynamic_nodes.max_node_count")
    # MaxNodeCount is an S_P_UINT32 (read_config.c slurm_conf_options[], 22.05 and 24.11)
    n = _int(ctx, dm["max_node_count"], "dynamic_nodes.max_node_count", 1)
    if n > 0xFFFFFFFE:
        raise ctx.err("dynamic_nodes.max_node_count", f"must be < 4294967295 (a 32-bit count in Slurm), got {n}")
    return n


def _monitoring(ctx: _Ctx, value: Any, groups: dict[str, NodeGroup]) -> Monitoring:
    mm = _mapping(ctx, value, "monitoring", {"node_exporter_port", "dcgm_exporter", "dcgm_exporter_port", "exporter",
                                             "scrape_interval_s", "gpu_temp_max_c", "hook_slow_s",
                                             "quota_pending_for_s", "per_user_labels", "logs", "alertmanager",
                                             "alert_webhooks", "runbook_base_url", "dcgm_job_mapping_dir",
                                             "slurm_metrics"})
    d = Monitoring()
    jobmap = mm.get("dcgm_job_mapping_dir", d.dcgm_job_mapping_dir)
    if jobmap is None or jobmap == "":
        jobmap = ""
    elif not isinstance(jobmap, str) or not jobmap.startswith("/") or "\n" in jobmap or "/../" in f"{jobmap}/":
        raise ctx.err("monitoring.dcgm_job_mapping_dir", f"expected an absolute directory path, got {jobmap!r}")
    dcgm = str(mm.get("dcgm_exporter") or "")
    if dcgm and dcgm != "all":
        from slurmkit.hostlist import expand

        known = {h for g in groups.values() for h in g.hostnames}
        try:
            unknown = sorted(set(expand(dcgm)) - known)
        except UsageError as exc:
            raise ctx.err("monitoring.dcgm_exporter", str(exc)) from None
        if unknown:
            raise ctx.err("monitoring.dcgm_exporter", f"{unknown[0]!r} is in no node group")
    exporters = tuple(_str(ctx, e, f"monitoring.exporter[{i}]", re.compile(r"[A-Za-z0-9_.\[\]:-]+:\d+"))
                      for i, e in enumerate(_list(ctx, mm.get("exporter") or [], "monitoring.exporter")))
    managers = tuple(_str(ctx, e, f"monitoring.alertmanager[{i}]", re.compile(r"[A-Za-z0-9_.\[\]:-]+:\d+"))
                     for i, e in enumerate(_list(ctx, mm.get("alertmanager") or list(d.alertmanager),
                                                 "monitoring.alertmanager")))
    hooks = _mapping(ctx, mm.get("alert_webhooks") or {}, "monitoring.alert_webhooks", {"critical", "warning", "info"})
    webhooks = tuple((sev, _str(ctx, u, f"monitoring.alert_webhooks.{sev}", re.compile(r"https?://\S+")))
                     for sev, u in hooks.items())
    runbook = _str(ctx, mm.get("runbook_base_url", d.runbook_base_url), "monitoring.runbook_base_url",
                   re.compile(r"[^\s#]+"))
    per_user = mm.get("per_user_labels", "auto")
    if per_user != "auto" and not isinstance(per_user, bool):
        raise ctx.err("monitoring.per_user_labels", f"expected auto, true or false, got {per_user!r}")
    return Monitoring(
        per_user_labels=None if per_user == "auto" else _bool(ctx, per_user, "monitoring.per_user_labels"),
        alertmanager=managers, alert_webhooks=webhooks, runbook_base_url=runbook,
        node_exporter_port=_port(ctx, mm.get("node_exporter_port", d.node_exporter_port), "monitoring.node_exporter_port"),
        dcgm_exporter=dcgm, dcgm_job_mapping_dir=jobmap,
        slurm_metrics=_bool(ctx, mm.get("slurm_metrics", False), "monitoring.slurm_metrics"),
        dcgm_exporter_port=_port(ctx, mm.get("dcgm_exporter_port", d.dcgm_exporter_port), "monitoring.dcgm_exporter_port"),
        exporter=exporters,
        scrape_interval_s=_int(ctx, mm.get("scrape_interval_s", d.scrape_interval_s), "monitoring.scrape_interval_s", 1),
        gpu_temp_max_c=_int(ctx, mm.get("gpu_temp_max_c", d.gpu_temp_max_c), "monitoring.gpu_temp_max_c", 1),
        hook_slow_s=float(_int(ctx, mm.get("hook_slow_s", int(d.hook_slow_s)), "monitoring.hook_slow_s", 1)),
        quota_pending_for_s=_int(ctx, mm.get("quota_pending_for_s", d.quota_pending_for_s),
                                 "monitoring.quota_pending_for_s", 1),
        logs=_logs(ctx, mm.get("logs")),
    )


def _capacity(ctx: _Ctx, value: Any) -> Capacity:
    if value is None:
        return Capacity()
    cm = _mapping(ctx, value, "capacity", {"utilisation_target_pct", "reserve_pct"})
    out = {}
    for key in ("utilisation_target_pct", "reserve_pct"):
        v = cm.get(key, getattr(Capacity, key))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
            raise ctx.err(f"capacity.{key}", f"expected a percentage from 0 to 100, got {v!r}")
        out[key] = float(v)
    return Capacity(**out)


def _logs(ctx: _Ctx, value: Any) -> Logs:
    if value is None:
        return Logs()
    lm = _mapping(ctx, value, "monitoring.logs", {"loki", "syslog", "retention_days"})
    loki = _str(ctx, lm["loki"], "monitoring.logs.loki") if "loki" in lm else ""
    # the URL lands in three shippers' files as a string: letters of a URL only, no quote, brace or space
    if loki and not re.fullmatch(r"https?://[A-Za-z0-9._~:@%\[\]-]+(/[A-Za-z0-9._~/%+-]*)?", loki):
        raise ctx.err("monitoring.logs.loki", f"expected Loki's push URL (http[s]://host:port/loki/api/v1/push), got {loki!r}")
    syslog = _str(ctx, lm["syslog"], "monitoring.logs.syslog",
                  re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")) if "syslog" in lm else ""
    if syslog and not 0 < int(syslog.rsplit(":", 1)[1]) < 65536:
        raise ctx.err("monitoring.logs.syslog", f"port out of range in {syslog!r}")
    return Logs(loki=loki, syslog=syslog,
                retention_days=_int(ctx, lm.get("retention_days", Logs.retention_days), "monitoring.logs.retention_days", 1))


def _nodesets(ctx: _Ctx, raw: Any, path: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """``nodesets: {name: {Nodes: hostlist}|{Feature: f}}``: NodeSet lines as the site has them (slurm.conf(5)
    NodeSet, 22.05 and 24.11: Feature= or Nodes=)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ctx.err(path, "expected a mapping of NodeSet name: {Nodes: ..., Feature: ...}")
    out = []
    for name, keys in raw.items():
        np_ = _join(path, str(name))
        _str(ctx, name, np_, _NAME_RE)
        pairs = _kv_map(ctx, keys, np_)
        if not {k.lower() for k, _ in pairs} & {"nodes", "feature"}:
            raise ctx.err(np_, "a NodeSet needs Nodes or Feature (slurm.conf(5) NodeSet)")
        out.append((str(name), pairs))
    return tuple(out)


def _argv(ctx: _Ctx, value: Any, path: str) -> tuple[str, ...]:
    """A command line as words (split like a shell, never run through one)."""
    text = _str(ctx, value, path)
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise ctx.err(path, f"{text!r}: {exc}") from None
    if not words:
        raise ctx.err(path, "an empty command")
    return words


def _rollout(ctx: _Ctx, raw: Any) -> Rollout:
    m = _mapping(ctx, raw, "rollout", {"stop_slurmctld", "start_slurmctld", "restart_slurmd", "restart_slurmdbd", "keep_backups"})
    d = Rollout()
    restart = _argv(ctx, m["restart_slurmd"], "rollout.restart_slurmd") if m.get("restart_slurmd") else ()
    if restart and not any("{nodes}" in w for w in restart):
        raise ctx.err("rollout.restart_slurmd", "needs {nodes} where the hostlist of the nodes to restart goes "
                                                "(e.g. 'pdsh -w {nodes} systemctl restart slurmd')")
    return Rollout(
        stop_slurmctld=_argv(ctx, m["stop_slurmctld"], "rollout.stop_slurmctld") if m.get("stop_slurmctld") else d.stop_slurmctld,
        start_slurmctld=_argv(ctx, m["start_slurmctld"], "rollout.start_slurmctld") if m.get("start_slurmctld") else d.start_slurmctld,
        restart_slurmd=restart,
        restart_slurmdbd=(_argv(ctx, m["restart_slurmdbd"], "rollout.restart_slurmdbd") if m.get("restart_slurmdbd")
                          else d.restart_slurmdbd),
        keep_backups=_int(ctx, m.get("keep_backups", d.keep_backups), "rollout.keep_backups", 1),
    )


_SUBMIT_KEYS = {"require_time_for_gpus", "cpus_per_gpu", "mem_per_gpu", "one_leaf_if_fits", "one_leaf_max_wait_s",
                "gpu_jobs_in_cpu_partitions", "cpu_jobs_in_gpu_partitions"}
# wait4switch is a uint32 of seconds in job_desc (slurm.h, 22.05 and 24.11); slurm.conf(5) MaxSwitchWait (default
# 300 s) caps what a user may ask for, and slurmctld lowers a larger request to it
_MAX_SWITCH_WAIT_S = 7 * 86400


def _per_gpu(ctx: _Ctx, value: Any, path: str) -> int | None:
    """``auto`` -> 0 (from the node shapes), ``off``/false -> None, N -> N."""
    if value is False or value == "off":
        return None
    if value == "auto":
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ctx.err(path, f"expected auto, off or a positive integer, got {value!r}")
    return value


def _submit_policy(ctx: _Ctx, raw: Any, parts: tuple[Partition, ...], topo: Topology) -> SubmitPolicy:
    m = _mapping(ctx, raw, "submit_policy", _SUBMIT_KEYS)
    d = SubmitPolicy()
    one_leaf = _bool(ctx, m.get("one_leaf_if_fits", d.one_leaf_if_fits), "submit_policy.one_leaf_if_fits")
    if one_leaf and topo.kind != "tree":
        # --switches / req_switch counts leaf switches of topology/tree (slurm.conf(5) TopologyPlugin, sbatch(1)
        # --switches); topology/block keeps a job inside one block by itself
        raise ctx.err("submit_policy.one_leaf_if_fits", "needs topology.switches (topology/tree): with "
                      + ("blocks, Slurm keeps a job in one block itself" if topo.kind == "block" else "no topology, "
                         "Slurm knows no leaf switches") + "; set it false")
    wait = _int(ctx, m.get("one_leaf_max_wait_s", d.one_leaf_max_wait_s), "submit_policy.one_leaf_max_wait_s", 1)
    if wait > _MAX_SWITCH_WAIT_S:
        raise ctx.err("submit_policy.one_leaf_max_wait_s", f"{wait} s is more than a week ({_MAX_SWITCH_WAIT_S} s)")
    if not parts:
        raise ctx.err("submit_policy", "needs partitions: the policy is per partition (GPU or CPU-only)")
    return SubmitPolicy(
        require_time_for_gpus=_bool(ctx, m.get("require_time_for_gpus", d.require_time_for_gpus),
                                    "submit_policy.require_time_for_gpus"),
        cpus_per_gpu=_per_gpu(ctx, m.get("cpus_per_gpu", "auto"), "submit_policy.cpus_per_gpu"),
        mem_per_gpu=_per_gpu(ctx, m.get("mem_per_gpu", "auto"), "submit_policy.mem_per_gpu"),
        one_leaf_if_fits=one_leaf,
        one_leaf_max_wait_s=wait,
        gpu_jobs_in_cpu_partitions=_choice(ctx, m.get("gpu_jobs_in_cpu_partitions", d.gpu_jobs_in_cpu_partitions),
                                           "submit_policy.gpu_jobs_in_cpu_partitions", SUBMIT_CHOICES),
        cpu_jobs_in_gpu_partitions=_choice(ctx, m.get("cpu_jobs_in_gpu_partitions", d.cpu_jobs_in_gpu_partitions),
                                           "submit_policy.cpu_jobs_in_gpu_partitions", SUBMIT_CHOICES),
    )


def site_pairs(raw: Any, path: str, source: str | None, slurm_conf: bool = False) -> tuple[tuple[str, str], ...]:
    """``Key: Value`` pairs of a site overlay file, checked like the inventory's ``slurm_conf:``/``cgroup_conf:``
    (key syntax, values Slurm cannot misread, lists only for keys slurm.conf repeats)."""
    return _kv_map(_Ctx(source), raw, path, REPEATABLE_SLURM_KEYS_LOWER if slurm_conf else frozenset())


def site_path(raw: Any, path: str, source: str | None) -> str:
    """An absolute path Slurm reads unquoted (``gres_file_prefix``)."""
    return _path(_Ctx(source), raw, path)


def _kv_env(ctx: _Ctx, raw: Any, path: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ctx.err(path, "expected a mapping of NAME: value")
    out = []
    for k, v in raw.items():
        if not isinstance(k, str) or not re.fullmatch(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise ctx.err(_join(path, str(k)), "not an environment variable name")
        if v is None or isinstance(v, (dict, list)):
            raise ctx.err(_join(path, k), 'expected a value (quote "" for an empty one)')
        out.append((k, "true" if v is True else "false" if v is False else str(v)))
    return tuple(out)


_DEFRAG_KEYS = {"movable_qos", "movable_accounts", "restart_s", "partitions", "qos", "min_wait_s",
                "max_moves_per_hour", "max_moves_per_job", "protect_h", "quiet_hours", "max_holds",
                "hold_grace_s"}
_QUIET = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)-([01]?\d|2[0-3]):([0-5]\d)$")


def _defrag(ctx: _Ctx, raw: Any) -> None:
    """``defrag:`` (read by ``slurmkit defrag``, slurmkit/defrag/gather.py policy_from): which jobs that are not
    gpusub's may be moved, the restart time a move costs, and the policy of ``defrag watch`` (which blocked jobs it
    acts for, after how long, how many moves per hour and per blocked job, how long a moved job is protected, quiet
    hours). Checked here so a typo is a key-path error."""
    m = _mapping(ctx, raw, "defrag", _DEFRAG_KEYS)
    for key in ("movable_qos", "movable_accounts", "partitions", "qos"):
        v = m.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise ctx.err(f"defrag.{key}", "expected a list of names")
    for key, least in (("restart_s", 0), ("min_wait_s", 0), ("protect_h", 0), ("max_moves_per_hour", 0),
                       ("max_moves_per_job", 1), ("max_holds", 0), ("hold_grace_s", 0)):
        if key not in m:
            continue
        r = m[key]
        whole = key.startswith("max_")
        # r < least is False for NaN and inf passes it: both reached watch's time arithmetic and crashed it
        if isinstance(r, bool) or not isinstance(r, int if whole else (int, float)) or not r >= least \
                or r == float("inf"):
            what = "a whole number" if whole else ("hours" if key.endswith("_h") else "seconds")
            raise ctx.err(f"defrag.{key}", f"expected {what} >= {least} (finite), got {r!r}")
    q = m.get("quiet_hours", [])
    if not isinstance(q, list):
        raise ctx.err("defrag.quiet_hours", "expected a list of HH:MM-HH:MM ranges (local time)")
    for i, x in enumerate(q):
        if not isinstance(x, str) or not _QUIET.match(x.replace(" ", "")):
            raise ctx.err(f"defrag.quiet_hours[{i}]", f"expected HH:MM-HH:MM (local time), got {x!r}")


def load_cluster_text(text: str, source: str | None = None) -> Cluster:
    try:
        data = yamlio.load(text)
    except yamlio.DuplicateKeyError as exc:
        raise InventoryError(exc.path, exc.message, source) from None
    except yamlio.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise InventoryError(where, f"not valid YAML: {getattr(exc, 'problem', exc)}", source) from exc
    sha = hashlib.sha256(text.encode()).hexdigest()
    return load_cluster_dict(data, source=source, sha256=sha)


def load_cluster(path: str | Path) -> Cluster:
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{p}: cannot read inventory: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise InventoryError(f"line {line}", f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                                             f"{exc.start}); save the inventory as UTF-8", str(p)) from exc
    return load_cluster_text(text, source=str(p))


Loader = Callable[[str | Path], Cluster]


def _hook_policy(ctx: _Ctx, hooks: Hooks) -> None:
    """hooks.checks is judged when the inventory loads (not first on a node, where a bad key falls back to the
    defaults with a warning), and the epilog's active stage must fit in PrologEpilogTimeout: past it slurmd kills the
    epilog and drains the node "Epilog error" (slurm.conf(5) PrologEpilogTimeout, 22.05 and 24.11)."""
    from slurmkit.health.policy import parse_policy

    policy = parse_policy(hooks.checks, source=ctx.source)
    ea = policy.epilog_active
    if ea is not None and not hooks.epilog:
        # the stage runs only in slurmkit's epilog: without it the key would be silently inert
        raise ctx.err("hooks.checks.epilog_active", "is set but hooks.epilog is false: only slurmkit's epilog "
                      "runs the active stage (set hooks.epilog: true, or drop epilog_active)")
    if ea is not None and hooks.epilog:
        need = ea.budget_s + policy.budget_s
        if need >= hooks.prolog_epilog_timeout:
            raise ctx.err("hooks.checks.epilog_active.budget_s",
                          f"{ea.budget_s:g}s + the hook's budget_s {policy.budget_s:g}s must stay below "
                          f"hooks.prolog_epilog_timeout ({hooks.prolog_epilog_timeout}s): past it slurmd kills the "
                          "epilog and drains the node 'Epilog error'")
