"""gpusub: one command from train.py to a placed, preemption-safe multi-node PyTorch / Megatron-LM job.

    gpusub [OPTIONS] SCRIPT [-- SCRIPT_ARGS...]      build, check and submit (or --dry-run)
    gpusub status JOB...   |  gpusub logs [-f] JOB  |  gpusub cancel JOB

The entry point. The commands (click) are in slurmkit/cli/gpusub_cmds.py, everything else in slurmkit.jobs, all
imported lazily. ``gpusub --help`` is click's own rendering of it, cached per user and keyed on what it depends on
(the commands' source, click's installed copy, the terminal width), so a repeated ``--help`` starts no click
(~30 ms of imports, most of its time).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    # A gpusub call is a short process that allocates tens of thousands of objects while it imports (click, Jinja2,
    # the model's dataclasses) and frees almost none: the cyclic collector's passes over them are pure cost (~5 ms
    # of a ~75 ms dry run, 61 interleaved runs). Reference counting still frees everything acyclic; the one long
    # phase, --follow / logs -f, turns the collector back on (_follow_and_exit).
    import gc

    gc.disable()
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--help"], ["-h"]):
        key, path = _help_key()
        text = _read_help(key, path) if key else None
        if text is not None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        from slurmkit.cli import gpusub_cmds

        if key:
            _write_help(key, path, gpusub_cmds.help_text())
        gpusub_cmds.main(args)  # click prints the help itself, the text just cached
        return
    from slurmkit.cli import gpusub_cmds

    gpusub_cmds.main(args)


def __getattr__(name: str) -> object:  # gpusub.submit_cmd, gpusub.status_cmd ...: the click commands
    if name.startswith("__"):
        raise AttributeError(name)
    from slurmkit.cli import gpusub_cmds

    return getattr(gpusub_cmds, name)


def _help_key() -> tuple[str, str]:
    """The cache key (empty when it cannot be told) and file. click's HelpFormatter wraps at
    max(min(shutil.get_terminal_size().columns, max_content_width) - 2, 50) (click/formatting.py), so the width
    is part of the key, as are the stats of the module holding the help strings and of click's installed copy."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("click")
        if spec is None or not spec.origin:
            return "", ""
        parts = []
        for f in (os.path.join(os.path.dirname(__file__), "gpusub_cmds.py"), spec.origin):
            st = os.stat(f)
            parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
    except (OSError, ImportError, ValueError):
        return "", ""
    width = terminal_columns()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return f"gpusub-help v1 width={width} " + " ".join(parts), os.path.join(base, "slurmkit", "gpusub-help.txt")


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` (what click asks), without importing shutil (its bz2/lzma/zlib
    imports cost more than the rest of a cached ``--help``): $COLUMNS when a positive integer, else the
    terminal's width on stdout, else 80 (Lib/shutil.py of CPython 3.9-3.13)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def _read_help(key: str, path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:  # only our own, unshared file
                return None
            first, _, text = fh.read().partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return text if first == key and text else None


def _write_help(key: str, path: str, text: str) -> None:
    """One entry (the last width asked); an atomic replace, so a concurrent reader sees the old or the new."""
    try:
        from slurmkit.safefs import makedirs_private

        makedirs_private(os.path.dirname(path))
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{key}\n{text}")
        os.replace(tmp, path)
    except OSError:
        pass


if __name__ == "__main__":
    main()
