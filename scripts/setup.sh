#!/usr/bin/env bash
# Create a venv (if needed) and install ftrun into it. Idempotent and quick when nothing changed.
# torch: an importable torch is kept (GPU machines keep their CUDA build). Otherwise
# $FTRUN_TORCH picks its version (default 2.13.0): `pip install torch==$FTRUN_TORCH`, always
# pinned, never an unpinned torch. On this project's machines 2.13.0 is the small CPU wheel and
# 2.14.1 the default Linux build (CUDA libraries included; it runs on CPU); a GPU host gets
# PyPI's build of that version. An importable torch of another version than $FTRUN_TORCH asks
# for is refused, not replaced. The chosen torch is pinned while torchft and ftrun install, so
# neither can pull another one.
# torchft: an importable torchft (either distribution, 0.2.x or torchft-nightly) is kept — ftrun
# does not require the distribution name, so installing it never replaces a user's torchft.
# Otherwise $FTRUN_TORCHFT picks it: unset or "0.2" = torchft 0.2.x (PyPI `torchft`), "nightly" =
# torchft-nightly==2026.10.26 (PyPI `torchft-nightly`, same import name).
# $FTRUN_VENV: the venv's directory (default .venv); e.g.
#   FTRUN_VENV=.venv-nightly FTRUN_TORCHFT=nightly FTRUN_TORCH=2.14.1 bash scripts/setup.sh
# ($FTRUN_CPU_TORCH, its former name, still works: a requirement like torch==2.13.0.)
# $FTRUN_EXTRAS: ftrun's extras (default test,lint,docs; a venv that only runs tests: test).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# progress: a line per step with the seconds since the start; a long pip step says it is still
# running every FTRUN_SETUP_TICK_S seconds (pip's own output goes to $VENV/setup.log)
step() { printf 'setup: [%3d s] %s\n' "$SECONDS" "$*" >&2; }
tick=${FTRUN_SETUP_TICK_S:-30}
VENV=${FTRUN_VENV:-.venv}
case "${FTRUN_TORCHFT:-0.2}" in
  0.2) want_dist=torchft; want_req="torchft>=0.2.0,<0.3" ;;
  nightly) want_dist=torchft-nightly; want_req="torchft-nightly==2026.10.26" ;;
  *) echo "setup: FTRUN_TORCHFT=${FTRUN_TORCHFT}: expected 0.2 or nightly" >&2; exit 2 ;;
esac
# FTRUN_TORCH: a version (2.14.1) or, as FTRUN_CPU_TORCH was, a pinned requirement (torch==2.14.1)
torch_choice=${FTRUN_TORCH:-${FTRUN_CPU_TORCH:-}}
torch_version=${torch_choice#torch==}
torch_version=${torch_version:-2.13.0}
if ! [[ "$torch_version" =~ ^[0-9]+(\.[0-9]+)+(\+[A-Za-z0-9.]+)?$ ]]; then
  echo "setup: FTRUN_TORCH=${torch_choice}: expected a torch version such as 2.14.1 (pinned: pip install torch==VERSION)" >&2
  exit 2
fi
extras=${FTRUN_EXTRAS:-test,lint,docs}
if ! [[ "$extras" =~ ^[a-z]+(,[a-z]+)*$ ]]; then
  echo "setup: FTRUN_EXTRAS=${extras}: expected extras of pyproject.toml separated by commas (test,lint,docs)" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
stamp=$VENV/.ftrun-installed
want=$( { cat pyproject.toml; echo "${FTRUN_TORCHFT:-}"; [ -z "$torch_choice" ] || echo "torch=$torch_version"
  [ -z "${FTRUN_EXTRAS:-}" ] || echo "extras=$extras"; } | sha1sum | cut -c1-40)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VPY" -c "import ftrun, torch, torchft" 2>/dev/null; then
  exit 0
fi
log=$VENV/setup.log  # pip's output; shown only when an install fails
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
    pip_install "torch $torch_version (GPU host: pip's default build)" "torch==$torch_version"
  else
    pip_install "torch $torch_version (CPU host)" "torch==$torch_version"
  fi
else
  have_torch=$("$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
  if [ -n "$torch_choice" ] && [ "${have_torch%%+*}" != "${torch_version%%+*}" ]; then
    echo "setup: $VENV already has torch $have_torch; FTRUN_TORCH=$torch_choice asks for $torch_version — not replacing it (use another FTRUN_VENV)" >&2
    exit 1
  fi
  step "keeping the importable torch ($have_torch)"
fi
# torch as installed, pinned for the steps below: torchft's or ftrun's requirements never move it
pin=$VENV/ftrun-torch-pin.txt
if ! "$VPY" -c 'from importlib import metadata; print("torch==" + metadata.version("torch"))' > "$pin" 2>>"$log"; then
  echo "setup: no torch distribution in $VENV after installing it (pip's output: $log)" >&2
  exit 1
fi
# Which distribution owns the importable torchft (none, torchft or torchft-nightly)?
have_dist=$("$VPY" - <<'PYEOF'
from importlib import metadata
have = []
for d in ("torchft", "torchft-nightly"):
    try:
        metadata.version(d)
        have.append(d)
    except metadata.PackageNotFoundError:
        pass
print(" ".join(have))
PYEOF
)
if [ -z "$have_dist" ] || ! "$VPY" -c "import torchft" 2>/dev/null; then
  [ -z "$have_dist" ] || { echo "setup: $have_dist is installed in $VENV but torchft does not import; reinstall it or use a fresh venv" >&2; exit 1; }
  pip_install "$want_dist" -c "$pin" "$want_req"
elif [ -n "${FTRUN_TORCHFT:-}" ] && [ "$have_dist" != "$want_dist" ]; then
  echo "setup: $VENV already has $have_dist; FTRUN_TORCHFT=$FTRUN_TORCHFT asks for $want_dist — not replacing it (use another FTRUN_VENV)" >&2
  exit 1
fi
pip_install "ftrun and its dependencies" -c "$pin" -e ".[$extras]"  # lint: scripts/lint.sh (ruff, mypy); docs: its mkdocs build
echo "$want" > "$stamp"
step "done: $VENV/bin/ftrun"
