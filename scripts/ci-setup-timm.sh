#!/usr/bin/env bash
# Installs timm into .venv (benchbench's `timm` extra): the `timm/<name>` models
# (benchbench_plugins.models.timm_zoo) and benchmarks/side_by_side.py. The `test` extra lists timm too,
# so scripts/setup.sh installs it already; this script serves a .venv made without the test extra.
# benchbench imports timm only when a `timm/` id is used. timm requires torch without pinning it; pip
# keeps the torch that scripts/setup.sh installed.
# `--system-only`: only what touches neither .venv nor the source tree (nothing); .ci/run runs that part
# while the default tests run, and the whole script after them.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = --system-only ] && exit 0
# the extras' requirements, not `pip install -e ".[timm]"`: benchbench is installed already, and
# rebuilding its editable install costs a minute on a loaded machine (scripts/requirements.py)
mapfile -t REQUIREMENTS < <(.venv/bin/python scripts/requirements.py timm)
.venv/bin/python -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
echo "ci-setup-timm: timm $(.venv/bin/python -c 'import timm; print(timm.__version__)')," \
     "torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
