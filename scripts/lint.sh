#!/usr/bin/env bash
# The checks that keep the tree as docs/architecture.md ("How it is built") says, in one command:
#   ruff check, ruff format --check (pyproject's [tool.ruff]), mypy on ftrun/ (pyproject's
#   [tool.mypy]: the config, the run-dir records, the check, the commands, the planner and the report strictly), the layering test
#   (tests/unit/test_layering.py), scripts/check_prose.py (no measurement diaries in README.md and
#   docs/), the docs' pictures (scripts/gen_docs_figures.py --check), mkdocs build --strict (the
#   docs site; skipped when the docs extra is missing) and
#   shared/tools/import_cycles.py --modules ftrun.
# Every check runs; a line per check with its seconds; exit 1 naming the ones that failed.
# The tools come from .venv (bash scripts/setup.sh installs the `lint` extra); $FTRUN_VENV picks another.
# import_cycles.py lives in the shared folder beside the checkout (../shared; for a git worktree,
# beside the main checkout; or $FTRUN_SHARED); without it that check is skipped, and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${FTRUN_VENV:-.venv}/bin/python
if ! "$PY" -c "import ruff, mypy" 2>/dev/null; then
  echo "lint: ruff and mypy are not installed in ${FTRUN_VENV:-.venv}: run bash scripts/setup.sh (it installs the lint extra)" >&2
  exit 2
fi
PATHS=(ftrun tests scripts examples)
failed=()
check() {
  local name=$1 start=$SECONDS
  shift
  if "$@"; then
    printf 'lint: [%3d s] ok      %s\n' "$(( SECONDS - start ))" "$name" >&2
  else
    printf 'lint: [%3d s] FAILED  %s\n' "$(( SECONDS - start ))" "$name" >&2
    failed+=("$name")
  fi
}
check "ruff check" "$PY" -m ruff check --quiet --output-format concise "${PATHS[@]}"
check "ruff format --check" "$PY" -m ruff format --check --quiet "${PATHS[@]}"
check "mypy ftrun" "$PY" -m mypy
check "CLI reference (scripts/gen_cli_reference.py --check)" "$PY" scripts/gen_cli_reference.py --check
# the docs' pictures: made again in a temp dir, same size in pixels as docs/img's, each shown on its page
check "docs pictures (scripts/gen_docs_figures.py --check)" \
  env MPLCONFIGDIR="$(mktemp -d)" "$PY" scripts/gen_docs_figures.py --check
check "layering (tests/unit/test_layering.py)" \
  env MPLCONFIGDIR="$(mktemp -d)" "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_layering.py
# README.md and docs/: no measurement diaries (figures live in docs/benchmarks.md)
check "prose (scripts/check_prose.py)" "$PY" scripts/check_prose.py
# the docs site: a broken link or anchor, or a page outside the nav, fails (the docs extra)
if "$PY" -c "import mkdocs, material" 2>/dev/null; then
  check "mkdocs build --strict" env NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
else
  echo "lint: [  0 s] SKIPPED mkdocs build --strict: mkdocs (the docs extra) is not installed in ${FTRUN_VENV:-.venv}: run bash scripts/setup.sh" >&2
fi
shared=""
common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
for d in "${FTRUN_SHARED:-}" ../shared ${common:+"$(dirname "$common")/../shared"}; do
  if [ -n "$d" ] && [ -f "$d/tools/import_cycles.py" ]; then shared=$d; break; fi
done
if [ -n "$shared" ]; then
  echo "lint: import cycles: $shared/tools/import_cycles.py --modules ftrun" >&2
  check "import cycles" python3 "$shared/tools/import_cycles.py" --modules ftrun
else
  echo "lint: [  0 s] SKIPPED import cycles: no tools/import_cycles.py in \$FTRUN_SHARED, ../shared or beside the main checkout" >&2
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "lint: failed: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')" >&2
  exit 1
fi
echo "lint: all checks passed" >&2
