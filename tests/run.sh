#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root (README's second command; .ci/run calls it).
# Installs what it needs (idempotent), then runs lint and every test. Tests marked `lab` bring up a real
# Slurm lab (munged, slurmctld, 8 slurmd) once per session and always take it down.
# A full run (no arguments) also runs lab tests on the other Slurm releases slurmkit has a root recipe for
# (22.05, 24.11, 26.05 in all; release.DEBIAN_SUITES), from root filesystems cached under /var/cache/slurmkit/roots
# (each built once, 2-3 minutes; see `slurmkit lab image`). With arguments, only one pytest runs, with them;
# SLURMKIT_TEST_SLURM=26.05 picks the release of its labs.
#
# Which lab tests run on which release, and why. CI has 2 cores and the whole .ci/run must stay under 60 minutes:
# the unit tests take ~5 minutes, every lab test on the host's release ~30, one more release's full lab pass ~22, so
# even two full lab passes one after the other do not fit beside the installs. So:
# - the host's release: every test (the unit tests need no other release);
# - every other release (24.11 and 26.05 on a 22.05 host): the tests marked `releases` (-m "lab and releases"): lab up
#   and multi-node jobs, gpusub and its live placement, job_submit.lua, tenants with accounting, nodes add/remove
#   (restart vs reconfigure), the health hooks, defragmentation's reservations and the real parse of every preset --
#   the lab tests whose outcome depends on the release; the rest (cgroups, power, acceptance, monitoring) exercise
#   slurmkit's own code the same way on every release, and the host's pass covers it.
# How: the unit tests first (they use the CPUs), then the lab passes of all releases side by side, each with its own
# lab dirs (tests/conftest.py suffixes the release), port base and pytest basetemp, output kept in a log each and
# printed when it ends. A lab pass mostly waits on daemons (registration, jobs, timeouts), so three at once on 2
# cores take little longer than the longest alone: on this 2-core machine 39 minutes for the whole .ci/run on a
# fresh clone (unit 4.6 min; lab passes side by side 33 min: 22.05 every lab test, 24.11 and 26.05 the releases
# subset, 20 min), 64 when the passes ran one after the other.
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
rc=0
start=$SECONDS
echo "== pytest -m 'not lab' (unit tests and emulators)"
.venv/bin/python -m pytest -q -p no:cacheprovider -m "not lab" || rc=$?
echo "== took $((SECONDS - start))s"
passes=()
for rel in $other; do
  # The lab lays another release's root over the host only when that root's C library is not older than the
  # host's (slurmkit/lab/view.py mount_view): 24.11 over a Debian 12 host runs, 22.05 over a Debian 13 host is
  # refused. Say so instead of failing every lab test of that pass.
  if ! .venv/bin/python -c "import sys; from slurmkit.release import release_key as k; sys.exit(k('$rel') <= k('$host'))"; then
    echo "== Slurm $rel: no pass on this host (Slurm $host): a $rel root is older than the host's C library"
    continue
  fi
  t0=$SECONDS
  # a root that cannot be built (no network, a mirror down) fails that release's pass, not the script: the host's
  # pass and the other releases still run (under set -e a failed build ended the run before any lab test)
  if ! { .venv/bin/slurmkit lab image list | grep -q "^$rel " || .venv/bin/slurmkit lab image build "$rel"; }; then
    echo "== Slurm $rel: FAILED: no root (slurmkit lab image build $rel, above); no pass"
    rc=1
    continue
  fi
  echo "== Slurm $rel root ready after $((SECONDS - t0))s"
  passes+=("$rel")
done
passes+=("$host")  # last: its base is the highest (below)
logs=$(mktemp -d /tmp/slurmkit-test-passes.XXXXXX)
base=${SLURMKIT_TEST_LAB_PORT_BASE:-17817}
t0=$SECONDS
pids=()
# A pass's ports: its base .. +3700 (tests/conftest.py fixed offsets), and make_lab's labs at +200 per lab made in
# the session, their slurmdbd +1000 above: a `releases` pass reaches ~+3800, the host's full pass ~+5800. So the
# other releases take base, base+4000, ..., the host's pass goes last, and each pass's make_lab stops at the next
# pass's base (SLURMKIT_TEST_LAB_PORT_LIMIT: an error naming it, not another pass's port); the last stays below the
# ephemeral range (ip_local_port_range, 32768 by default; the lab refuses ports in it).
# Side by side, SIGINT/SIGTERM go to every pass as SIGINT, so each takes its labs down (pytest's teardown).
trap 'kill -INT "${pids[@]}" 2>/dev/null; wait; exit 130' INT TERM
n=0
for rel in "${passes[@]}"; do
  if [ "$rel" = "$host" ]; then
    marks="lab"; env_rel=()
  else
    marks="lab and releases"; env_rel=("SLURMKIT_TEST_SLURM=$rel")
  fi
  port=$((base + 4000 * n))
  n=$((n + 1))
  limit=$([ "$n" -lt "${#passes[@]}" ] && echo $((base + 4000 * n)) || cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
  echo "== pytest -m '$marks' (Slurm $rel$([ "$rel" = "$host" ] && echo ", the host's" || echo ", from a cached root"); ports $port-$((limit - 1)); log $logs/$rel.log)"
  env "${env_rel[@]}" SLURMKIT_TEST_LAB_PORT_BASE=$port SLURMKIT_TEST_LAB_PORT_LIMIT=$limit \
    .venv/bin/python -m pytest -q -p no:cacheprovider -m "$marks" --basetemp="$logs/tmp-$rel" >"$logs/$rel.log" 2>&1 &
  pids+=($!)
done
i=0
for rel in "${passes[@]}"; do
  prc=0
  wait "${pids[$i]}" || prc=$?
  i=$((i + 1))
  echo "== Slurm $rel lab pass: exit $prc, done $((SECONDS - t0))s after the passes started"
  cat "$logs/$rel.log"
  [ "$prc" = 0 ] || rc=$prc
done
echo "== lab passes took $((SECONDS - t0))s; all tests $((SECONDS - start))s"
exit $rc
