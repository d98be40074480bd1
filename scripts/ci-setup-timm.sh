#!/usr/bin/env bash
# Installs timm into .venv (benchbench's `timm` extra), for benchmarks/side_by_side.py and its slow test
# (tests/test_side_by_side.py). timm is a benchmark-only dependency: benchbench itself never imports it,
# so README's first command does not install it. timm requires torch without pinning it; pip keeps the
# torch that scripts/setup.sh installed.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[timm]"
echo "ci-setup-timm: timm $(.venv/bin/python -c 'import timm; print(timm.__version__)')," \
     "torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
