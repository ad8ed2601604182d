#!/usr/bin/env bash
# Two hosts, one replica group each, joined by torchft's lighthouse — the commands of docs/hosts.md:
#
#   host0$ ftrun lighthouse --bind 0.0.0.0:29510 --min-replicas 2
#   host0$ ftrun train --lighthouse http://host0:29510 --replica-group-id 0 --num-replica-groups 2 --run-name job1
#   host1$ ftrun train --lighthouse http://host0:29510 --replica-group-id 1 --num-replica-groups 2 --run-name job1
#   any$   ftrun inspect-trace profiles/job1-group0 profiles/job1-group1   # both run dirs copied here
#
# Under the hood each `ftrun train --replica-group-id K` is one torchrun job on its host:
#   REPLICA_GROUP_ID=K NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://host0:29510 \
#   GLOO_SOCKET_IFNAME=IF NCCL_SOCKET_IFNAME=IF \
#   python -m ftrun.worker.agent --nnodes 1 --nproc-per-node 1 --master-addr ADDR --master-port PORT \
#       -m ftrun.worker.main profiles/job1-groupK/spec.json
# ADDR being this host's address on the interface IF that routes to the lighthouse (docs/hosts.md,
# "Several hosts"). tests/e2e/test_hosts_netns.py runs them on two network namespaces.
#
# This script runs the same thing on one machine over loopback, as a smoke test:
set -euo pipefail
cd "$(dirname "$0")/.."
FTRUN=${FTRUN:-.venv/bin/ftrun}
OUT=${OUT:-profiles}
STEPS=${STEPS:-40}
LH_OUT=$(mktemp "${TMPDIR:-/tmp}/ftrun-lighthouse.XXXXXX")
LH="" G0="" G1=""
# Every child is stopped however the script ends: a group that fails (set -e exits at once), the
# lighthouse that dies, Ctrl-C, SIGTERM or a closed terminal. `ftrun train` stops its own
# children on SIGTERM; it is waited for, so none outlives the script.
cleanup() {
  local p
  for p in $G0 $G1 $LH; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $G0 $G1 $LH; do wait "$p" 2>/dev/null || true; done
  rm -f "$LH_OUT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
"$FTRUN" lighthouse --bind 127.0.0.1:0 --min-replicas 2 --join-timeout-ms 10000 > "$LH_OUT" 2>/dev/null &
LH=$!
for _ in $(seq 50); do grep -q '^lighthouse: ' "$LH_OUT" && break; sleep 0.2; done
URL=$(sed -n 's/^lighthouse: //p' "$LH_OUT")
[ -n "$URL" ] || { echo "two_hosts: the lighthouse did not start" >&2; exit 1; }
echo "lighthouse at $URL"
"$FTRUN" train --lighthouse "$URL" --replica-group-id 0 --num-replica-groups 2 --run-name two-hosts --out "$OUT" --steps "$STEPS" --overwrite &
G0=$!
"$FTRUN" train --lighthouse "$URL" --replica-group-id 1 --num-replica-groups 2 --run-name two-hosts --out "$OUT" --steps "$STEPS" --overwrite &
G1=$!
# the first group to end, then the other: a failure exits at once (the EXIT trap stops the rest)
rc=0 first=""
wait -n -p first "$G0" "$G1" || rc=$?
[ "$rc" = 0 ] || { echo "two_hosts: a replica group failed (exit $rc); stopping the rest" >&2; exit "$rc"; }
wait "$([ "$first" = "$G0" ] && echo "$G1" || echo "$G0")" || rc=$?
[ "$rc" = 0 ] || { echo "two_hosts: a replica group failed (exit $rc); stopping the rest" >&2; exit "$rc"; }
G0="" G1=""
"$FTRUN" inspect-trace "$OUT/two-hosts-group0" "$OUT/two-hosts-group1"
