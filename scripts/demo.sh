#!/usr/bin/env bash
# Install (scripts/setup.sh) and run the main job: streaming vs plain DiLoCo on an emulated WAN link.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ftrun compare streaming baseline "$@"
