#!/usr/bin/env bash
# collectors/deploy/replay-sim.sh SIM_DIR [run flags...]
#
# Replays the raw sources of `ccab sim SCENARIO --raw --out SIM_DIR` through the real
# collector: one `ccab-collector run --once` per simulated host, reading
# SIM_DIR/ss/<host>/<ts_ms>.txt (--ss-replay-dir) and SIM_DIR/nginx/<host>/access.log (the
# tailer, from the beginning), stamped as that host (pop, kernel, arm and rollout_id from
# SIM_DIR/truth.json). Extra flags go to every run, e.g.:
#
#   collectors/deploy/replay-sim.sh .ccab/sim/canary --output kafka --kafka-brokers 127.0.0.1:19092
#   collectors/deploy/replay-sim.sh /tmp/tiny --output stdout > /tmp/tiny/collector.jsonl
#
# Per host it writes SIM_DIR/replay/<host>/: state.json (the rollout agent's state file:
# arm, rollout_id), proc/sys/net/ipv4/tcp_congestion_control (the arm's cc, which
# http_request/1 records carry) and a fresh collector state dir (the tailer's checkpoint
# would otherwise skip lines a previous run read, while the replay has no checkpoint).
# Records carry the simulator's sample rates (scenario.sampling in truth.json).
# Kafka may hold every record in flight (--kafka-max-inflight): a one-shot replay has no later
# run to send what backpressure would otherwise spool; a non-empty spool afterwards is an error.
# CCAB_COLLECTOR names the binary (default: ccab-collector on PATH); CCAB_SIM_SALT the
# sock_id salt (default: demo-salt).
set -euo pipefail
sim=${1:?usage: replay-sim.sh SIM_DIR [run flags...]}
shift
bin=${CCAB_COLLECTOR:-ccab-collector}
salt=${CCAB_SIM_SALT:-demo-salt}
[ -f "$sim/truth.json" ] && [ -d "$sim/ss" ] && [ -d "$sim/nginx" ] ||
  { echo "replay-sim: $sim has no truth.json, ss/ and nginx/ (run ccab sim with --raw)" >&2; exit 2; }

# host arm cc kernel pop rollout_id tcp_rate http_rate, one line per host
hosts=$(python3 - "$sim/truth.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
sc = t["scenario"]
cc = {a["name"]: a["cc"] for a in sc["arms"]}
for h in t["hosts"]:
    print(h["host"], h["arm"], cc[h["arm"]], h["kernel"], sc["pop"], sc["rollout_id"],
          sc["sampling"]["tcp_sample_rate"], sc["sampling"]["http_sample_rate"])
PY
)
status=0
while read -r host arm cc kernel pop rollout tcp_rate http_rate; do
  d="$sim/replay/$host"
  rm -rf "$d"
  mkdir -p "$d/proc/sys/net/ipv4"
  echo "$cc" >"$d/proc/sys/net/ipv4/tcp_congestion_control"
  printf '{"rollout_id":"%s","arm":"%s","cc":"%s","generation":1}\n' "$rollout" "$arm" "$cc" >"$d/state.json"
  if ! "$bin" run --once --host "$host" --pop "$pop" --kernel "$kernel" \
      --rollout-state-file "$d/state.json" --path-procfs "$d/proc" --state-dir "$d/collector" \
      --metrics-addr "" --log-level warn --kafka-max-inflight 5000000 \
      --nginx-paths "$sim/nginx/$host/access.log" --nginx-format json --nginx-start-at beginning \
      --sample-rate "$http_rate" \
      --ss-replay-dir "$sim/ss/$host" --ss-replay-source-sample-rate "$tcp_rate" --tcp-info-salt "$salt" \
      "$@"; then
    echo "replay-sim: $host failed" >&2
    status=1
  fi
  # A one-shot replay must leave nothing behind: records still in the spool would only be sent
  # by a later run of the same state dir.
  if [ -d "$d/collector/spool" ] && [ -n "$(find "$d/collector/spool" -type f -size +0 -name '*seg*' 2>/dev/null)" ]; then
    echo "replay-sim: $host left records in its spool ($d/collector/spool): Kafka did not take them all" >&2
    status=1
  fi
done <<<"$hosts"
exit $status
