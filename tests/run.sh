#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root (README's second command; .ci/run calls it).
# Installs what it needs (idempotent), then runs lint and every test. Tests marked `lab` bring up a real
# Slurm lab (munged, slurmctld, 8 slurmd) once per session and always take it down.
# A full run (no arguments) then runs the lab tests again on the other Slurm release (24.11 on a 22.05 host),
# from a root filesystem cached under /var/cache/slurmkit/roots (built once, about 2 minutes; see
# `slurmkit lab image`). With arguments, only the first pass runs, with them; SLURMKIT_TEST_SLURM=24.11 picks
# the release of that pass.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup-env.sh

echo "== ruff"
.venv/bin/ruff check slurmkit tests bench
echo "== mypy"
.venv/bin/mypy slurmkit
host=$(.venv/bin/python -c 'from slurmkit.lab.image import host_release; print(host_release() or "")')
if [ $# -gt 0 ]; then
  echo "== pytest (Slurm ${SLURMKIT_TEST_SLURM:-$host})"
  exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi
other=$(.venv/bin/python -c "from slurmkit.release import DEBIAN_SUITES; print(*sorted(set(DEBIAN_SUITES) - {'$host'}))")
echo "== pytest (Slurm $host, the host's)"
t0=$SECONDS
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider || rc=$?
echo "== took $((SECONDS - t0))s"
for rel in $other; do
  # The lab lays another release's root over the host only when that root's C library is not older than the
  # host's (slurmkit/lab/view.py mount_view): 24.11 over a Debian 12 host runs, 22.05 over a Debian 13 host is
  # refused. Say so instead of failing every lab test of that pass.
  if ! .venv/bin/python -c "import sys; from slurmkit.release import release_key as k; sys.exit(k('$rel') <= k('$host'))"; then
    echo "== Slurm $rel: no second pass on this host (Slurm $host): a $rel root is older than the host's C library"
    continue
  fi
  echo "== pytest -m lab (Slurm $rel, from a cached root)"
  t0=$SECONDS
  .venv/bin/slurmkit lab image list | grep -q "^$rel " || .venv/bin/slurmkit lab image build "$rel"
  SLURMKIT_TEST_SLURM=$rel .venv/bin/python -m pytest -q -p no:cacheprovider -m lab || rc=$?
  echo "== took $((SECONDS - t0))s"
done
exit $rc
