#!/usr/bin/env bash
# The rollout canary on the simulated PoP (issue #7 part 4), end to end on the embedded engines:
#   controller (ccab rollout) -> signed assignment/1 on Kafka -> SIMULATED actuator (stands in for
#   ccab-agent on the simulated hosts: verifies, answers agent_status/1 applied, records the arm
#   per host) -> the simulator generates the stage's window with exactly those arms -> loader ->
#   cohort rollups + judge at the look -> the controller rolls back the arm that breaches a
#   guardrail (bbr1: 4-6x Cubic's retransmits) and promotes the one that passes (bbr2), within
#   the blast-radius limit, printing its reasons. Runs after scripts/demo.sh (broker up, schema in).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCAB_DATA_DIR=${CCAB_DATA_DIR:-$PWD/.ccab}
ccab=.venv/bin/ccab
PLAN=${DEMO_ROLLOUT_PLAN:-rollout/plans/tyo1-bbr-canary.yaml}
ID=tyo1-bbr-canary
# A day after the main demo's window, so the two never mix in the warehouse.
FROM=${DEMO_ROLLOUT_FROM:-2025-11-21T00:00Z}
HOURS=${DEMO_ROLLOUT_HOURS:-3}
CONNECTIONS=${DEMO_ROLLOUT_CONNECTIONS:-150000}
TO=$(date -u -d "${FROM%Z} UTC + ${HOURS} hours" +%Y-%m-%dT%H:%MZ)

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# The plan first, before anything is started or deleted: a plan that does not validate must not
# cost the previous rollout's state and audit log (removed below for a fresh run).
if ! $ccab rollout plan "$PLAN" --json >/dev/null; then
  echo "demo-rollout: the plan $PLAN does not validate (see above); nothing was started or deleted" >&2
  exit 2
fi

$ccab kafka up >/dev/null
$ccab warehouse up >/dev/null
$ccab db migrate >/dev/null

keys="$CCAB_DATA_DIR/rollout-keys"   # a demo key pair, kept across runs (never the production key)
[ -f "$keys/rollout_ed25519_seed.hex" ] || $ccab rollout keygen --out "$keys"
export CCAB_ROLLOUT_KEY="$keys/rollout_ed25519_seed.hex"
rm -rf "$CCAB_DATA_DIR/rollouts/$ID"   # a fresh rollout each run (the topics keep history; generations only grow)

banner "Plan (dry run): who changes, in which order, under the blast-radius limit"
$ccab rollout plan "$PLAN"

banner "Simulated actuator (NOT ccab-agent: the simulated hosts have no kernel) follows the topic"
$ccab rollout sim-actuator --public-key "$keys/rollout_ed25519_public.b64" > "$CCAB_DATA_DIR/sim-actuator.log" 2>&1 &
actuator=$!
trap 'kill $actuator 2>/dev/null || true' EXIT

banner "Start: stage 'canary' (7 hosts per arm), at most 8 hosts leave control per step"
$ccab rollout start "$PLAN" --reason "demo canary"
$ccab rollout step "$ID" --wait-applied 60

banner "Simulated data for the stage window $FROM .. $TO, with the arms the actuator applied"
out="$CCAB_DATA_DIR/sim/rollout-$ID"
rm -rf "$out"
cp "$CCAB_DATA_DIR/sim-actuator/arm-map.json" "$CCAB_DATA_DIR/rollout-arm-map.json"
$ccab sim canary-tyo1 --start "$FROM" --hours "$HOURS" --connections "$CONNECTIONS" \
  --arm-map "$CCAB_DATA_DIR/rollout-arm-map.json" --out "$out" --no-progress | tail -4
$ccab load "$out"/*.jsonl | tail -2

banner "Look: hourly rollups + judge on $FROM .. $TO, then act"
$ccab rollout step "$ID" --from "$FROM" --to "$TO" --wait-applied 60

banner "Promotion continues step by step (blast radius), each batch after the last one applied"
for _ in 1 2 3 4; do
  status=$($ccab rollout status "$ID" --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$status" = completed ] && break
  $ccab rollout step "$ID" --wait-applied 60
done

banner "Status and the audit log ($CCAB_DATA_DIR/rollouts/$ID/audit.jsonl)"
$ccab rollout status "$ID" --audit 12
