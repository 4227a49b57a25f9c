#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root (README's second command; .ci/run calls it).
# Installs what it needs (idempotent), then runs lint and every test. Tests marked `lab` bring up a real
# Slurm lab (munged, slurmctld, 8 slurmd) once per session and always take it down.
# A full run (no arguments) then runs lab tests again on the other Slurm releases slurmkit has a root recipe for
# (22.05, 24.11, 26.05 in all; release.DEBIAN_SUITES), from root filesystems cached under /var/cache/slurmkit/roots
# (each built once, 2-3 minutes; see `slurmkit lab image`). With arguments, only the first pass runs, with them;
# SLURMKIT_TEST_SLURM=26.05 picks the release of that pass.
#
# Which lab tests run on which release, and why. CI has 2 cores and the whole .ci/run must stay under 60 minutes:
# the unit tests + every lab test on the host's release take ~34 minutes (1,741 tests, measured on a fresh clone), one
# more full lab pass ~22, so even two full passes do not fit beside the installs. So:
# - the host's release: every test (the unit tests need no other release);
# - every other release (24.11 and 26.05 on a 22.05 host): the tests marked `releases` (-m "lab and releases"): lab up
#   and multi-node jobs, gpusub and its live placement, job_submit.lua, tenants with accounting, nodes add/remove
#   (restart vs reconfigure), the health hooks, defragmentation's reservations and the real parse of every preset --
#   the lab tests whose outcome depends on the release; the rest (cgroups, power, acceptance, monitoring) exercise slurmkit's own
#   code the same way on every release, and the host's pass covers it.
# Measured on this 2-core machine: 24.11 and 26.05 `-m "lab and releases"` 121 tests in 14 minutes each; root builds 160 s (26.05)
# and ~2 min (24.11), once per machine.
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
    echo "== Slurm $rel: no pass on this host (Slurm $host): a $rel root is older than the host's C library"
    continue
  fi
  marks="lab and releases"
  echo "== pytest -m '$marks' (Slurm $rel, from a cached root)"
  t0=$SECONDS
  .venv/bin/slurmkit lab image list | grep -q "^$rel " || .venv/bin/slurmkit lab image build "$rel"
  echo "== root ready after $((SECONDS - t0))s"
  SLURMKIT_TEST_SLURM=$rel .venv/bin/python -m pytest -q -p no:cacheprovider -m "$marks" || rc=$?
  echo "== took $((SECONDS - t0))s"
done
exit $rc
