#!/usr/bin/env bash
# Create .venv (if needed) and install ftrun into it. Idempotent and quick when nothing changed.
# torch: an importable torch is kept (GPU machines keep their CUDA build). Otherwise a GPU host
# gets pip's default torch, and a CPU host gets $FTRUN_CPU_TORCH (default torch==2.13.0, a CPU
# wheel on this project's machines) so the install never pulls a multi-GB CUDA build by accident.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
stamp=.venv/.ftrun-installed
want=$(cat pyproject.toml | sha1sum | cut -c1-40)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VPY" -c "import ftrun, torch, torchft" 2>/dev/null; then
  exit 0
fi
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VPY" -m pip install -q torch
  else
    "$VPY" -m pip install -q "${FTRUN_CPU_TORCH:-torch==2.13.0}"
  fi
fi
"$VPY" -m pip install -q -e ".[test]"
echo "$want" > "$stamp"
