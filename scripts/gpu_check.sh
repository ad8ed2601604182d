#!/usr/bin/env bash
# NCCL path check on one GPU host: 2 replica groups on one device (each its own NCCL_HOSTID, as
# torchft's example does), streaming DiLoCo, then inspect the traces. Prints the verdict.
set -uo pipefail
cd "$(dirname "$0")/.."
FTRUN=${FTRUN:-ftrun}
command -v "$FTRUN" >/dev/null || FTRUN=.venv/bin/ftrun
OUT=${OUT:-/tmp/ftrun-gpu}
nvidia-smi -L || { echo "no GPU visible"; exit 2; }
"$FTRUN" train --backend nccl --mode streaming --replicas 2 --steps 60 --width 512 --out "$OUT" --run-name nccl --overwrite --json > "$OUT.train.json"
echo "train exit: $?"
"$FTRUN" inspect-trace "$OUT/nccl" --json > "$OUT.inspect.json"
code=$?
python3 - "$OUT.inspect.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
syncs = [e for e in d["events"] if e["kind"] == "sync"]
print("verdict:", d["verdict"], "| events:", len(d["events"]), "| syncs:", len(syncs))
for e in syncs:
    print(f"  replica {e['replica']} step {e['observed_step']} frag {e['fragment']} exposed {e.get('exposed_comm_ms')} ms hidden {e.get('hidden_comm_ms')} ms")
PY
echo "inspect exit: $code"
exit $code
