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
log=.venv/setup.log  # pip's output; shown only when an install fails
: > "$log"
pip_install() {
  if ! "$VPY" -m pip install -q "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup: pip install $* failed (full output: $log)" >&2
    exit 1
  fi
}
echo "setup: installing ftrun and its dependencies into .venv ..." >&2
"$VPY" -m pip install -q --upgrade pip >>"$log" 2>&1 || true
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    pip_install torch
  else
    pip_install "${FTRUN_CPU_TORCH:-torch==2.13.0}"
  fi
fi
pip_install -e ".[test]"
echo "$want" > "$stamp"
