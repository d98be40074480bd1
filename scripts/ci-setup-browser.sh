#!/usr/bin/env bash
# Installs what the `browser` tests need, idempotently: Debian's headless-capable Chromium and its
# WebDriver (chromium, chromium-driver) and selenium in .venv (benchbench's `browser` extra). The
# tests start Chromium only through chromedriver; nothing is downloaded at test time.
# `--system-only`: only what touches neither .venv nor the source tree (the Debian packages); .ci/run runs that part
# while the default tests run, and the whole script after them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  # Another apt-get may hold dpkg's lock (a sibling setup script): wait for it rather than fail.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends chromium chromium-driver fonts-dejavu-core
fi
[ "${1:-}" = --system-only ] && exit 0
# the extras' requirements, not `pip install -e ".[browser]"`: benchbench is installed already, and
# rebuilding its editable install costs a minute on a loaded machine (scripts/requirements.py)
mapfile -t REQUIREMENTS < <(.venv/bin/python scripts/requirements.py browser)
.venv/bin/python -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
echo "ci-setup-browser: $(chromium --version 2>/dev/null), $(chromedriver --version | head -1), selenium" \
     "$(.venv/bin/python -c 'import selenium; print(selenium.__version__)')"
