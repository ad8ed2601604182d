#!/usr/bin/env bash
# The GPU check, one prepared script (at most 6 minutes, nothing fetched from the network):
# NCCL trainings (streaming, bucketized, 1gbit,20ms link, --quantize, baby-nccl, --quantize with a
# corrupted divide), each inspected and numerically checked (streaming, bucketized: plain rounds;
# --quantize: every checked sync a quantized one), summarised as one JSON on stdout (see
# scripts/gpu_check.py). Without CUDA: {"cuda": false, ...}, exit 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
export OUT=${OUT:-/tmp/ftrun-gpu} GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-350}
mkdir -p "$OUT"
# `gpu_check.sh pgs`: the process-group matrix instead (scripts/gpu_pgs.py: NCCL, Baby-NCCL, nccl2,
# torchcomms where available), in the same 6 minutes
if [ "${1:-}" = pgs ]; then shift; exec timeout --kill-after=5 360 "$PY" scripts/gpu_pgs.py "$@"; fi
exec timeout --kill-after=5 360 "$PY" scripts/gpu_check.py "$@"
