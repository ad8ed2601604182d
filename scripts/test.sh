#!/usr/bin/env bash
# Install (scripts/setup.sh) and run the test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -gt 0 ]; then exec .venv/bin/python -m pytest -q "$@"; fi
# The whole suite: the unit tests on both cores (pytest-xdist: they start no process and share
# nothing), then the e2e tests one at a time (each one's trainings use both cores already).
status=0
.venv/bin/python -m pytest -q -m "not e2e" -n 2 || status=$?
.venv/bin/python -m pytest -q -m e2e || status=$?
exit "$status"
