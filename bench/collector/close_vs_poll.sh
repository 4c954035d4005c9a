#!/usr/bin/env bash
# Polling only vs close records, one real run (the length bias made visible; docs/collector/close-vs-poll.md).
# A real nginx in a server namespace; from a client namespace CCAB_CVP_CONNS (3,000) short
# HTTP/1.1 connections of mixed sizes (1 KiB … 1 MiB, 1 in 20 through a 50 Mbit/s tbf bottleneck)
# spread over 30 s, plus 12 long downloads (32 MiB through the bottleneck, ~5 s each, 2 at a time),
# while `ccab-collector run --output stdout` polls the server namespace every CCAB_CVP_INTERVAL (1s,
# what the lab uses; the default is 10s) and captures every connection at close, sample rate 1.
# Writes OUT/records.jsonl (tcp_sample/1 + tcp_conn/1 lines), then runs close_vs_poll.py on it
# (per-connection distributions in SQL, table + PNG). Needs root and nginx.
# Usage: bench/collector/close_vs_poll.sh [OUT]   (default bench/out/close-vs-poll, and the figure
# into docs/collector/close-vs-poll.png; with OUT given, the figure goes into OUT too)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/out/close-vs-poll}
n=${CCAB_CVP_CONNS:-3000}
interval=${CCAB_CVP_INTERVAL:-1s}
if [ "$(id -u)" != 0 ] || ! command -v nginx >/dev/null || ! command -v tc >/dev/null || ! command -v curl >/dev/null; then
  echo "close vs poll: skipped (needs root, tc, curl and nginx)"
  exit 0
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
. bench/collector/nginx_lab.sh
nginx_lab_up cvp 232
head -c 33554432 /dev/urandom >"$tmp/nginx/www/big"
CGO_ENABLED=0 go build -o "$tmp/ccab-collector" ./collectors/cmd/ccab-collector
CGO_ENABLED=0 go build -o "$tmp/closebench" ./bench/collector/closebench

"$tmp/ccab-collector" run --output stdout --nginx-enabled=false --tcp-info-enabled \
  --tcp-info-namespaces "$srv" --tcp-info-local-ports 80 --tcp-info-salt "cvp-$$" --tcp-info-sample-rate 1 \
  --tcp-info-interval "$interval" --state-dir "$tmp/state" --rollout-state-file "$tmp/none.json" \
  --metrics-addr 127.0.0.1:0 --host cvp --pop lab >"$out/records.jsonl" 2>"$out/collector.log" &
cpid=$!
pids+=("$cpid")
for _ in $(seq 100); do grep -q 'msg=metrics' "$out/collector.log" && break; sleep 0.1; done
sleep 1
echo "close vs poll: $n short connections + 12 x 32 MiB through 50 Mbit/s, poll interval $interval, kernel $(uname -r)"
(for i in $(seq 6); do ip netns exec "$cli" curl -s -o /dev/null http://10.232.2.1/big; done) &
l1=$!
(sleep 2; for i in $(seq 6); do ip netns exec "$cli" curl -s -o /dev/null http://10.232.2.1/big; done) &
l2=$!
ip netns exec "$cli" "$tmp/closebench" -mode fetch -targets 10.232.1.1:80,10.232.2.1:80 -weights 19,1 -n "$n" -seconds 30 >"$out/conns.jsonl"
wait "$l1" "$l2"
for _ in $(seq 300); do
  [ -z "$(ip netns exec "$srv" ss -tanH exclude time-wait exclude listening)" ] && break
  sleep 0.1
done
sleep 2
kill -TERM "$cpid"
wait "$cpid" || true
echo "  $(wc -l <"$out/conns.jsonl") short connections closed; records: $(grep -c '"tcp_sample/1"' "$out/records.jsonl" || true) tcp samples, $(grep -c '"tcp_conn/1"' "$out/records.jsonl" || true) close records"
# the documented figure (docs/collector/close-vs-poll.png) only from a default run; with OUT given, into OUT
.venv/bin/python bench/collector/close_vs_poll.py "$out/records.jsonl" ${1:+--png "$out/close-vs-poll.png"}
