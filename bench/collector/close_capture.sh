#!/usr/bin/env bash
# bench/collector, close-time capture: a real nginx (Debian nginx-light) in a server network
# namespace, CCAB_BENCH_CONNS (10,000) short HTTP/1.1 connections (`Connection: close`) of
# mixed sizes (1 KiB … 1 MiB; 1 in 20 through a 50 Mbit/s tbf bottleneck, at most 64 KiB there)
# from a client namespace, spread over CCAB_BENCH_SECONDS (30), while `ccab-collector run --output stdout` samples the server
# namespace: the netlink poller at its default interval (10 s) and the close-time capture in
# the same process. Runs at sample rates 1.0 and 0.1, and once with --close-capture=false (the
# poller alone, for the CPU baseline). Prints, per run: connections captured of those the hash
# sampled, final bytes matched (bytes_acked = what the client read + the FIN), what the poller
# saw of the same connections, and the collector's CPU time (utime+stime of /proc/PID/stat)
# per 1,000 connections closed. Needs root and nginx; prints a skip line otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${CCAB_BENCH_CONNS:-10000}
secs=${CCAB_BENCH_SECONDS:-30} # the connections are spread over this long, so the poller ticks 3 times
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v nginx >/dev/null || ! command -v tc >/dev/null; then
  echo "close capture bench: skipped (needs root, ip, tc and nginx)"
  exit 0
fi
old_allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
case " $old_allowed " in *" cubic "*) ;; *) sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$old_allowed cubic" ;; esac
. bench/collector/nginx_lab.sh
nginx_lab_up cc14b 231 "tcp_nopush on;" cubic
CGO_ENABLED=0 go build -o "$tmp/ccab-collector" ./collectors/cmd/ccab-collector
CGO_ENABLED=0 go build -o "$tmp/closebench" ./bench/collector/closebench

salt="bench-$$"
tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cpu_split() { awk '{print "utime " $14 " stime " $15 " ticks"}' "/proc/$1/stat"; }

settle() { # until the server namespace holds no connection but TIME-WAIT ones
  for _ in $(seq 300); do
    [ -z "$(ip netns exec "$srv" ss -tanH exclude time-wait exclude listening)" ] && break
    sleep 0.1
  done
  sleep 1
}

echo "close capture bench: $n connections per run over ${secs}s, nginx in a namespace, collector at the default poll interval (10s)"
echo "  kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
declare -A cpu_per_k
for run in "1.0 true" "0.1 true" "1.0 false"; do
  set -- $run
  rate=$1 capture=$2
  d="$tmp/run-$rate-$capture"
  mkdir -p "$d"
  "$tmp/ccab-collector" run --output stdout --nginx-enabled=false --tcp-info-enabled \
    --tcp-info-namespaces "$srv" --tcp-info-local-ports 80 --tcp-info-salt "$salt" --tcp-info-sample-rate "$rate" \
    --close-capture="$capture" --close-capture-coalesce "${CCAB_BENCH_COALESCE:-50ms}" --state-dir "$d/state" --rollout-state-file "$d/none.json" \
    --metrics-addr 127.0.0.1:0 --host bench --pop lab >"$d/records.jsonl" 2>"$d/collector.log" &
  cpid=$!
  pids+=("$cpid")
  for _ in $(seq 100); do grep -q 'msg=metrics' "$d/collector.log" && break; sleep 0.1; done
  sleep 0.5
  maddr=$(grep -o 'msg=metrics addr=[^ ]*' "$d/collector.log" | head -1 | sed 's/.*addr=//')
  t0=$(cpu_ticks "$cpid")
  split0=$(cpu_split "$cpid")
  start=$(date +%s.%N)
  ip netns exec "$cli" "$tmp/closebench" -mode fetch -targets 10.231.1.1:80,10.231.2.1:80 -weights 19,1 -n "$n" -seconds "$secs" >"$d/conns.jsonl"
  wall=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
  settle
  t1=$(cpu_ticks "$cpid")
  split1=$(cpu_split "$cpid")
  metrics=$(curl -s "http://$maddr/metrics" | grep -E '^ccab_collector_close_(events|emitted|dropped|enobufs|sampled)_total' | tr '\n' ' ' || true)
  kill -TERM "$cpid"
  wait "$cpid" || true
  closed=$(wc -l <"$d/conns.jsonl")
  cpu_ms=$(( (t1 - t0) * 1000 / tck ))
  per_k=$(echo "scale=1; $cpu_ms * 1000 / $closed" | bc)
  cpu_per_k["$rate-$capture"]=$per_k
  label="close capture + poller"
  [ "$capture" = false ] && label="poller alone (--close-capture=false)"
  echo "-- rate $rate, $label: $closed connections in ${wall}s wall"
  if [ "$capture" = true ]; then
    "$tmp/closebench" -mode judge -conns "$d/conns.jsonl" -records "$d/records.jsonl" -salt "$salt" -rate "$rate"
    echo "    metrics: ${metrics:-none}"
  else
    "$tmp/closebench" -mode judge -conns "$d/conns.jsonl" -records "$d/records.jsonl" -salt "$salt" -rate "$rate" | grep -v 'close capture'
  fi
  echo "    collector CPU: ${cpu_ms} ms for $closed connections = ${per_k} ms per 1,000 connections closed (before: $split0; after: $split1; $tck ticks/s)"
done
base=${cpu_per_k["1.0-false"]}
echo "CPU per 1,000 connections closed: rate 1.0 ${cpu_per_k["1.0-true"]} ms, rate 0.1 ${cpu_per_k["0.1-true"]} ms, poller alone ${base} ms"
