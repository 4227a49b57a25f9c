#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root (README's second command; .ci/run calls it).
# Installs what it needs (idempotent), then runs lint and every test. Tests marked `lab` bring up a real
# Slurm lab (munged, slurmctld, 8 slurmd) once per session and always take it down.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup-env.sh

echo "== ruff"
.venv/bin/ruff check slurmkit tests bench
echo "== mypy"
.venv/bin/mypy slurmkit
echo "== pytest"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
