# Sourced by tests/run.sh and examples/demo.sh: Debian packages, then a venv with slurmkit and its test tools.
# Idempotent and quiet when everything is already there.
if [ "$(id -u)" != 0 ]; then echo "run as root: the Slurm lab starts daemons and namespaces" >&2; exit 1; fi
DEB_PKGS="slurmctld slurmd slurm-client munge slurmdbd mariadb-server debootstrap docker-compose python3 python3-venv python3-pip procps iproute2 util-linux git lua5.1 prometheus prometheus-node-exporter openipmi ipmitool"
missing=""
for p in $DEB_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "== apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== python venv (.venv)"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c 'import slurmkit, pytest, hypothesis, ruff, torch, matplotlib, lupa' >/dev/null 2>&1; then
  echo "== pip install -e .[dev,plot] torch==2.13.0"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev,plot]'
  # CPU PyTorch for the real DDP job in the lab (gloo); on the CI machine this wheel comes from local disk.
  # Elsewhere PyPI's default torch wheel is its CUDA build (about 2.9 GB downloaded, a ~5 GB venv, measured on
  # Python 3.13): say so before it starts, and let pip show its progress
  echo "== pip install torch==2.13.0 (from PyPI this is the CUDA build: ~2.9 GB download, several minutes)"
  .venv/bin/pip install --disable-pip-version-check --progress-bar on torch==2.13.0 numpy
fi
export PATH="$PWD/.venv/bin:$PATH"
