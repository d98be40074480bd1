#!/usr/bin/env bash
# Installs what the `cluster` tests need: a single-node Slurm with accounting (slurm-wlm, munge,
# slurmdbd, mariadb-server from Debian) and the executors' Python packages (submitit, ray) into
# .venv through benchbench's extras. Idempotent; scripts/cluster.sh starts and stops the daemons.
# `--system-only`: only what touches neither .venv nor the source tree (the Debian packages); .ci/run runs that part
# while the default tests run, and the whole script after them.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null \
   || ! command -v munged >/dev/null; then
  # Another apt on the machine holds the dpkg lock for a while at most: wait for it.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    slurm-wlm slurm-client slurmdbd munge mariadb-server >/dev/null
fi
[ "${1:-}" = --system-only ] && exit 0
# the extras' requirements, not `pip install -e ".[slurm,ray]"`: benchbench is installed already, and
# rebuilding its editable install costs a minute on a loaded machine (scripts/requirements.py)
mapfile -t REQUIREMENTS < <(.venv/bin/python scripts/requirements.py slurm ray)
.venv/bin/python -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
echo "ci-setup-cluster: slurm $(slurmctld -V | awk '{print $2}'), $(.venv/bin/python -c \
  'import submitit, ray; print(f"submitit {submitit.__version__}, ray {ray.__version__}")')"
