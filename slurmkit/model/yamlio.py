"""YAML the way slurmkit reads every file a person writes (inventory, site overlay, health policy).

Safe loading, libyaml's parser when present (~7x faster on a 100k-node inventory), and YAML 1.2 booleans:
YAML 1.1 reads ``NO``, ``OFF``, ``on``, ``y`` as booleans, which turns Slurm values such as
``PreemptMode: OFF`` or ``OverSubscribe: NO`` into ``False``. Only ``true``/``false`` are booleans here; every
other word stays the string the admin wrote.
"""

from __future__ import annotations

import re
from typing import IO, Any

import yaml

_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL = "tag:yaml.org,2002:bool"


class Loader(_BASE):  # type: ignore[misc,valid-type]
    pass


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
