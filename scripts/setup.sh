#!/usr/bin/env bash
# Sets up everything benchbench needs, idempotently: Fashion-MNIST from Debian's package, a virtual
# environment in .venv, torch/torchvision (from this machine's local wheels where present), and
# benchbench itself (editable) with its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=/usr/share/datasets/fashion-mnist
if [ ! -f "$FMNIST/t10k-labels-idx1-ubyte.gz" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  # Another apt-get may hold dpkg's lock (CI's setup scripts, unattended upgrades): wait for it up to
  # 10 minutes rather than go on without the data.
  APT=(apt-get -o DPkg::Lock::Timeout=600)
  if command -v apt-get >/dev/null && $SUDO "${APT[@]}" update -qq && $SUDO "${APT[@]}" install -y -qq dataset-fashion-mnist; then
    echo "setup: Fashion-MNIST installed in $FMNIST"
  else
    echo "setup: warning: could not install Debian's dataset-fashion-mnist; give benchbench the data with" \
         "--data-root DIR (or BENCHBENCH_DATA=DIR) or --download" >&2
  fi
fi

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# torch==2.14.1 / torchvision==0.29.1 lie on this machine's disk (pip finds them without a download);
# override with TORCH_SPEC on other machines, e.g. TORCH_SPEC="torch torchvision".
TORCH_SPEC=${TORCH_SPEC:-"torch==2.14.1 torchvision==0.29.1"}
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q --disable-pip-version-check $TORCH_SPEC
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,fp8]"
echo "setup: ready ($(.venv/bin/benchbench --version), torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
