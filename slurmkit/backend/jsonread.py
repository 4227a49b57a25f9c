"""Validated reading of JSON a Slurm command printed (``scontrol --json``, ``squeue --json``, ``sinfo --json``).

Root reads these on the controller (defrag, nodes, the exporter); a wrong type, a number that is not one, a
document nested past Python's recursion limit or a missing key must end in one line that names the command and
the field, never a traceback. Standard library only: every JSON parser in slurmkit (backend/parse.py and the job
record readers) imports it.

    doc = jsonread.loads(text, "scontrol --json show node")      # JSONReadError unless a JSON object
    for n in doc.items("nodes"):                                  # each a Reader at "nodes[i]"
        cpus = n.int("cpus")                                      # "...: nodes[2].cpus: expected an integer, got 1e400"
        name = n.str("name", required=True)                       # "...: nodes[0].name: missing"

Every getter takes a default for a key that is absent or ``null``; ``required=True`` makes absence an error. Getters
never coerce across kinds (a string where an integer belongs is an error, except where Slurm itself prints either:
``ident``). Non-finite (``1e400``, ``NaN``, ``Infinity``) and out-of-range numbers are errors, reported as the text
the command printed.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Iterator
from typing import Any

from slurmkit.errors import ParseError

__all__ = ["HOSTLIST_LIMIT", "INT_LIMIT", "JSONReadError", "Reader", "loads"]

# Slurm's integers are at most 64-bit (uint64_t/int64_t fields: NO_VAL64, INFINITE64); anything past that is not
# something a Slurm command printed.
INT_LIMIT = 2**64
_MAX_SHOWN = 40
# The most hosts one hostlist field may name (slurmkit's own bound on a list, model/load.py MAX_HOSTS): a job or node
# list past it is refused before it is expanded.
HOSTLIST_LIMIT = 1 << 20


class JSONReadError(ParseError):
    """JSON from a Slurm command that is not what it should be; one line: ``<command>: <field path>: <problem>``."""

    def __init__(self, what: str, path: str, message: str):
        self.what = what
        self.path = path
        self.message = message
        super().__init__(f"{what}: {path}: {message}" if path else f"{what}: {message}")


class _Unrepresentable(str):
    """A number the command printed that no float or int we accept can hold (``1e400``, 5,000 digits): kept as the
    printed text so that the error quotes it."""


def _parse_float(s: str) -> object:
    v = float(s)
    return v if math.isfinite(v) else _Unrepresentable(s)


def _parse_int(s: str) -> object:
    # CPython refuses int() of more than 4,300 digits with a ValueError (sys.int_info.str_digits_check_threshold);
    # 20 digits already pass 2**64.
    return int(s) if len(s.lstrip("-")) <= 20 else _Unrepresentable(s)


def _parse_constant(s: str) -> object:
    return _Unrepresentable(s)  # NaN, Infinity, -Infinity: Python's json accepts them, JSON has no such numbers


def _shown(v: object) -> str:
    if isinstance(v, _Unrepresentable):
        text = str(v)
    elif isinstance(v, dict):
        text = "an object"
    elif isinstance(v, list):
        text = "a list"
    elif isinstance(v, str):
        text = json.dumps(v)
    else:
        text = json.dumps(v)  # bool, int, float, None
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def loads(text: str | bytes, what: str) -> Reader:
    """Parse ``text`` (what ``what`` printed) into a Reader over its top-level object."""
    try:
        data = json.loads(text, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise JSONReadError(what, "", f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise JSONReadError(what, "", "not JSON slurmkit reads (nested deeper than Python's recursion limit)") from None
    except (ValueError, TypeError) as exc:  # undecodable bytes; anything else json refuses
        raise JSONReadError(what, "", f"not JSON ({' '.join(str(exc).split())[:80]})") from None
    if not isinstance(data, dict):
        raise JSONReadError(what, "", f"expected a JSON object at the top, got {_shown(data)}")
    return Reader(data, what, "")


class Reader:
    """One JSON object of a command's answer, and where it sits (``nodes[2]``) for the error messages."""

    __slots__ = ("path", "value", "what")

    def __init__(self, value: dict[str, Any], what: builtins.str, path: builtins.str):
        self.value = value
        self.what = what
        self.path = path

    # --- paths and errors ----------------------------------------------------------------------------------------

    def where(self, key: builtins.str | None = None) -> builtins.str:
        if key is None:
            return self.path
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: builtins.str | None, message: builtins.str) -> JSONReadError:
        return JSONReadError(self.what, self.where(key), message)

    def _expected(self, key: builtins.str | None, kind: builtins.str, got: object) -> JSONReadError:
        return self.error(key, f"expected {kind}, got {_shown(got)}")

    def _raw(self, key: builtins.str, required: builtins.bool) -> object:
        v = self.value.get(key)
        if v is None and required:
            raise self.error(key, "missing")
        return v

    def has(self, key: builtins.str) -> builtins.bool:
        return self.value.get(key) is not None

    # --- containers ------------------------------------------------------------------------------------------------

    def obj(self, key: builtins.str, *, required: builtins.bool = False) -> Reader:
        """The object under ``key``; an empty one when absent or null."""
        v = self._raw(key, required)
        if v is None:
            return Reader({}, self.what, self.where(key))
        if not isinstance(v, dict):
            raise self._expected(key, "an object", v)
        return Reader(v, self.what, self.where(key))

    def items(self, key: builtins.str, *, required: builtins.bool = False) -> list[Reader]:
        """The list of objects under ``key``, each a Reader at ``key[i]``; [] when absent or null."""
        out = []
        for i, v in self._list(key, required):
            if not isinstance(v, dict):
                raise self._expected(f"{key}[{i}]", "an object", v)
            out.append(Reader(v, self.what, self.where(f"{key}[{i}]")))
        return out

    def _list(self, key: builtins.str, required: builtins.bool) -> Iterator[tuple[int, object]]:
        v = self._raw(key, required)
        if v is None:
            return iter(())
        if not isinstance(v, list):
            raise self._expected(key, "a list", v)
        return enumerate(v)

    # --- scalars -----------------------------------------------------------------------------------------------

    def _int_of(self, key: builtins.str, v: object, default: builtins.int, lo: builtins.int | None) -> builtins.int:
        if v is None:
            return default
        if isinstance(v, bool) or isinstance(v, _Unrepresentable):
            raise self._expected(key, "an integer", v)
        if isinstance(v, float):
            if not v.is_integer():
                raise self._expected(key, "an integer", v)
            v = int(v)
        if not isinstance(v, int):
            raise self._expected(key, "an integer", v)
        if not -INT_LIMIT < v < INT_LIMIT or (lo is not None and v < lo):
            raise self._expected(key, "an integer Slurm prints" if lo is None else f"an integer >= {lo}", v)
        return v

    def int(self, key: builtins.str, default: builtins.int = 0, *, required: builtins.bool = False, lo: builtins.int | None = None) -> builtins.int:
        """An integer. data_parser (23.02+) writes some as ``{"set": bool, "infinite": bool, "number": N}``: an unset
        or infinite one reads as ``default``."""
        v = self._raw(key, required)
        if isinstance(v, dict):
            inner = Reader(v, self.what, self.where(key))
            if not inner.bool("set", False) or inner.bool("infinite", False):
                return default
            return inner._int_of("number", v.get("number"), default, lo)
        return self._int_of(key, v, default, lo)

    def bool(self, key: builtins.str, default: builtins.bool = False, *, required: builtins.bool = False) -> builtins.bool:
        v = self._raw(key, required)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._expected(key, "true or false", v)
        return v

    def str(self, key: builtins.str, default: builtins.str = "", *, required: builtins.bool = False) -> builtins.str:
        v = self._raw(key, required)
        if v is None:
            return default
        if not isinstance(v, str) or isinstance(v, _Unrepresentable):
            raise self._expected(key, "a string", v)
        return v

    def ident(self, key: builtins.str, default: builtins.str = "", *, required: builtins.bool = False) -> builtins.str:
        """An id Slurm prints as a number or a string (job_id: 12, or "12_3" where a release writes it so): as text."""
        v = self._raw(key, required)
        if v is None:
            return default
        if isinstance(v, str) and not isinstance(v, _Unrepresentable):
            return v
        return str(self._int_of(key, v, 0, 0))

    def strs(self, key: builtins.str, *, required: builtins.bool = False) -> tuple[builtins.str, ...]:
        """A list of strings, or one comma-separated string (22.05's ``features``, 23.02+'s list): the non-empty
        items."""
        v = self._raw(key, required)
        if v is None:
            return ()
        if isinstance(v, str) and not isinstance(v, _Unrepresentable):
            return tuple(x for x in v.split(",") if x and x != "(null)") if v != "(null)" else ()
        if not isinstance(v, list):
            raise self._expected(key, "a list of strings", v)
        out = []
        for i, x in enumerate(v):
            if not isinstance(x, str) or isinstance(x, _Unrepresentable):
                raise self._expected(f"{key}[{i}]", "a string", x)
            if x:
                out.append(x)
        return tuple(out)

    def str_or_strs(self, key: builtins.str, default: builtins.str = "", *, required: builtins.bool = False) -> list[builtins.str]:
        """A string or a list of strings (a state: 22.05 "IDLE", 23.02+ ["IDLE", "DRAIN"]): as a list."""
        v = self._raw(key, required)
        if v is None:
            return [default] if default else []
        if isinstance(v, str) and not isinstance(v, _Unrepresentable):
            return [v] if v else []
        return list(self.strs(key))

    def hostlist(self, key: builtins.str, *, required: builtins.bool = False) -> tuple[builtins.str, ...]:
        """A Slurm hostlist string (``node[1-4]``), expanded; () when absent, empty or ``(null)``. A hostlist that
        does not parse is an error at this field."""
        from slurmkit import hostlist
        from slurmkit.errors import SlurmkitError

        v = self.str(key, required=required)
        if not v or v in ("(null)", "None"):
            return ()
        try:
            return tuple(hostlist.expand(v, limit=HOSTLIST_LIMIT))
        except SlurmkitError as exc:
            raise self.error(key, f"not a hostlist: {exc.one_line()}") from None
