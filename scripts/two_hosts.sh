#!/usr/bin/env bash
# Two hosts, one replica group each, joined by torchft's lighthouse — the plain commands.
#
# Host A (also runs the lighthouse):
#   ftrun lighthouse --bind 0.0.0.0:29510 --min-replicas 1 &
#   ftrun train --lighthouse http://HOST_A:29510 --replica-group-id 0 --num-replica-groups 2 \
#               --nproc-per-replica 8 --run-name job1 --out profiles
# Host B:
#   ftrun train --lighthouse http://HOST_A:29510 --replica-group-id 1 --num-replica-groups 2 \
#               --nproc-per-replica 8 --run-name job1 --out profiles
# Afterwards, with both run dirs on one machine (job1-group0, job1-group1):
#   ftrun inspect-trace profiles/job1-group0 profiles/job1-group1
#
# Under the hood each `ftrun train --replica-group-id K` is one torchrun job per host, exactly:
#   REPLICA_GROUP_ID=K NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://HOST_A:29510 \
#   python -m torch.distributed.run --nnodes 1 --nproc-per-node 8 --standalone \
#       -m ftrun.worker.main profiles/job1-groupK/spec.json
# (add --master-addr/--master-port instead of --standalone when you pin the group's store).
#
# This script runs the same thing on one machine over loopback, as a smoke test:
set -euo pipefail
cd "$(dirname "$0")/.."
FTRUN=${FTRUN:-.venv/bin/ftrun}
OUT=${OUT:-profiles}
STEPS=${STEPS:-40}
"$FTRUN" lighthouse --bind 127.0.0.1:0 --min-replicas 2 --join-timeout-ms 10000 > /tmp/ftrun-lighthouse.$$ 2>/dev/null &
LH=$!
trap 'kill $LH 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q '^lighthouse: ' /tmp/ftrun-lighthouse.$$ && break; sleep 0.2; done
URL=$(sed -n 's/^lighthouse: //p' /tmp/ftrun-lighthouse.$$)
echo "lighthouse at $URL"
"$FTRUN" train --lighthouse "$URL" --replica-group-id 0 --num-replica-groups 2 --run-name two-hosts --out "$OUT" --steps "$STEPS" --overwrite &
G0=$!
"$FTRUN" train --lighthouse "$URL" --replica-group-id 1 --num-replica-groups 2 --run-name two-hosts --out "$OUT" --steps "$STEPS" --overwrite
wait $G0
"$FTRUN" inspect-trace "$OUT/two-hosts-group0" "$OUT/two-hosts-group1"
