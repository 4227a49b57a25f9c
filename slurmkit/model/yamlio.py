"""YAML the way slurmkit reads every file a person writes (inventory, site overlay, health policy).

Safe loading, libyaml's parser when present (~7x faster on a 100k-node inventory), and YAML 1.2 booleans:
YAML 1.1 reads ``NO``, ``OFF``, ``on``, ``y`` as booleans, which turns Slurm values such as
``PreemptMode: OFF`` or ``OverSubscribe: NO`` into ``False``. Only ``true``/``false`` are booleans here; every
other word stays the string the admin wrote.

A key written twice in one mapping (``memory_mb`` twice in a node group) is an error naming the key path and
both lines: YAML 1.2 says keys are unique, PyYAML's loaders keep the last one silently.
"""

from __future__ import annotations

import re
from typing import IO, Any

import yaml

from slurmkit.errors import UsageError

_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL = "tag:yaml.org,2002:bool"


class DuplicateKeyError(yaml.YAMLError, UsageError):
    """A mapping with one key twice: ``path`` (``node_groups[0].memory_mb``) and the 1-based lines of both."""

    def __init__(self, path: str, first: int, second: int):
        self.path = path
        self.first = first
        self.second = second
        self.message = f"duplicate key (line {first} and line {second}); YAML keeps only one: remove one"
        UsageError.__init__(self, f"{path}: {self.message}")


def _join(path: str, key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Loader(_BASE):  # type: ignore[misc,valid-type]
    def construct_document(self, node: yaml.Node) -> Any:
        _check_unique_keys(self, node)
        return super().construct_document(node)


def _check_unique_keys(loader: Any, root: yaml.Node) -> None:
    """Walk the composed document once (each node once: an alias is not walked again, so an alias bomb costs
    nothing) and refuse a mapping that has a scalar key twice. Merge keys (``<<``) may be overridden: YAML's merge
    rule, not a duplicate."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[object, int] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.tag == "tag:yaml.org,2002:merge":
                        stack.append((v, path))
                        continue
                    key = loader.construct_object(k)
                    line = k.start_mark.line + 1
                    try:
                        if key in lines:
                            raise DuplicateKeyError(_join(path, key), lines[key], line)
                        lines[key] = line
                    except TypeError:  # an unhashable key: the constructor reports it
                        pass
                    stack.append((v, _join(path, key)))
                else:
                    stack.append((v, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, _join(path, i)) for i, v in enumerate(node.value))


Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in _BASE.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))

YAMLError = yaml.YAMLError


def load(source: str | IO[str]) -> Any:
    return yaml.load(source, Loader=Loader)  # noqa: S506 - Loader derives from the safe loader


def dump(data: Any) -> str:
    """YAML a person can edit and ``load`` reads back to the same values (block style, keys in order)."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1 << 16, allow_unicode=False)
