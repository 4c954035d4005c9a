#!/usr/bin/env bash
# bench/link: ccab-link at 100 Mbit/s, 1 Gbit/s and unlimited rate with an 80 ms RTT (40 ms
# each way, 1-BDP droptail buffer), next to the same transfer over a plain veth pair (no delay)
# in the same run. Per case and repeat: one TCP transfer (default BBR, 15 s, the first 5 s not
# counted) and 300 idle ICMP echo probes (10 ms apart, answered by B's kernel; the prober runs
# SCHED_FIFO via chrt when available, in every case alike). ccab-link runs with
# --rt-priority $CCAB_BENCH_RT (default 10; 0 = off). Prints the medians over repeats: goodput,
# goodput / configured rate, the link's delivered IP rate / configured rate, idle RTT and the
# delay error (median RTT - 80 ms - the veth's base RTT) / 80 ms, jitter (p99 - p50), and the
# link's own release lateness under load (from ccab_link_release_lateness_seconds).
# Needs root; prints a skip line otherwise.
#   CCAB_BENCH_REPS (3), CCAB_BENCH_SECONDS (15), CCAB_BENCH_CC (bbr), CCAB_BENCH_RT (10), CCAB_BENCH_CASES
#   (default "veth link-100M link-1G link-1G-x4 link-unlimited link-1G-nooffload"; x4 = four
#   parallel flows, so that one flow's ProbeRTT/recovery does not idle the link)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${CCAB_BENCH_REPS:-3}
secs=${CCAB_BENCH_SECONDS:-15}
cc=${CCAB_BENCH_CC:-bbr}
rt=${CCAB_BENCH_RT:-10}
prober=()
command -v chrt >/dev/null && prober=(chrt -f 5)
cases=${CCAB_BENCH_CASES:-"veth link-100M link-1G link-1G-x4 link-unlimited link-1G-nooffload"}
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || [ ! -e /dev/net/tun ]; then
  echo "link bench: skipped (needs root, ip and /dev/net/tun)"
  exit 0
fi
tmp=$(mktemp -d)
pfx="lk21b$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for ns in "${pfx}a" "${pfx}b" "${pfx}va" "${pfx}vb"; do ip netns delete "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -o "$tmp/ccab-link" ./lab/cmd/ccab-link
CGO_ENABLED=0 go build -o "$tmp/linkbench" ./bench/link/linkbench

mkns() {
  ip netns add "$1"
  ip -n "$1" link set lo up
  # 1 Gbit/s x 80 ms = 10 MB in flight: let the windows grow to 64 MB.
  ip netns exec "$1" sysctl -q -w net.ipv4.tcp_rmem="4096 131072 67108864" net.ipv4.tcp_wmem="4096 16384 67108864"
}
mkns "${pfx}a"; mkns "${pfx}b"; mkns "${pfx}va"; mkns "${pfx}vb"
ip -n "${pfx}va" link add veth0 type veth peer name veth1 netns "${pfx}vb"
ip -n "${pfx}va" addr add 10.222.0.1/24 dev veth0
ip -n "${pfx}vb" addr add 10.222.0.2/24 dev veth1
ip -n "${pfx}va" link set veth0 up
ip -n "${pfx}vb" link set veth1 up

scrape() { curl -s "http://$1/metrics" >"$2" 2>/dev/null || python3 -c "import urllib.request,sys;sys.stdout.write(urllib.request.urlopen('http://$1/metrics').read().decode())" >"$2"; }

results="$tmp/results.jsonl"
: >"$results"
echo "bench/link: $(date -u +%FT%TZ), $(nproc) cores, kernel $(uname -r), cc=$cc, ${secs}s transfers, $reps repeats, ccab-link --rt-priority $rt, prober: ${prober[*]:-normal}"
for rep in $(seq 1 "$reps"); do
  for c in $cases; do
    args=(--delay-ms 40 --buffer-bdp 1 --rt-priority "$rt")
    rate=0
    streams=1
    case $c in
      veth) ;;
      link-100M) rate=100e6 ;;
      link-1G) rate=1e9 ;;
      link-1G-x4) rate=1e9; streams=4 ;;
      link-1G-nooffload) rate=1e9; args+=(--no-offload) ;;
      link-unlimited) args=(--delay-ms 40 --rt-priority "$rt") ;;
      *) echo "unknown case $c" >&2; exit 2 ;;
    esac
    if [ "$c" = veth ]; then
      a="${pfx}va"; b="${pfx}vb"; dst=10.222.0.2; maddr=""
    else
      a="${pfx}a"; b="${pfx}b"; dst=10.221.9.2
      [ "$rate" != 0 ] && args+=(--rate-bps "$rate")
      rm -f "$tmp/ready"
      "$tmp/ccab-link" --netns-a "$a" --netns-b "$b" --addr-a 10.221.9.1/24 --addr-b 10.221.9.2/24 \
        --metrics-addr 127.0.0.1:0 --ready-file "$tmp/ready" "${args[@]}" >"$tmp/link.out" 2>"$tmp/link.err" &
      lpid=$!; pids+=("$lpid")
      for _ in $(seq 100); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
      [ -s "$tmp/ready" ] || { cat "$tmp/link.err" >&2; exit 1; }
      maddr=$(python3 -c "import json;print(json.load(open('$tmp/ready'))['metrics_addr'])")
    fi
    ip netns exec "$b" "$tmp/linkbench" sink -listen "$dst:5201" &
    spid=$!; pids+=("$spid")
    sleep 0.3
    ip netns exec "$a" "${prober[@]}" "$tmp/linkbench" rtt -dst "$dst" -count 300 -interval-ms 10 >"$tmp/rtt.json"
    ip netns exec "$a" "$tmp/linkbench" tcp -dst "$dst:5201" -seconds "$secs" -skip 5 -cc "$cc" -streams "$streams" >"$tmp/tcp.json" &
    tpid=$!
    if [ -n "$maddr" ]; then
      sleep 5; date +%s.%N >"$tmp/m0.t"; scrape "$maddr" "$tmp/m0"
      sleep $((secs - 6)); date +%s.%N >"$tmp/m1.t"; scrape "$maddr" "$tmp/m1"
    fi
    wait "$tpid"
    kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
    if [ -n "$maddr" ]; then
      kill -TERM "$lpid"; wait "$lpid" || { echo "ccab-link exited non-zero" >&2; cat "$tmp/link.err" >&2; }
    fi
    python3 - "$c" "$rate" "$secs" "$tmp" "$maddr" >>"$results" <<'EOF'
import json, sys, os
case, rate, secs, tmp, maddr = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
r = {"case": case, "rate_bps": rate}
r["rtt"] = json.load(open(os.path.join(tmp, "rtt.json")))
r["tcp"] = json.load(open(os.path.join(tmp, "tcp.json")))
if maddr:
    def parse(p):
        out = {}
        for line in open(p):
            if line.startswith("ccab_link_"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out
    m0, m1 = parse(os.path.join(tmp, "m0")), parse(os.path.join(tmp, "m1"))
    key = 'ccab_link_delivered_bytes_total{direction="up"}'
    r["window_s"] = float(open(os.path.join(tmp, "m1.t")).read()) - float(open(os.path.join(tmp, "m0.t")).read())
    r["link_ip_bps"] = (m1[key] - m0[key]) * 8 / r["window_s"]
    # release lateness quantiles (up direction) from the histogram delta
    b = sorted((float(k.split('le="')[1].split('"')[0]), m1[k] - m0.get(k, 0)) for k in m1
               if k.startswith('ccab_link_release_lateness_seconds_bucket{direction="up"'))
    tot = b[-1][1]
    def q(p):
        for le, c in b:
            if c >= p * tot:
                return le
        return float("inf")
    r["lateness_p50_s"], r["lateness_p99_s"], r["writes"] = q(0.5), q(0.99), tot
    drops = {k: m1[k] - m0.get(k, 0) for k in m1 if k.startswith("ccab_link_dropped_packets_total") and 'direction="up"' in k}
    r["drops_up"] = sum(drops.values())
print(json.dumps(r))
EOF
    tail -1 "$results" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('  rep %s %-18s goodput %7.1f Mbit/s  rtt p50 %.3f ms' % ('$rep', r['case'], r['tcp']['goodput_bps']/1e6, r['rtt']['p50_ms']))"
  done
done

python3 - "$results" <<'EOF'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
cases = []
for r in rows:
    if r["case"] not in cases:
        cases.append(r["case"])
med = lambda xs: st.median(xs) if xs else float("nan")
veth = [r for r in rows if r["case"] == "veth"]
base = med([r["rtt"]["p50_ms"] for r in veth]) if veth else 0.0
print()
print("medians over repeats; RTT configured 80 ms on the link cases; veth base RTT %.3f ms" % base)
print("| case | goodput Mbit/s | goodput/rate | link IP rate/rate | idle RTT p50 ms | delay error | jitter p99-p50 ms | RTT sd ms | release lateness p50/p99 (load) | drops/s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for c in cases:
    rs = [r for r in rows if r["case"] == c]
    rate = rs[0]["rate_bps"]
    g = med([r["tcp"]["goodput_bps"] for r in rs])
    p50 = med([r["rtt"]["p50_ms"] for r in rs])
    jit = med([r["rtt"]["p99_ms"] - r["rtt"]["p50_ms"] for r in rs])
    sd = med([r["rtt"]["sd_ms"] for r in rs])
    if c == "veth":
        print("| veth (no delay) | %.0f | – | – | %.3f | – | %.3f | %.3f | – | – |" % (g/1e6, p50, jit, sd))
        continue
    ratio = "%.3f" % (g / rate) if rate else "–"
    ipr = "%.3f" % (med([r["link_ip_bps"] for r in rs]) / rate) if rate else "%.0f Mbit/s" % (med([r["link_ip_bps"] for r in rs]) / 1e6)
    err = (p50 - 80 - base) / 80
    lat = "%.0f µs / %.0f µs" % (med([r["lateness_p50_s"] for r in rs]) * 1e6, med([r["lateness_p99_s"] for r in rs]) * 1e6)
    drops = med([r["drops_up"] / r["window_s"] for r in rs])
    print("| %s | %.0f | %s | %s | %.3f | %+.2f %% | %.3f | %.3f | %s | %.0f |" % (c, g/1e6, ratio, ipr, p50, err*100, jit, sd, lat, drops))
print("(lateness buckets are powers of two: a value is the bucket's upper bound)")
EOF
