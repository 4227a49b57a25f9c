"""The interpreter a job will run under: does it exist here, and which torch does it have (cheap, cached).

gpusub pins the interpreter it runs under (``sys.executable``, as submitit does) unless ``--python`` names another
or a container image is given (then the image's ``python3``). Its torch version decides torchrun flags and
environment names (``torchcompat``). Finding it means asking that interpreter for ``importlib.metadata`` of torch
(no ``import torch``: that takes seconds); the answer is cached per user, keyed by the interpreter path and
validated by the mtimes of the interpreter and of every directory on its ``sys.path``: a ``pip install``
(which adds or removes a ``*.dist-info`` directory) or a rebuilt venv invalidates it, a hit costs a few stat calls.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PROBE = (
    "import json, os, sys\n"
    "try:\n"
    "    from importlib.metadata import version, PackageNotFoundError\n"
    "    try:\n"
    "        v = version('torch')\n"
    "    except PackageNotFoundError:\n"
    "        v = None\n"
    "except Exception:\n"
    "    v = None\n"
    "print(json.dumps({'torch': v, 'paths': [p for p in sys.path if p and os.path.isdir(p)]}))\n"
)


@dataclass(frozen=True)
class Interpreter:
    path: str
    exists: bool
    torch_version: str | None = None
    probed: bool = False  # False: not probed (container image, missing, or the probe failed)
    error: str = ""


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slurmkit" / "interpreters.json"


def _stamp(paths: list[str]) -> list[list[object]]:
    out: list[list[object]] = []
    for p in paths:
        try:
            out.append([p, os.stat(p).st_mtime_ns])
        except OSError:
            out.append([p, None])
    return out


def _load() -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(data: dict[str, dict[str, Any]]) -> None:
    p = cache_file()
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(p.parent)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, p)
    except OSError:
        pass  # a cache only


def probe(python: str, timeout: float = 20.0) -> Interpreter:
    """Existence and torch version of ``python`` (an absolute path or a name looked up on PATH)."""
    path = python
    if "/" not in python:
        from shutil import which

        found = which(python)
        if found is None:
            return Interpreter(python, exists=False, error="not found on PATH")
        path = found
    if not os.access(path, os.X_OK) or os.path.isdir(path):
        return Interpreter(python, exists=False, error="no such executable")
    data = _load()
    entry = data.get(path)
    if entry is not None:
        try:
            exe_mtime = os.stat(path).st_mtime_ns
        except OSError:
            exe_mtime = None
        try:
            paths = [str(x[0]) for x in entry.get("stamps", [])]
            if entry.get("exe") == exe_mtime and _stamp(paths) == entry.get("stamps"):
                return Interpreter(python, exists=True, torch_version=entry.get("torch"), probed=True)
        except (TypeError, IndexError, AttributeError):
            pass  # a damaged entry: probe again
    if os.path.abspath(path) == os.path.abspath(sys.executable):
        # the interpreter gpusub runs under: ask in-process (no second interpreter start)
        from importlib.metadata import PackageNotFoundError, version

        try:
            torch_v: str | None = version("torch")
        except PackageNotFoundError:
            torch_v = None
        paths = [p for p in sys.path if p and os.path.isdir(p)]
    else:
        from slurmkit.backend.run import run

        try:
            res = run([path, "-c", _PROBE], timeout=timeout, check=False)
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run leaves the version unknown
            return Interpreter(python, exists=True, error=f"probe failed: {exc}")
        if res.rc != 0:
            return Interpreter(python, exists=True, error=f"probe exited {res.rc}")
        try:
            got = json.loads(res.stdout.strip().splitlines()[-1])
            torch_v, paths = got.get("torch"), list(got.get("paths", []))
        except (ValueError, IndexError, AttributeError):
            return Interpreter(python, exists=True, error="probe printed no answer")
    try:
        exe_mtime = os.stat(path).st_mtime_ns
    except OSError:
        exe_mtime = None
    data[path] = {"torch": torch_v, "exe": exe_mtime, "stamps": _stamp(paths)}
    _save(data)
    return Interpreter(python, exists=True, torch_version=torch_v, probed=True)
