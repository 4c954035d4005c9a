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
tmp=$(mktemp -d)
srv="cc14b-srv-$$"
cli="cc14b-cli-$$"
pids=()
old_allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$tmp/nginx/nginx.pid" ] && kill "$(cat "$tmp/nginx/nginx.pid")" 2>/dev/null || true
  ip netns delete "$srv" 2>/dev/null || true
  ip netns delete "$cli" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -o "$tmp/ccab-collector" ./collectors/cmd/ccab-collector
CGO_ENABLED=0 go build -o "$tmp/closebench" ./bench/collector/closebench

case " $old_allowed " in *" cubic "*) ;; *) sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$old_allowed cubic" ;; esac
ip netns add "$srv"
ip netns add "$cli"
ip -n "$srv" link set lo up
ip -n "$cli" link set lo up
ip -n "$srv" link add cc14bf$$ type veth peer name cc14cf$$ netns "$cli"
ip -n "$srv" link add cc14bt$$ type veth peer name cc14ct$$ netns "$cli"
ip -n "$srv" addr add 10.231.1.1/24 dev cc14bf$$
ip -n "$cli" addr add 10.231.1.2/24 dev cc14cf$$
ip -n "$srv" addr add 10.231.2.1/24 dev cc14bt$$
ip -n "$cli" addr add 10.231.2.2/24 dev cc14ct$$
for d in cc14bf$$ cc14bt$$; do ip -n "$srv" link set "$d" up; done
for d in cc14cf$$ cc14ct$$; do ip -n "$cli" link set "$d" up; done
tc -n "$srv" qdisc add dev cc14bt$$ root tbf rate 50mbit burst 16k limit 30000
ip netns exec "$srv" sysctl -q -w net.ipv4.tcp_congestion_control=cubic
ip netns exec "$cli" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"

mkdir -p "$tmp/nginx/www"
for s in 1024 4096 16384 65536 262144 1048576; do head -c "$s" /dev/urandom >"$tmp/nginx/www/$s"; done
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
user root;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 10;
    default_type application/octet-stream;
    server {
        listen 10.231.1.1:80 backlog=1024;
        listen 10.231.2.1:80 backlog=1024;
        root $tmp/nginx/www;
    }
}
EOF
ip netns exec "$srv" nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf"
for _ in $(seq 50); do [ -s "$tmp/nginx/nginx.pid" ] && break; sleep 0.1; done

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
