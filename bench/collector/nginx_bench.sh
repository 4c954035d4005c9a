#!/usr/bin/env bash
# bench/collector/nginx_bench.sh [LINES] — nginx access-log lines/s: ours vs peers, same file,
# same run. CCAB_BENCH_BASELINE=<git ref> also measures the collector built from that ref
# (extracted with `git archive`, the working tree is not touched), for before/after numbers
# from one run. CCAB_BENCH_ROUNDS=N repeats ours and the baseline N times, interleaved, and
# keeps each one's least CPU time (on a shared machine); CCAB_BENCH_NO_PEERS=1 skips the peers.
#
# The file: LINES (default 1,000,000) combined-format lines with the tcpinfo/msec fields an
# edge fleet appends (the `edge` format of collectors/nginxlog/testdata/combined_tcpinfo.conf),
# plus the same requests in the JSON `ccab` format.
#
# Measured (CPU seconds = user + sys, so "lines/s per core" does not depend on a busy
# neighbour's share of the 2 cores; wall time printed too):
#   ours/parse    `ccab-collector parse-nginx` over the file, records to /dev/null: the parser
#                 plus record encoding, no tailer.
#   ours/tailer   `ccab-collector run --once --output discard` on the static file: the tailer
#                 (read, split, parse, stamp, encode) and the sink's queue, no Kafka.
#   goaccess      `goaccess --log-format=COMBINED` to a JSON report (parses and aggregates).
#   mtail         `mtail --one_shot` with a program matching the combined format and counting
#                 lines and bytes.
# Goal in bench/README.md: ≥ 1M lines/s per core. Ratios are peer CPU / our CPU (> 1: we are
# faster); only the combined file is compared with the peers (they do not read the JSON
# format). The machine may be shared: the load average is printed, and CPU time (not wall
# time) is what the lines/s are per.
set -euo pipefail
cd "$(dirname "$0")/../.."
LINES=${1:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# CCAB_BENCH_NO_PEERS=1 skips goaccess and mtail (ours and the baseline only).
NO_PEERS=${CCAB_BENCH_NO_PEERS:-}
if [ -z "$NO_PEERS" ] && { ! command -v goaccess >/dev/null || ! command -v mtail >/dev/null; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing goaccess and mtail (peers) with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq goaccess mtail >/dev/null 2>&1 || true
  fi
fi

CGO_ENABLED=0 go build -o "$work/ccab-collector" ./collectors/cmd/ccab-collector
bin="$work/ccab-collector"
base=""
if [ -n "${CCAB_BENCH_BASELINE:-}" ]; then
  mkdir -p "$work/base"
  git archive "$CCAB_BENCH_BASELINE" collectors internal go.mod go.sum | tar -x -C "$work/base"
  (cd "$work/base" && CGO_ENABLED=0 go build -o "$work/ccab-collector-base" ./collectors/cmd/ccab-collector)
  base="$work/ccab-collector-base"
fi

python3 - "$LINES" "$work" <<'PY'
import json, random, sys
n, work = int(sys.argv[1]), sys.argv[2]
rng = random.Random(1)
paths = ["/", "/big.bin", "/v.mp4", "/img/a.png", "/api/v1/items?id=%d"]
agents = ["curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"]
with open(f"{work}/combined.log", "w") as c, open(f"{work}/ccab.log", "w") as j:
    for i in range(n):
        ip = f"198.51.{rng.randrange(256)}.{rng.randrange(256)}"
        t = 1763769600 + i // 1000
        msec = f"{t}.{i % 1000:03d}"
        path = rng.choice(paths).replace("%d", str(i))
        status, body = rng.choice([(200, rng.randrange(100, 5_000_000)), (206, 1048576), (404, 0)])
        rt = f"{rng.random() * 2:.3f}"
        rtt, cwnd = rng.randrange(200, 90000), rng.randrange(10, 400)
        c.write(f'{ip} - - [22/Nov/2025:00:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d} +0000] "GET {path} HTTP/1.1" '
                f'{status} {body} "-" "{rng.choice(agents)}" {msec} {rt} {i} 1 {body + 320} {rtt} {rtt // 4} {cwnd} 14600\n')
        j.write('{"msec":%s,"remote_addr":"%s","connection":%d,"connection_requests":1,"request_method":"GET",'
                '"status":%d,"bytes_sent":%d,"body_bytes_sent":%d,"request_time":%s,"tcpinfo_rtt":"%d",'
                '"tcpinfo_rttvar":"%d","tcpinfo_snd_cwnd":"%d","tcpinfo_rcv_space":"14600"}\n'
                % (msec, ip, i, status, body + 320, body, rt, rtt, rtt // 4, cwnd))
PY
edge_format="$(cat collectors/nginxlog/testdata/combined_tcpinfo.conf)"
cat > "$work/combined.mtail" <<'MTAIL'
counter lines
counter bytes
/^(?P<ip>\S+) \S+ \S+ \[(?P<ts>[^\]]+)\] "(?P<req>[^"]*)" (?P<status>\d+) (?P<body>\d+) "[^"]*" "[^"]*"/ {
  lines++
  bytes += $body
}
MTAIL

declare -A CPU WALL
measure() { # name, command...
  local name=$1; shift
  local t0 t1 s err
  err="$work/$(tr -c 'a-zA-Z0-9\n' _ <<<"$name").err"
  t0=$(date +%s.%N)
  /usr/bin/env time -f "%U %S" "$@" >/dev/null 2>"$err" || echo "$name: exit status $? (see below)"
  s=$(tail -1 "$err")
  t1=$(date +%s.%N)
  local c w
  c=$(awk '{print $1 + $2}' <<<"$s")
  w=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')
  # over several rounds the least CPU time is kept (a busy neighbour only ever adds to it)
  if [ -z "${CPU[$name]:-}" ] || awk -v a="$c" -v b="${CPU[$name]}" 'BEGIN{exit !(a < b)}'; then
    CPU[$name]=$c
    WALL[$name]=$w
  fi
  awk -v n="$LINES" -v c="$c" -v w="$w" -v name="$name" \
    'BEGIN{ if (c <= 0) c = 0.001; printf "%-26s %8.2f s CPU %8.2f s wall %12.0f lines/s per core\n", name, c, w, n / c }'
}

if ! command -v time >/dev/null && [ ! -x /usr/bin/time ]; then
  echo "note: /usr/bin/time missing (apt-get install time); using wall time as CPU time"
fi
echo "nginx log parsing, $LINES lines ($(du -h "$work/combined.log" | cut -f1) combined, $(du -h "$work/ccab.log" | cut -f1) JSON); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
ours() { # prefix, binary: parse-only and tailer+parser, combined and JSON
  local p=$1 b=$2
  rm -rf "$work/st-$p-1" "$work/st-$p-2" # no checkpoint: every round reads the whole file
  measure "$p/parse combined" "$b" parse-nginx --format "$edge_format" --format-name edge <"$work/combined.log"
  measure "$p/parse json" "$b" parse-nginx --format json <"$work/ccab.log"
  measure "$p/tailer combined" "$b" run --once --output discard --metrics-addr "" --state-dir "$work/st-$p-1" \
    --nginx-paths "$work/combined.log" --nginx-format "$edge_format" --nginx-format-name edge \
    --rollout-state-file /nonexistent --log-level error
  measure "$p/tailer json" "$b" run --once --output discard --metrics-addr "" --state-dir "$work/st-$p-2" \
    --nginx-paths "$work/ccab.log" --nginx-format json --rollout-state-file /nonexistent --log-level error
}
# CCAB_BENCH_ROUNDS=N (default 1): every measurement of ours (and the baseline) N times,
# interleaved, and the least CPU time of each is what the ratios and the goal lines use.
ROUNDS=${CCAB_BENCH_ROUNDS:-1}
for ((round = 1; round <= ROUNDS; round++)); do
  [ "$ROUNDS" -gt 1 ] && echo "round $round of $ROUNDS"
  ours ours "$bin"
  if [ -n "$base" ]; then
    ours base "$base"
  fi
done
if [ "$ROUNDS" -gt 1 ]; then
  echo "least CPU time of $ROUNDS rounds:"
  for k in "${!CPU[@]}"; do
    awk -v n="$LINES" -v c="${CPU[$k]}" -v name="$k" \
      'BEGIN{ if (c <= 0) c = 0.001; printf "  %-24s %8.2f s CPU %12.0f lines/s per core\n", name, c, n / c }'
  done | sort
fi
peers=()
if [ -n "$NO_PEERS" ]; then
  echo "goaccess, mtail: skipped (CCAB_BENCH_NO_PEERS)"
elif command -v goaccess >/dev/null; then
  measure "goaccess" goaccess "$work/combined.log" --log-format=COMBINED --no-progress --no-global-config \
    -o "$work/report.json"
  peers+=(goaccess)
else
  echo "goaccess: not installed (apt-get install goaccess)"
fi
if [ -n "$NO_PEERS" ]; then
  :
elif command -v mtail >/dev/null; then
  mkdir -p "$work/progs" && cp "$work/combined.mtail" "$work/progs/"
  measure "mtail" mtail --one_shot --one_shot_format=prometheus --progs "$work/progs" --logs "$work/combined.log" \
    --logtostderr=false
  peers+=(mtail)
else
  echo "mtail: not installed (apt-get install mtail)"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
ratio() { # label, numerator CPU, denominator CPU
  awk -v a="$2" -v b="$3" -v l="$1" 'BEGIN{ if (b <= 0) b = 0.001; printf "ratio %-66s %6.2fx\n", l, a / b }'
}
for p in "${peers[@]}"; do
  for o in "ours/parse combined" "ours/tailer combined"; do
    ratio "$o vs $p (CPU $p / CPU ours)" "${CPU[$p]}" "${CPU[$o]}"
    if [ -n "$base" ]; then
      b="base/${o#ours/}"
      ratio "$b vs $p (CPU $p / CPU base)" "${CPU[$p]}" "${CPU[$b]}"
    fi
  done
done
if [ -n "$base" ]; then
  for o in "parse combined" "parse json" "tailer combined" "tailer json"; do
    ratio "speedup $o ($CCAB_BENCH_BASELINE → working tree, CPU base / CPU ours)" "${CPU[base/$o]}" "${CPU[ours/$o]}"
  done
fi
for o in "parse combined" "parse json" "tailer combined" "tailer json"; do
  awk -v n="$LINES" -v c="${CPU[ours/$o]}" -v o="$o" 'BEGIN{ if (c <= 0) c = 0.001; r = n / c
    printf "goal ≥ 1,000,000 lines/s per core: %-16s %9.0f lines/s per core: %s\n", o, r, (r >= 1e6 ? "met" : "NOT met") }'
done
# issue #19's table row (bench/table19.py): the run path (tailer → parser → sink) on the
# combined format, next to the parser alone in the same run
awk -v n="$LINES" -v t="${CPU[ours/tailer combined]}" -v p="${CPU[ours/parse combined]}" 'BEGIN{
  if (t <= 0) t = 0.001; if (p <= 0) p = 0.001
  printf "table19 collector | %.2fM lines/s/core (parser alone %.2fM in the same run: %.2f of it; load avg %s) | %s\n",
    n / t / 1e6, n / p / 1e6, p / t, "'"$(cut -d' ' -f1 /proc/loadavg)"'", (n / t >= 1e6 ? "met" : "NOT met") }'
