#!/usr/bin/env bash
# Create .venv (if needed) and install ftrun into it. Idempotent and quick when nothing changed.
# torch: an importable torch is kept (GPU machines keep their CUDA build). Otherwise a GPU host
# gets pip's default torch, and a CPU host gets $FTRUN_CPU_TORCH (default torch==2.13.0, a CPU
# wheel on this project's machines) so the install never pulls a multi-GB CUDA build by accident.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# progress: a line per step with the seconds since the start; a long pip step says it is still
# running every FTRUN_SETUP_TICK_S seconds (pip's own output goes to .venv/setup.log)
step() { printf 'setup: [%3d s] %s\n' "$SECONDS" "$*" >&2; }
tick=${FTRUN_SETUP_TICK_S:-30}
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PY"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
stamp=.venv/.ftrun-installed
want=$(cat pyproject.toml | sha1sum | cut -c1-40)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VPY" -c "import ftrun, torch, torchft" 2>/dev/null; then
  exit 0
fi
log=.venv/setup.log  # pip's output; shown only when an install fails
: > "$log"
pip_install() {
  local what=$1; shift
  step "installing $what (pip install $*) ..."
  "$VPY" -m pip install -q "$@" >>"$log" 2>&1 &
  local pid=$! start=$SECONDS
  local next=$(( start + tick ))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -ge "$next" ]; then
      step "still installing $what ($(( SECONDS - start )) s so far; pip's output: $log)"
      next=$(( next + tick ))
    fi
  done
  if ! wait "$pid"; then
    tail -n 30 "$log" >&2
    echo "setup: pip install $* failed (full output: $log)" >&2
    exit 1
  fi
}
step "upgrading pip"
"$VPY" -m pip install -q --upgrade pip >>"$log" 2>&1 || true
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    pip_install "torch (GPU host: pip's default build)" torch
  else
    pip_install "torch (CPU host: ${FTRUN_CPU_TORCH:-torch==2.13.0})" "${FTRUN_CPU_TORCH:-torch==2.13.0}"
  fi
else
  step "keeping the importable torch ($("$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
fi
pip_install "ftrun and its dependencies" -e ".[test]"
echo "$want" > "$stamp"
step "done: .venv/bin/ftrun"
