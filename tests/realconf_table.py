"""Per corpus configuration of tests/data/realconf, per release: is `conf validate` right (its verdict and findings
equal what the release's own slurmctld/slurmd decided, recorded in tests/unit/test_realconf.py), does `conf import`
take it (or name what it cannot carry, as tests/unit/test_conf_import.py expects), is the round trip empty
(`conf diff --exit-code` of the imported inventory against the files), and does the imported inventory generate.

    .venv/bin/python tests/realconf_table.py [--releases 22.05,24.11,26.05]

Prints a Markdown table (issue 33's closing note). Needs root (the real parse runs each release's slurmctld in
namespaces; 24.11/26.05 from their cached roots, `slurmkit lab image build`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmkit.adopt.read import read_site  # noqa: E402
from slurmkit.backend.realparse import validate  # noqa: E402
from tests.unit.test_conf_import import UNADOPTABLE  # noqa: E402
from tests.unit.test_realconf import CORPUS, EXPECTED, EXPECTED_REAL  # noqa: E402


def sk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def judged(name: str, release: str) -> str:
    if release not in EXPECTED[name]:
        return "-"
    files, _notes, _d = read_site(CORPUS / name)
    rep = validate(files, release)
    static = EXPECTED[name][release][0]
    want = EXPECTED_REAL.get(name, {}).get(release, [])
    # every finding expected, each matched by one error line (in any order), and no other error
    left = list(rep.errors)
    matched = True
    for w in [*static, *want]:
        hit = next((e for e in left if w in e), None)
        if hit is None:
            matched = False
            break
        left.remove(hit)
    ok = matched and not left and (rep.real_ok is None or rep.real_ok is (not want))
    verdict = "valid" if not rep.errors else f"refused ({len(rep.errors)})"
    judge = "" if rep.real_ok is not None else ", no real parse"
    return f"{'right' if ok else 'WRONG'}: {verdict}{judge}"


def adopted(name: str, release: str, tmp: Path, valid: bool) -> tuple[str, str, str]:
    site = tmp / f"{name}-{release}.yaml"
    imp = sk("conf", "import", str(CORPUS / name), "-o", str(site), "--slurm-version", release)
    expected_loss = UNADOPTABLE.get((name, release))
    if imp.returncode != 0:
        if expected_loss and expected_loss in imp.stderr:
            return "names its loss (exit 1, as expected)", "-", "-"
        return f"FAILED ({imp.returncode}): {imp.stderr.strip().splitlines()[-1][:80]}", "-", "-"
    diff = sk("conf", "diff", str(site), "--against", str(CORPUS / name), "--exit-code")
    trip = "empty" if diff.returncode == 0 and "nothing to do" in diff.stdout else f"NOT EMPTY ({diff.returncode})"
    out = tmp / f"{name}-{release}-gen"
    gen = sk("conf", "generate", str(site), "-o", str(out), "--slurm-version", release, "--no-real-parse")
    if gen.returncode == 0:
        return "ok", trip, "ok"
    # a config the release refuses is carried as written, and generate refuses it for the same reasons
    return "ok", trip, "refused, as validate" if not valid else f"FAILED: {gen.stderr.strip().splitlines()[-1][:80]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", default="22.05,24.11,26.05")
    a = ap.parse_args()
    releases = a.releases.split(",")
    print("| corpus | release | validate | import | round trip | regenerate |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in sorted(p.name for p in CORPUS.iterdir() if p.is_dir()):
            for r in releases:
                verdict = judged(name, r)
                imp, trip, gen = adopted(name, r, Path(d), valid=verdict.endswith(": valid"))
                print(f"| {name} | {r} | {verdict} | {imp} | {trip} | {gen} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
