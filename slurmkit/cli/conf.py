"""`slurmkit conf generate|validate|diff|apply|drift` and `slurmkit discover`: small commands over
``slurmkit.generate`` and ``slurmkit.discover``. Exit codes: 0 ok, 1 drift/validation findings on a
running cluster, 2 bad input or invalid config (nothing written), 3 apply refused (disruptive plan)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from slurmkit.errors import SlurmkitError, UsageError

_version = click.option("--slurm-version", "version", default=None,
                        help="Target Slurm release (22.05 ... 26.05); default: the inventory's slurm_version.")
_templates = click.option("--templates", type=click.Path(file_okay=False, exists=True), default=None,
                          help="Site template directory searched before the shipped conf_templates/.")
_overrides = click.option("--overrides", type=click.Path(dir_okay=False, exists=True), default=None,
                          help="Site overlay YAML (slurm_conf, cgroup_conf, node_params, gres_file_prefix).")
_no_real = click.option("--no-real-parse", is_flag=True, help="Static checks only; skip the slurmctld parse.")
_rewrite = click.option("--rewrite", is_flag=True,
                        help="An adopted (imported) site: write slurmkit's own layout of every file instead of editing "
                             "the site's files in place (by default only the lines the plan changes differ; comments, "
                             "order and Include files stay).")


def _site_release(version: str | None, slurm_conf: str) -> tuple[str | None, str]:
    """The release a site directory is judged for, one rule for `conf import` and `conf validate`: --slurm-version,
    else the target in a slurmkit header of slurm.conf, else this host's slurmctld (slurmctld -V); (None, "") when
    none says. -> (release, the note saying where it came from). Judging a site by the wrong release names good keys
    "not carried" (a 24.11 site's PreemptParameters read as 22.05), or no release at all skips every per-release rule."""
    from slurmkit.backend.roots import host_release
    from slurmkit.generate.confparse import header_version

    if version:
        return version, ""
    ver = header_version(slurm_conf)
    if ver:
        return ver, (f"judged for Slurm {ver}, the target in slurm.conf's slurmkit header (--slurm-version to "
                     "change)")
    ver = host_release()
    if ver:
        return ver, f"judged for Slurm {ver}, this host's slurmctld (--slurm-version to change)"
    return None, ""


def _release_arg(version: str) -> str:
    """A --slurm-version (or an inventory's slurm_version) as a supported target release, else a usage error (exit 2)
    naming the flag: an unknown release's keys and plugins are not in the tables."""
    from slurmkit.generate.versions import features_for
    from slurmkit.release import SUPPORTED_SLURM_VERSIONS

    try:
        ver = features_for(version).version
    except ValueError as exc:
        msg = str(exc) if "Slurm" in str(exc) or "version" in str(exc) else f"{version!r} is not a Slurm release (YY.MM)"
        raise click.BadParameter(msg, param_hint="--slurm-version") from exc
    if ver not in SUPPORTED_SLURM_VERSIONS:  # a release newer than the tables: its keys and plugins are unknown
        raise click.BadParameter(f"unsupported Slurm version {version}; supported: "
                                 f"{', '.join(SUPPORTED_SLURM_VERSIONS)}", param_hint="--slurm-version")
    return ver


def _render(inventory: str, version: str | None, conf_dir: str, templates: str | None,
            overrides: str | None) -> tuple[object, dict[str, str], str]:
    """-> (cluster, files incl. the inventory copy slurmkit.yaml, target version)."""
    from slurmkit.generate.slurmconf import generate, load_overrides
    from slurmkit.model.load import load_cluster

    cluster = load_cluster(inventory)
    ver = _release_arg(version or cluster.slurm_version)
    ov = load_overrides(overrides) if overrides else None
    files = generate(cluster, version=ver, conf_dir=conf_dir, overrides=ov, templates=templates)
    # the inventory copy beside slurm.conf: the hook wrappers exec `slurmkit hook KIND --inventory
    # <conf_dir>/slurmkit.yaml`, and gpusub / `slurmkit report` find it beside $SLURM_CONF (slurmkit/siteinv.py)
    files["slurmkit.yaml"] = Path(inventory).read_text()
    return cluster, files, ver


def _report(rep: object, quiet: bool = False) -> None:
    for w in rep.warnings:  # type: ignore[attr-defined]
        click.echo(f"warning: {w}", err=True)
    for e in rep.errors:  # type: ignore[attr-defined]
        click.echo(f"error: {e}", err=True)
    if not quiet:
        click.echo(f"real parse: {rep.real}", err=True)  # type: ignore[attr-defined]


def _validated(files: dict[str, str], ver: str, real: bool, cluster: object = None) -> object:
    from slurmkit.backend.realparse import validate
    from slurmkit.errors import ConfigValidationError

    rep = validate({k: v for k, v in files.items() if k != "slurmkit.yaml"}, ver, real=real)
    if cluster is not None:
        from slurmkit.generate.tenantcheck import cross_check

        errs, warns = cross_check(cluster, files["slurm.conf"])  # type: ignore[arg-type]
        rep.errors.extend(errs)
        rep.warnings.extend(warns)
    _report(rep)
    if not rep.ok:
        # every finding is listed above, once; the closing line only counts them
        n = len(rep.errors)
        raise ConfigValidationError([f"invalid configuration: {n} problem{'s' if n != 1 else ''} listed above; nothing written"
                                     if n else rep.real])
    return rep


@click.group()
def conf() -> None:
    """Slurm config from an inventory: generate, validate, diff, apply, drift."""


@conf.command()
@click.argument("inventory", type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", "out", type=click.Path(file_okay=False), help="Directory to write into.")
@click.option("--conf-dir", default=None,
              help="Where the files will be installed on the cluster (the hook paths in slurm.conf point there); "
                   "default: $SLURM_CONF's directory, else /etc/slurm.")
@_version
@_templates
@_overrides
@click.option("--dry-run", is_flag=True, help="Print the files; write nothing.")
@_no_real
def generate(inventory: str, out: str | None, conf_dir: str | None, version: str | None, templates: str | None,
             overrides: str | None, dry_run: bool, no_real_parse: bool) -> None:
    """Render slurm.conf, gres.conf, cgroup.conf, topology.conf|yaml; validate; write atomically."""
    from slurmkit.generate import EXECUTABLE_FILES
    from slurmkit.generate.rollout import write_files

    if not out and not dry_run:
        raise click.UsageError("give -o DIR (or --dry-run)")
    # the paths slurmd runs (Prolog, Epilog, HealthCheckProgram, power programs) are those of the directory the
    # files are installed in, not of -o: a copy of out/ to /etc/slurm must not point every node at out/ (issue 20)
    where = conf_dir or installed_dir()
    cluster, files, ver = _render(inventory, version, where, templates, overrides)
    if any(n.startswith("slurmkit-") for n in files):
        click.echo(f"note: hook paths assume the files are installed in {where} (--conf-dir to change)", err=True)
    _validated(files, ver, real=not no_real_parse, cluster=cluster)
    if dry_run:
        for name, body in files.items():
            click.echo(f"==> {name} <==")
            click.echo(body, nl=False)
        return
    assert out is not None
    stale = _stale(out, files)
    backup = write_files(files, out, executable=EXECUTABLE_FILES, remove=stale)
    for name in files:
        click.echo(f"wrote {Path(out) / name}")
    for name in stale:
        click.echo(f"removed {Path(out) / name} (not in the new config)")
    if backup:
        click.echo(f"previous files saved in {backup}")


def installed_dir() -> str:
    """Where Slurm reads its files on this cluster: $SLURM_CONF's directory, else /etc/slurm."""
    import os

    conf = os.environ.get("SLURM_CONF")
    return str(Path(conf).resolve().parent) if conf else "/etc/slurm"


@conf.command()
@click.argument("path", type=click.Path(exists=True))
@_version
@_templates
@_overrides
@_no_real
def validate(path: str, version: str | None, templates: str | None, overrides: str | None, no_real_parse: bool) -> int:
    """Check a config DIR (or the files an INVENTORY renders): cross-file checks + a real slurmctld parse."""
    from slurmkit.backend.realparse import validate as run_validate
    from slurmkit.generate.rollout import read_dir

    cluster: object = None
    inv: str | None = None
    if Path(path).is_dir():
        _warn_pending(path)  # the findings below may only be the half-swapped set
        from slurmkit.adopt.read import read_site

        files, notes, _d = read_site(path)  # slurm.conf's Include files too, resolved as Slurm resolves them
        for note in notes:
            click.echo(f"note: {note}", err=True)
        # acct_gather.conf is slurmctld's to read too (src/interfaces/acct_gather.c: a key no loaded plugin owns is
        # fatal at start), so the real parse judges the site's copy of it as it does a generated one
        files.update(read_dir(path, ["acct_gather.conf"]))
        inv = read_dir(path, ["slurmkit.yaml"]).get("slurmkit.yaml")
        if "slurm.conf" not in files:
            raise click.UsageError(f"{path} has no slurm.conf")
        site_ver, how = _site_release(version, files["slurm.conf"])
        ver = _release_arg(site_ver) if site_ver else None
        if how:
            click.echo(f"note: {how}", err=True)
        if ver is None:
            click.echo("note: judged without a target release (no --slurm-version, no slurmkit header in "
                       "slurm.conf, no slurmctld here): per-release rules and advice need --slurm-version", err=True)
        if inv is not None:
            from slurmkit.model.load import load_cluster_text

            cluster = load_cluster_text(inv, str(Path(path) / "slurmkit.yaml"))
    else:
        cluster, files, ver = _render(path, version, "/etc/slurm", templates, overrides)
        files.pop("slurmkit.yaml", None)
    rep = run_validate(files, ver, real=not no_real_parse)
    if cluster is not None:
        from slurmkit.generate.tenantcheck import cross_check

        errs, warns = cross_check(cluster, files["slurm.conf"])  # type: ignore[arg-type]
        rep.errors.extend(errs)  # type: ignore[attr-defined]
        rep.warnings.extend(warns)  # type: ignore[attr-defined]
    _report(rep)
    if getattr(cluster, "adopted", False):
        _advice(inv if Path(path).is_dir() else Path(path).read_text(), ver)
    elif cluster is None and ver:
        # a directory slurmkit did not write: the advice is for the inventory `conf import` writes from it
        from slurmkit.adopt.importer import import_site
        from slurmkit.model import yamlio

        imported = import_site(files, ver)
        if imported.lost:
            click.echo(f"advice: not computed: `conf import` cannot carry {imported.lost[0]}", err=True)
        else:
            _advice(yamlio.dump(imported.inventory), ver,
                    f"note: the advice's edits are to the inventory `slurmkit conf import {path}` writes")
    if rep.ok:
        click.echo(f"ok: {len(files)} files consistent" + (f" (Slurm {ver})" if ver else ""))
        return 0
    click.echo(f"invalid: {len(rep.errors) or 1} problem(s)", err=True)
    return 2


def _advice(inventory_text: str | None, ver: str | None, note: str = "") -> None:
    """slurmkit's recommendations an adopted site lacks (generate/advice.py): one line each with the inventory edit
    that applies it and the rollout class it needs; advice, never a finding (the exit code stays the verdict's)."""
    from slurmkit.generate.advice import advise
    from slurmkit.model import yamlio

    data = yamlio.load(inventory_text or "")
    if not isinstance(data, dict):
        return
    from slurmkit.errors import SlurmkitError

    try:
        found = advise(data, ver)
    except SlurmkitError as exc:  # the inventory copy cannot render for this release: the findings above say why
        click.echo(f"advice: not computed: {exc}", err=True)
        return
    if found and note:
        click.echo(note, err=True)
    for a in found:
        click.echo(f"advice: {a.line()}", err=True)


def _stale(directory: str, files: dict[str, str]) -> list[str]:
    """Files slurmkit wrote into DIR earlier that the new config no longer has (removed, with a backup); a
    file of the same name that slurmkit did not write is left alone, with a warning."""
    from slurmkit.generate.rollout import stale_files

    ours, foreign = stale_files(directory, files)
    for name in foreign:
        click.echo(f"warning: {Path(directory) / name} is not in the new config and was not written by slurmkit; "
                   "left in place" + (" (Slurm 25.05+ loads topology.yaml whenever it exists)" if name == "topology.yaml" else ""),
                   err=True)
    return ours


def _warn_pending(directory: str) -> None:
    """One line when an interrupted write (an apply killed mid-swap) left DIR with a mix of old and new files."""
    from slurmkit.generate.rollout import FOREIGN, TXN_DIR, pending

    state = pending(directory)
    if state == FOREIGN:
        click.echo(f"warning: {Path(directory) / TXN_DIR} was not left by slurmkit's writer (a symlink, a file or "
                   "another user's directory): writes to the directory are refused until it is removed", err=True)
    elif state:
        click.echo(f"warning: an interrupted write is pending in {directory} ({state}); the next "
                   "`slurmkit conf apply` finishes it before anything else", err=True)


def _diff(inventory: str, directory: str, version: str | None, templates: str | None, overrides: str | None,  # type: ignore[no-untyped-def]
          against_base: bool = False, rewrite: bool = False):
    """-> (cluster, files, version, changes, stale, pending journal). While a rollout is pending in DIR (files
    written, steps not all done) the cluster may still run the files from before it: apply plans against those
    (``against_base``); diff compares with the files in DIR and says what is pending."""
    from slurmkit.elastic.execute import load_journal, remaining
    from slurmkit.generate.rollout import MANAGED_FILES, read_dir, semantic_diff

    _warn_pending(directory)
    journal = load_journal(directory)
    cluster, files, ver = _render(inventory, version, str(Path(directory).resolve()), templates, overrides)
    current = dict(journal["base"]) if journal and against_base else read_dir(directory)
    if journal:
        click.echo(f"warning: a rollout is pending in {directory} ({remaining(journal)}): the cluster may still run "
                   "the files from before it" + ("; the changes below are against those" if against_base else
                                                 "; `slurmkit conf apply --execute` finishes it"), err=True)
    stale = _stale(directory, files)
    for name in [n for n in current if n not in files and n not in stale and n in MANAGED_FILES]:
        current.pop(name)  # not ours: apply leaves it, so the diff must not report it forever
    if not (journal and against_base):
        from slurmkit.adopt.read import CONFIG_FILES, read_site

        # the files slurm.conf's Include lines name (a hand-written site splits nodes.conf, partitions.conf ...)
        included, _notes, _d = read_site(directory)
        current.update({k: v for k, v in included.items() if k not in CONFIG_FILES})
    kept: dict[str, str] = {}
    if getattr(cluster, "adopted", False) and not rewrite:
        # an adopted site keeps its own files: the plan is carried into them as line edits (adopt/inplace.py), its
        # comments, blank lines, order and Include split kept; --rewrite writes slurmkit's layout instead
        from slurmkit.adopt.inplace import CannotEdit, edit_site
        from slurmkit.adopt.read import read_site as _read_site

        site = read_dir(directory)
        site_included, _n, _dd = _read_site(directory)
        site.update(site_included)
        if "slurm.conf" in site:
            try:
                files = edit_site(site, files, ver)
                # the Include files apply leaves as they are (those outside DIR, by an absolute path, among them:
                # a ParallelCluster head node's /opt/slurm/etc/pcluster/...) are read after it as before
                kept = {k: v for k, v in site.items() if k not in files and k not in MANAGED_FILES}
            except CannotEdit as exc:
                if against_base:  # apply: nothing written (one line: file, line, --rewrite)
                    raise
                # diff: the plan is the same either way; say what apply will refuse
                click.echo(f"warning: {exc}", err=True)
    compared = {**kept, **files}
    base = dict(current)
    if getattr(cluster, "adopted", False):
        # an adopted site's files are what its inventory says; the inventory copy beside them is slurmkit's own
        # bookkeeping (the next apply writes it), no change to the cluster
        compared.pop("slurmkit.yaml", None)
        base.pop("slurmkit.yaml", None)
    return cluster, files, ver, semantic_diff(base, compared, ver), stale, journal


def _print_plan(changes: list, ver: str) -> None:  # type: ignore[type-arg]
    from slurmkit.generate.rollout import plan

    for c in changes:
        click.echo(c.line())
    click.echo("rollout plan:")
    for step in plan(changes, ver):
        click.echo(f"  {step}")


@conf.command()
@click.argument("inventory", type=click.Path(dir_okay=False, exists=True))
@click.option("--against", "against", required=True, type=click.Path(file_okay=False, exists=True),
              help="Directory with the files in use now.")
@_version
@_templates
@_overrides
@click.option("--exit-code", is_flag=True, help="Exit 1 when something changes, 0 when nothing does (as git diff "
                                                 "--exit-code); bad input is 2 either way.")
@_rewrite
@click.option("--files", "show_files", is_flag=True,
              help="Also print the unified diff (diff -u) of each file `conf apply` would write against DIR's.")
def diff(inventory: str, against: str, version: str | None, templates: str | None, overrides: str | None,
         exit_code: bool, rewrite: bool, show_files: bool) -> int:
    """What changes if INVENTORY is applied to DIR, what each change needs, and in what order. Where DIR is the
    config this host runs ($SLURM_CONF's directory, /etc/slurm, a lab's) and slurmctld has not loaded its
    slurm.conf, says so: files that match the inventory are not a cluster in sync."""
    c, _files, ver, changes, _stale_names, _j = _diff(inventory, against, version, templates, overrides,
                                                      rewrite=rewrite)
    if show_files:
        _print_file_diffs(against, _files)
    loaded = _running_mismatch(against, c) if _is_live(against) else None
    if loaded and not changes:
        click.echo(loaded)
        click.echo("rollout plan:")
        click.echo("  1. scontrol reconfigure (the files in DIR already match the inventory; slurmctld runs older ones)")
        return 1 if exit_code else 0
    if loaded:
        click.echo(f"warning: {loaded}", err=True)
    _print_plan(changes, ver)
    return 1 if exit_code and changes else 0


def _print_file_diffs(directory: str, files: dict[str, str]) -> None:
    """``diff -u DIR/NAME new/NAME`` of every file that would change (the inventory copy aside); a password line
    (slurmdbd.conf StoragePass, acct_gather.conf's) shows that it changes, never its value."""
    import difflib

    from slurmkit.generate.sidekeys import mask_secrets

    for name in sorted(files):
        if name == "slurmkit.yaml":
            continue
        path = Path(directory) / name
        old = path.read_text(errors="replace") if path.is_file() else ""
        if old == files[name]:
            continue
        a, b = mask_secrets(old), mask_secrets(files[name])
        click.echo("".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                                str(path) if old else "/dev/null", f"new/{name}")), nl=False)


def _own_sections(conf_dir: Path) -> dict[str, object]:
    """slurmkit's own sections of the inventory copy a slurmkit-written directory holds (hooks, submit policy,
    gpusub site defaults, rollout commands): the hook wrappers and job_submit.lua there read them, and no Slurm
    file says them."""
    from slurmkit.model import yamlio

    p = conf_dir / "slurmkit.yaml"
    if not p.is_file():
        return {}
    try:
        data = yamlio.load(p.read_text())
    except (OSError, yamlio.YAMLError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in ("hooks", "submit_policy", "site", "rollout") if k in data}


@conf.command(name="import")
@click.argument("path", type=click.Path(exists=True))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
              help="Inventory file to write (default: print it).")
@click.option("--slurm-version", "version", default=None,
              help="The release the site runs (the inventory's slurm_version). Default: the target in a slurmkit "
                   "header of slurm.conf, else this host's Slurm (slurmctld -V).")
def import_(path: str, out: str | None, version: str | None) -> int:
    """An inventory holding the site whose config is PATH (a directory or a slurm.conf, with its Include files,
    gres.conf, cgroup.conf, topology.conf, and slurmdbd.conf, plugstack.conf, job_container.conf, acct_gather.conf
    beside it), adopted as is. Exit 1 if something could not be carried (each named
    with its file and line); the inventory is still written."""
    from slurmkit.adopt.importer import import_site
    from slurmkit.adopt.read import read_site
    from slurmkit.adopt.sidefiles import SIDE_FILES, site_comments
    from slurmkit.errors import InventoryError, UsageError
    from slurmkit.generate.slurmconf import generate
    from slurmkit.model import yamlio
    from slurmkit.model.load import load_cluster_text

    files, notes, _d = read_site(path)
    if "slurm.conf" not in files:
        raise UsageError(notes[0] if notes else f"{path}: no slurm.conf")
    site_ver, how = _site_release(version, files["slurm.conf"])  # the same rule as `conf validate`
    if site_ver is None:
        raise UsageError("--slurm-version: not given, slurm.conf names no target and no slurmctld here to "
                         "ask: name the release the site runs (e.g. --slurm-version 24.11)")
    if how:
        notes.append(how)
    ver = _release_arg(site_ver)
    conf_dir = Path(path) if Path(path).is_dir() else Path(path).parent
    unread = []
    for name in SIDE_FILES:  # the files beside slurm.conf that `conf generate` writes too (adopt/sidefiles.py)
        if (conf_dir / name).is_file():
            try:
                files[name] = (conf_dir / name).read_text(errors="replace")
            except OSError as exc:  # slurmdbd.conf is mode 600, its SlurmUser's: one line, the rest imported
                unread.append(f"{conf_dir / name}: cannot read it ({exc.strerror or exc}): not imported (run as a user "
                              "who can, e.g. root)")
    res = import_site(files, ver, _own_sections(conf_dir))
    res.lost += unread
    text = yamlio.dump(res.inventory)
    try:
        # loaded, then generated for the target release: a value that release refuses (a removed plugin, ...)
        # makes the inventory unusable there, which `conf diff` would only find later
        regenerated = generate(load_cluster_text(text, source=out or "<import>"), version=ver)
        res.notes += site_comments(files, regenerated)
    except InventoryError as exc:
        res.lost.append(f"inventory {exc.path}: {exc.message}")
    for n in notes + res.notes:
        click.echo(f"note: {n}", err=True)
    for line in res.lost:
        click.echo(f"not carried: {line}", err=True)
    if out:
        try:
            Path(out).write_text(text)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from exc
        click.echo(f"wrote {out}: {len(res.inventory.get('node_groups', []))} node groups, "
                   f"{len(res.inventory.get('partitions', []))} partitions" +
                   (f"; {len(res.lost)} thing(s) not carried, listed above" if res.lost else ""), err=True)
    else:
        click.echo(text, nl=False)
    return 1 if res.lost else 0


def _nodes_locked(fn):  # type: ignore[no-untyped-def]
    """Hold the lock of `nodes add|remove` (elastic/change.py ``locked``: a flock beside the inventory copy in the
    config dir) around ``fn``: `conf apply` writes the same files and inventory copy, so without it an apply and a
    node change (or two admins' applies) could each write over the other's. Waits --lock-wait, then refuses (exit
    1, naming the holder; nothing changed)."""
    import functools

    @functools.wraps(fn)
    def run(*args, to: str, lock_wait: float, **kw):  # type: ignore[no-untyped-def]
        import shlex

        from slurmkit.elastic.change import locked

        Path(to).mkdir(parents=True, exist_ok=True)
        command = "slurmkit " + " ".join(shlex.quote(a) for a in sys.argv[1:])[:200]
        with locked(Path(to), command, lock_wait, lambda m: click.echo(m, err=True)):
            return fn(*args, to=to, **kw)

    return click.option("--lock-wait", default=60.0, show_default=True, type=click.FloatRange(0),
                        help="Seconds to wait while a `nodes add|remove` or another `conf apply` changes DIR "
                             "(0: refuse at once).")(run)


def _is_live(directory: str) -> bool:
    """Whether ``directory`` holds the config a controller here runs: $SLURM_CONF's, /etc/slurm, or a lab's."""
    from slurmkit.lab.elastic import lab_for_conf

    d = Path(directory).resolve()
    return d == _conf_dir_in_use().resolve() or lab_for_conf(d / "slurm.conf") is not None


@conf.command()
@click.argument("inventory", type=click.Path(dir_okay=False, exists=True))
@click.option("--to", "to", required=True, type=click.Path(file_okay=False), help="Config directory to update.")
@click.option("--reconfigure", is_flag=True,
              help="Run `scontrol reconfigure` after writing (refused when the plan needs restarts: use --execute).")
@click.option("--execute", is_flag=True,
              help="Carry out the plan's steps one at a time, each checked: drain and wait, stop/start slurmctld "
                   "(state kept), restart slurmd (the inventory's rollout.restart_slurmd), reconfigure, verify, "
                   "resume. A run that stops is finished by the next --execute.")
@click.option("--allow-disruptive", is_flag=True,
              help="Go ahead when the plan needs restarts or drained nodes (without --execute: do those steps yourself).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="With --execute: seconds a step may wait (jobs to end on drained nodes, a daemon to answer).")
@_version
@_templates
@_overrides
@_no_real
@_rewrite
@_nodes_locked
def apply(inventory: str, to: str, reconfigure: bool, execute: bool, allow_disruptive: bool, timeout: float,
          version: str | None, templates: str | None, overrides: str | None, no_real_parse: bool,
          rewrite: bool) -> int:
    """Validate, back up, write atomically; with --execute carry out the printed plan."""
    from slurmkit.elastic.execute import clear_journal, files_hash, new_journal, save_journal, steps_of
    from slurmkit.generate import EXECUTABLE_FILES
    from slurmkit.generate.rollout import (
        COPY_STATE,
        PUSH,
        RECONFIGURE,
        RESTART_CTLD,
        RESTART_SLURMD,
        START_CTLD,
        STOP_CTLD,
        WRITE,
        WriteError,
        plan_steps,
        recover,
        worst,
        write_files,
    )

    Path(to).mkdir(parents=True, exist_ok=True)
    try:
        done = recover(to)  # an apply killed half-way: finish it before diffing against the directory
    except OSError as exc:
        raise WriteError(Path(to), exc) from exc
    if done:
        click.echo(f"{to}: {done}")
    cluster, files, ver, changes, stale, journal = _diff(inventory, to, version, templates, overrides, against_base=True,
                                                            rewrite=rewrite)
    keep = cluster.rollout.keep_backups  # type: ignore[attr-defined]
    base = dict(journal["base"]) if journal else _current(to)
    if journal and journal["files"] == files_hash(files):
        steps = steps_of(journal)  # the same change: carry on where the interrupted run stopped
        run = journal
    else:
        steps = plan_steps(changes, ver)
        if journal and not steps:  # back to the files the cluster ran before: redo the interrupted run's steps
            steps = steps_of(journal)
        run = new_journal(steps, files, base, ver, drained=journal["drained"] if journal else ())
    _print_plan(changes, ver)
    if journal and run is journal:
        click.echo(f"resuming the pending rollout at step {journal['done'] + 1} of {len(steps)}")
    if not steps:
        return 0
    from slurmkit.generate.sidekeys import OVERLAY_SECTION, lost_secrets

    lost = lost_secrets(base, files)
    if lost:
        name, line, key = lost[0]
        raise UsageError(f"{Path(to) / name}:{line}: {key} would be removed (the inventory carries no password); "
                         f"give it in the --overrides file ('{OVERLAY_SECTION[name]}: {{{key}: ...}}'); nothing "
                         "written")
    _validated(files, ver, real=not no_real_parse, cluster=cluster)
    level = worst(changes)
    if level not in (RECONFIGURE, PUSH) and not allow_disruptive:
        click.echo(f"refusing to write: the plan needs '{level}' steps; " + (
            "rerun with --allow-disruptive to carry them out" if execute else
            "follow them and rerun with --allow-disruptive (or --execute --allow-disruptive)"), err=True)
        return 3
    daemon_steps = [(i, s) for i, s in enumerate(steps, 1) if s.kind in (STOP_CTLD, START_CTLD, RESTART_CTLD, RESTART_SLURMD)]
    if reconfigure and not execute and daemon_steps:
        i, s = daemon_steps[0]
        click.echo(f"refusing: --reconfigure cannot carry this plan (step {i}: {_head(s.text)}; a reconfigure "
                   "where a restart is needed can kill slurmctld); use --execute, or write without --reconfigure and "
                   "do the steps yourself", err=True)
        return 3
    manual = [(i, s) for i, s in enumerate(steps, 1) if s.kind == COPY_STATE]
    if execute and manual:
        i, s = manual[0]
        click.echo(f"refusing: --execute cannot carry this plan: step {i} is by hand "
                   f"(copy {s.text.split(':', 1)[1].split(', owned')[0].strip()}); follow the plan yourself", err=True)
        return 3
    from slurmkit.generate.rollout import keep_line_ends

    files = keep_line_ends(files, to)  # a site's CRLF file stays CRLF: only the lines the plan needs change
    if execute:
        return _execute(cluster, files, to, stale, steps, run, timeout, keep)
    written = next(i for i, s in enumerate(steps, 1) if s.kind == WRITE)
    run["done"] = max(int(run["done"]), written - 1)  # the steps before the write were the admin's (refusal above)
    save_journal(Path(to), run)  # before the write: a kill after it must not hide the steps that remain
    try:
        backup = write_files(files, to, executable=EXECUTABLE_FILES, remove=stale, keep=keep)
    except WriteError:
        if journal:
            save_journal(Path(to), journal)  # no file changed: the pending rollout is what it was
        else:
            clear_journal(Path(to))
        raise
    click.echo(f"wrote {len(files)} files to {to}" + (f"; removed {', '.join(stale)}" if stale else "")
               + (f"; previous files in {backup}" if backup else ""))
    run["done"] = max(int(run["done"]), written)
    save_journal(Path(to), run)
    if reconfigure:
        from slurmkit.elastic.execute import Executor

        backend, site = _target(to, cluster)
        Executor(site, backend, Path(to), files, executable=EXECUTABLE_FILES, remove=stale, timeout=timeout,
                 keep_backups=keep, progress=lambda m: click.echo(f"  {m}")).run(run)
        click.echo("scontrol reconfigure: done")
        return 0
    rest = steps[written:]
    by_hand = next((i for i, s in enumerate(steps, 1) if s.kind == COPY_STATE and i > written), None)
    if by_hand is not None:
        # --execute refuses a plan with a by-hand step (above): a pending rollout kept for it could never be finished
        # (every --execute refused, every diff said "pending"); the rest of the plan is the admin's
        clear_journal(Path(to))
        click.echo(f"the cluster runs the previous files until steps {written + 1}-{len(steps)} are done; "
                   f"steps {written + 1}-{len(steps)} are yours (step {by_hand} is by hand, so `slurmkit conf apply "
                   f"--execute` cannot carry them): {'; '.join(_head(s.text) for s in rest)}")
        return 0
    click.echo(f"the cluster runs the previous files until steps {written + 1}-{len(steps)} are done "
               f"({'; '.join(_head(s.text) for s in rest)}); `slurmkit conf apply --execute` does them")
    return 0


def _head(text: str) -> str:
    from slurmkit.generate.rollout import step_head

    return step_head(text)


def _current(directory: str) -> dict[str, str]:
    """The files the cluster runs now, the ones slurm.conf's Include lines name with them (as ``_diff`` reads DIR): a
    pending rollout's base without them failed Slurm's parse ("Include nodes.conf: file not found") and lost every
    node defined there, for the next apply's plan and --execute's drain."""
    from slurmkit.adopt.read import CONFIG_FILES, read_site
    from slurmkit.generate.rollout import read_dir

    current = read_dir(directory)
    included, _notes, _d = read_site(directory)
    current.update({k: v for k, v in included.items() if k not in CONFIG_FILES})
    return current


def _target(to: str, cluster: object):  # type: ignore[no-untyped-def]
    """(backend, site) for the cluster whose config dir is ``to``: the lab's own daemons when ``to`` is a lab's,
    else the inventory's rollout commands."""
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.elastic.change import Site
    from slurmkit.lab.elastic import LabSite, lab_for_conf

    conf = Path(to).resolve() / "slurm.conf"
    lab = lab_for_conf(conf)
    if lab is not None:
        return CLIBackend(env=lab.env), LabSite(lab)
    return CLIBackend(env={"SLURM_CONF": str(conf)}), Site(Path(to), rollout=cluster.rollout)  # type: ignore[attr-defined]


def _execute(cluster: object, files: dict[str, str], to: str, stale: list[str], steps: list, run: dict,  # type: ignore[type-arg]
             timeout: float, keep: int) -> int:
    from slurmkit.elastic.execute import Executor
    from slurmkit.generate import EXECUTABLE_FILES
    from slurmkit.generate.rollout import RESTART_SLURMD

    backend, site = _target(to, cluster)
    for i, s in enumerate(steps, 1):
        if s.kind == RESTART_SLURMD and i > run["done"] and not site.can_restart_slurmds():
            raise click.UsageError(f"step {i} restarts slurmd on {'every node' if s.nodes == 'ALL' else s.nodes}: set "
                                   "rollout.restart_slurmd in the inventory (e.g. 'pdsh -w {nodes} systemctl restart "
                                   "slurmd'); nothing done")
    Executor(site, backend, Path(to), files, executable=EXECUTABLE_FILES, remove=stale, timeout=timeout,
             keep_backups=keep, progress=lambda m: click.echo(f"  {m}")).run(run)
    click.echo(f"done: all {len(steps)} steps carried out")
    return 0


def _conf_dir_in_use() -> Path:
    """The config directory this host runs: $SLURM_CONF's directory, else /etc/slurm."""
    conf = os.environ.get("SLURM_CONF")
    return Path(conf).resolve().parent if conf else Path("/etc/slurm")


def _running_mismatch(directory: str | Path, cluster: object) -> str | None:
    """One line when slurmctld runs another slurm.conf than ``directory``'s (files written, no reconfigure yet),
    else None; None too when no controller answers (nothing to compare)."""
    from slurmkit.generate.drift import hash_mismatch

    backend, _site = _target(str(directory), cluster)
    try:
        text = backend.show_config()
    except SlurmkitError:
        return None
    said = hash_mismatch(text)
    if said is None:
        return None
    return (f"slurm.conf: slurmctld runs other contents than {Path(directory) / 'slurm.conf'} (scontrol show config: "
            f"HASH_VAL = {said}): written but not loaded -- scontrol reconfigure, or slurmkit conf apply --execute")


@conf.command()
@click.argument("inventory", type=click.Path(dir_okay=False, exists=True))
@click.option("--against", "against", default=None, type=click.Path(file_okay=False, exists=True),
              help="Config directory in use (default: $SLURM_CONF's directory, else /etc/slurm).")
@_version
@_templates
@_overrides
def drift(inventory: str, against: str | None, version: str | None, templates: str | None, overrides: str | None) -> int:
    """Compare INVENTORY, the files in use and the running cluster (scontrol show node/partition/config) and say
    which of the three differs: node shape, memory, Gres, Features, Weight; partitions and their MaxTime,
    DefaultTime, State, Default, PriorityTier, nodes; a slurm.conf written but not loaded."""
    from slurmkit.generate.drift import compare, view_of_cluster, view_of_conf
    from slurmkit.generate.rollout import read_dir

    d = Path(against).resolve() if against else _conf_dir_in_use()
    cluster, files, _ver = _render(inventory, version, str(d), templates, overrides)
    inv = view_of_conf(files["slurm.conf"], files=files)
    disk = None
    if (d / "slurm.conf").is_file():
        on_disk = read_dir(d)
        disk = view_of_conf(on_disk["slurm.conf"], str(d / "slurm.conf"), on_disk)
    else:
        click.echo(f"warning: no {d / 'slurm.conf'}: comparing the inventory with the cluster only", err=True)
    backend, _site = _target(str(d), cluster)
    running = view_of_cluster(backend.nodes(), backend.partitions())
    found = [f.line() for f in compare(inv, disk, running)]
    loaded = _running_mismatch(d, cluster) if disk is not None else None
    if loaded:
        found.append(loaded)
    for line in found:
        click.echo(line)
    if found:
        click.echo(f"drift: {len(found)} mismatch(es)", err=True)
        return 1
    click.echo(f"no drift: {len(running.nodes)} nodes and {len(running.partitions)} partitions match in the inventory, "
               f"{d} and the running cluster")
    return 0


@click.command()
@click.option("--group", default=None, help="Node group name (default: the GPU type, or 'cpu').")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--ibnetdiscover", "ibnet_file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Instead of this node: the fabric from this saved `ibnetdiscover` output ('-': stdin), printed as "
                   "the inventory's topology (leaves, rail-optimized SUs, spine).")
@click.option("--node-name-map", "name_map", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --ibnetdiscover: GUID-to-name map (ibnetdiscover's --node-name-map format, or 'H-<guid> name').")
@click.option("--match", default=None, help="With --ibnetdiscover: a regular expression host names must match in full "
                                            "(leaves out storage, UFM and login hosts).")
def discover(group: str | None, out: str | None, ibnet_file: str | None, name_map: str | None, match: str | None) -> None:
    """Print this node as an inventory node-group fragment (CPU geometry, memory, GPUs via NVML, HCAs), or with
    --ibnetdiscover the fabric as the inventory's topology."""
    if ibnet_file is None and (name_map or match):
        raise UsageError("--node-name-map and --match go with --ibnetdiscover")
    if ibnet_file is not None:
        text = _fabric_fragment(ibnet_file, name_map, match)
    else:
        from slurmkit.discover import gather, render_fragment

        facts = gather()
        if facts.gpus is None:
            click.echo(f"discover: no GPUs listed ({facts.gpu_note}); CPU, memory and HCAs follow", err=True)
        text = render_fragment(facts, group)
    if out:
        from slurmkit.generate.rollout import write_files

        p = Path(out)
        write_files({p.name: text}, p.parent if str(p.parent) else ".", backup=False)
        click.echo(f"wrote {out}", err=True)
    else:
        sys.stdout.write(text)


def _fabric_fragment(path: str, name_map: str | None, match: str | None) -> str:
    import re

    from slurmkit.discover import ibnet

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(errors="replace")
        names = ibnet.parse_name_map(Path(name_map).read_text(errors="replace"), name_map) if name_map else None
    except OSError as exc:
        raise UsageError(f"{exc.filename}: {exc.strerror}") from exc
    if match is not None:
        try:
            re.compile(match)
        except re.error as exc:
            raise UsageError(f"--match {match!r}: {exc}") from exc
    where = "stdin" if path == "-" else path
    return ibnet.render(ibnet.infer(ibnet.parse(text, where), names, match), where)
