#!/usr/bin/env bash
# Builds .venv-oldest, idempotently: the oldest torch benchbench supports (pyproject's lower bounds,
# torch 2.11.0 and torchvision 0.26.0) with benchbench editable and its test and fp8 extras, for
# tests/test_oldest_torch.py (marked slow), which runs the default tests in it.
#
# torch 2.11.0 is PyPI's x86_64 wheel, the CUDA build: it does not import without its NVIDIA libraries
# (libcudnn.so.9 and others; measured: `--no-deps` plus its plain-Python needs fails at `import torch`),
# so the whole of it is installed, about 2.5 GB of wheels and a 4.7 GB venv. pip's own cache keeps
# nothing on this kind of machine, so the wheels are kept in a wheelhouse of their own
# ($BENCHBENCH_WHEELHOUSE, default ~/.cache/benchbench-ci/wheels) and fetched only when missing.
# `--system-only`: only what touches neither .venv nor the source tree (.venv-oldest's torch, torchvision and
# benchbench's requirements, the wheelhouse); .ci/run runs that part
# while the default tests run, and the whole script after them.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH=2.11.0 TORCHVISION=0.26.0  # tests/test_oldest_torch.py checks these are pyproject's lower bounds
VENV=.venv-oldest
WHEELHOUSE=${BENCHBENCH_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/benchbench-ci/wheels}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
PIP=(-m pip install -q --disable-pip-version-check)

have() {  # the venv's torch and torchvision versions, or nothing
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
    'import importlib.metadata as m; print(m.version("torch").split("+")[0], m.version("torchvision").split("+")[0])' \
    2>/dev/null || true
}

start=$(date +%s)
if [ "$(have)" != "$TORCH $TORCHVISION" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  mkdir -p "$WHEELHOUSE"
  # From the wheelhouse alone when it holds everything; else fetch what is missing (pip download keeps
  # the files already there) and install from it.
  if ! "$VENV/bin/python" "${PIP[@]}" --no-index --find-links "$WHEELHOUSE" "torch==$TORCH" \
       "torchvision==$TORCHVISION" 2>/dev/null; then
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check -d "$WHEELHOUSE" "torch==$TORCH" \
      "torchvision==$TORCHVISION" 2> >(grep -v "^WARNING: Location" >&2)
    "$VENV/bin/python" "${PIP[@]}" --no-index --find-links "$WHEELHOUSE" "torch==$TORCH" "torchvision==$TORCHVISION"
  fi
fi
# benchbench's requirements (its test and fp8 extras, as scripts/setup.sh) beside that torch, into
# .venv-oldest alone: pip keeps the torch above, which satisfies pyproject's range. setuptools >= 70.1
# builds wheels by itself (the venv's own 65.5 has no bdist_wheel, which tests/test_example_plugin.py
# needs); torch 2.11 asks for one below 82.
mapfile -t REQUIREMENTS < <("$VENV/bin/python" scripts/requirements.py base test fp8)
"$VENV/bin/python" "${PIP[@]}" "${REQUIREMENTS[@]}" "setuptools>=70.1" 2> >(grep -v "^WARNING: Location" >&2)
[ "${1:-}" = --system-only ] && exit 0
# benchbench itself, editable: its egg-info is written into the source tree, so not while tests run
"$VENV/bin/python" "${PIP[@]}" --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
if [ "$(have)" != "$TORCH $TORCHVISION" ]; then
  echo "ci-setup-oldest-torch: $VENV has torch/torchvision '$(have)', expected '$TORCH $TORCHVISION'" >&2
  exit 1
fi
echo "ci-setup-oldest-torch: $VENV with torch $TORCH, torchvision $TORCHVISION ($(( $(date +%s) - start )) s;" \
     "wheelhouse $WHEELHOUSE, $(du -sh "$WHEELHOUSE" | cut -f1))"
