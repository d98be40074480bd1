#!/usr/bin/env bash
# Installs what the PostgreSQL results-database tests (tests/test_db_postgres.py, marked `slow`) need,
# idempotently: Debian's `postgresql` server binaries (/usr/lib/postgresql/<version>/bin) and the
# psycopg 3 driver in .venv (benchbench's `postgres` extra), plus the reporters' extras that
# tests/test_export.py uses. The Debian package's own cluster is not used: each test module runs
# initdb in a private directory and starts and stops its own server by PID.
# `--system-only`: only what touches neither .venv nor the source tree (the Debian packages); .ci/run runs that part
# while the default tests run, and the whole script after them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  # Another apt-get may hold dpkg's lock (a sibling setup script): wait for it rather than fail.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends postgresql
fi
[ "${1:-}" = --system-only ] && exit 0
# the extras' requirements, not `pip install -e ".[postgres,mlflow,wandb]"`: benchbench is installed already, and
# rebuilding its editable install costs a minute on a loaded machine (scripts/requirements.py)
mapfile -t REQUIREMENTS < <(.venv/bin/python scripts/requirements.py postgres mlflow wandb)
.venv/bin/python -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
echo "ci-setup-postgres: $(ls -d /usr/lib/postgresql/*/bin/postgres | tail -1) " \
     "$($(ls -d /usr/lib/postgresql/*/bin/postgres | tail -1) --version)," \
     "psycopg $(.venv/bin/python -c 'import psycopg; print(psycopg.__version__)')"
