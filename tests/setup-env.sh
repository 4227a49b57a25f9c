# Sourced by tests/run.sh and examples/demo.sh: Debian packages, then a venv with slurmkit and its test tools.
# Idempotent and quiet when everything is already there.
if [ "$(id -u)" != 0 ]; then echo "run as root: the Slurm lab starts daemons and namespaces" >&2; exit 1; fi
# openssh-server, rsync: the login node of tests/integration/test_remote_lab.py (gpusub --remote over ssh);
# slurmrestd, slurm-wlm-jwt-plugin (auth/jwt): tests/integration/test_remote_rest_lab.py; rsyslog, logrotate: the log
# shipping and retention tests (tests/unit/test_monitor_logs.py); prometheus-alertmanager: the alerting lab
DEB_PKGS="slurmctld slurmd slurm-client munge slurmdbd mariadb-server debootstrap docker-compose python3 python3-venv python3-pip procps iproute2 util-linux git lua5.1 prometheus prometheus-node-exporter prometheus-alertmanager openipmi ipmitool openssl openssh-client openssh-server rsync slurmrestd slurm-wlm-jwt-plugin rsyslog logrotate"
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
# Megatron-LM's own signal handler, for the megatron launcher's tests (tests/data/megatron/train_signal.py loads
# megatron/training/dist_signal_handler.py by file): megatron-core ships megatron.training from 0.17 on. Not in the
# dev extra: its wheels say Requires-Python >= 3.12 (cp311 builds are there all the same) and require torch, which
# would pull PyPI's CUDA build before the CPU one above; --no-deps keeps that torch. The package itself is never
# imported (its __init__ needs transformer engine and triton).
if ! .venv/bin/python -c 'import importlib.util as u, os, sys; s = u.find_spec("megatron"); sys.exit(not (s and any(os.path.exists(os.path.join(p, "training", "dist_signal_handler.py")) for p in s.submodule_search_locations)))' >/dev/null 2>&1; then
  echo "== pip install --no-deps megatron-core==0.19.2"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --ignore-requires-python megatron-core==0.19.2
fi
export PATH="$PWD/.venv/bin:$PATH"
