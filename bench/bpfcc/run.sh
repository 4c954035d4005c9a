#!/usr/bin/env bash
# bench/bpfcc: ccab's BPF congestion controls against the kernel's, on real sockets over
# ccab-link (TUN link with delay, a droptail buffer and random loss; lab/link/). Root.
#
# ccab-agent applies bbr2 to the sender namespace and vivace to a second namespace (a second
# "host": one agent, one algorithm per host) from signed assignments (--once; the agent loads and
# registers the BPF algorithm because this kernel has none), the script prints tcp_available_congestion_control, runs the cases, prints one line per
# comparison, each starting with "bpfcc", and rolls the namespace back (which unregisters the
# algorithm again when nothing else uses it). Every ratio compares flows of the same run.
#
#   bpfcc bbr2/bbr retrans R goodput G     1-BDP buffer, 20 ms RTT, 20 Mbit/s, two flows of one
#                                          algorithm (2 s apart); R = bbr2's retransmitted share of
#                                          bytes sent / bbr's, G = bbr2's goodput / bbr's
#   bpfcc bbr2/bbr <case> retrans R goodput G      the same for 8 BDP / 100 ms
#   bpfcc loss <p>% util bbr2 U bbr U cubic U       one flow, random loss p, goodput / rate
#   bpfcc jain cubic+bbr2 J cubic+bbr J             one Cubic and one BBR flow sharing (2-BDP)
#   bpfcc probe_rtt bbr2 period P s bbr period P s  mean gap between PROBE_RTT starts
#   bpfcc vivace loss1% util V cubic C queue_ms V cubic C jain2 J
#                                          one flow at 1 % random loss (util = goodput / rate);
#                                          queueing delay (RTT p50 - 20 ms) of one flow in an 8-BDP
#                                          buffer; Jain's index of two vivace flows (2 s apart)
#   bpfcc detail ...                                absolute figures behind the ratios
#
#   Every figure is the median over CCAB_BENCH_REPEATS (3) repeats of its case (a ratio is taken
#   within a repeat, then the median); "bpfcc detail ... repeats" lines list each repeat's value.
#
#   CCAB_BENCH_SECONDS (20), CCAB_BENCH_RATE_MBIT (20), CCAB_BENCH_REPEATS (3),
#   CCAB_BENCH_CASES (default "shallow deep rtt100 loss share probertt vivace"),
#   CCAB_BENCH_LOSSES (the loss case's rates, default "0.005 0.01 0.02 0.05"),
#   CCAB_BENCH_LOSS_RTT_MS (the loss case's base RTT, default 20; other values add "rtt N ms" to
#   its lines),
#   CCAB_BENCH_TRACE_DIR (if set, each flow's tcp_info samples and model go to a .trace file there)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${CCAB_BENCH_SECONDS:-20}
rate=${CCAB_BENCH_RATE_MBIT:-20}
cases=${CCAB_BENCH_CASES:-"shallow deep rtt100 loss share probertt vivace"}
reps=${CCAB_BENCH_REPEATS:-3}
losses=${CCAB_BENCH_LOSSES:-"0.005 0.01 0.02 0.05"}
loss_rtt=${CCAB_BENCH_LOSS_RTT_MS:-20}
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || [ ! -e /dev/net/tun ]; then
  echo "bpfcc bench: skipped (needs root, ip and /dev/net/tun)"
  exit 0
fi
tmp=$(mktemp -d)
pfx="bpfcc$$"
a="${pfx}a"; b="${pfx}b"; v="${pfx}v"
pids=()
agent_applied=0
host="bench-bpfcc-$$"
echo 0 >"$tmp/gen"
apply() { # apply CC to namespace NS (host <prefix>-NS) through the agent; prints its status line
  local gen=$(( $(cat "$tmp/gen") + 1 )); echo "$gen" >"$tmp/gen"  # a file: $(apply) is a subshell
  "$tmp/ccflow" sign -seed contracts/vectors/test_ed25519_seed.hex -host "$host-$2" -cc "$1" -generation "$gen" >"$tmp/asg.json"
  "$tmp/ccab-agent" --once --assignment-file "$tmp/asg.json" --netns "$2" --host "$host-$2" --pop bench \
    --public-key contracts/vectors/test_ed25519_public.b64 --state-file "$tmp/state-$2.json" --metrics-addr "" --log-level warn
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ $agent_applied = 1 ]; then  # the rollback: the last user out unregisters the BPF algorithm
    apply bbr "$a" >/dev/null 2>&1 || echo "bpfcc bench: rollback of $a through the agent failed" >&2
    apply bbr "$v" >/dev/null 2>&1 || echo "bpfcc bench: rollback of $v through the agent failed" >&2
  fi
  for ns in "$a" "$b" "$v"; do ip netns delete "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -o "$tmp/" ./lab/cmd/ccab-link ./rollout/cmd/ccab-agent ./bench/bpfcc/ccflow

for ns in "$a" "$b" "$v"; do
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_rmem="4096 131072 67108864" net.ipv4.tcp_wmem="4096 16384 67108864"
done

echo "bench/bpfcc: $(date -u +%FT%TZ), $(nproc) cores, kernel $(uname -r), ${rate} Mbit/s bottleneck (ccab-link), ${secs}s runs, ${reps} repeats; load average $(cut -d' ' -f1-3 /proc/loadavg)"
agent_applied=1
st=$(apply bbr2 "$a") || { echo "$st"; echo "bpfcc bench: the agent did not apply bbr2" >&2; exit 1; }
echo "agent: $st"
vst=$(apply vivace "$v" 2>&1) && echo "agent: $vst" || echo "agent (vivace): $(echo "$vst" | tail -1)"
echo "tcp_available_congestion_control: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"

# link LABEL DELAY_ONE_WAY_MS BUFFER_BDP LOSS: (re)start ccab-link between a and b
lpid=""
link() {
  if [ -n "$lpid" ]; then kill -TERM "$lpid" 2>/dev/null || true; wait "$lpid" 2>/dev/null || true; fi
  rm -f "$tmp/ready"
  "$tmp/ccab-link" --netns-a "$a" --netns-b "$b" --addr-a 10.231.9.1/24 --addr-b 10.231.9.2/24 \
    --delay-ms "$2" --rate-bps "${rate}e6" --buffer-bdp "$3" --loss "$4" --seed 7 --rt-priority 10 \
    --ready-file "$tmp/ready" >"$tmp/link.out" 2>"$tmp/link.err" &
  lpid=$!; pids+=("$lpid")
  for _ in $(seq 100); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
  [ -s "$tmp/ready" ] || { cat "$tmp/link.err" >&2; exit 1; }
}
spid=""
start_sink() {
  if [ -n "$spid" ]; then kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; fi
  ip netns exec "$b" "$tmp/ccflow" sink -listen 10.231.9.2:5301 &
  spid=$!; pids+=("$spid"); sleep 0.2
}
# flows OUT FLOWS STARTS [SECONDS]
flows() {
  local tr=()
  [ -n "${CCAB_BENCH_TRACE_DIR:-}" ] && tr=(-trace "$CCAB_BENCH_TRACE_DIR/$1.trace")
  "$tmp/ccflow" send -netns "$a" -dst 10.231.9.2:5301 -flows "$2" -starts "$3" -seconds "${4:-$secs}" -skip 5 "${tr[@]}" >"$tmp/$1.json"
}
# every case runs $reps times (the algorithms alternate within a repeat, so each ratio compares
# runs a few seconds apart); a bpfcc line prints the median over the repeats of each figure
# (ratios taken within a repeat first), a "bpfcc detail ... repeats" line every repeat's value
py() { python3 - "$tmp" "$reps" "$@"; }
pyhead='
import json, sys, os, statistics
tmp, reps = sys.argv[1], int(sys.argv[2])
args = sys.argv[3:]
ld = lambda n: json.load(open(os.path.join(tmp, n + ".json")))["flows"]
med = statistics.median
def jain(x):
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if sum(x) else float("nan")
def each(v):
    return " ".join("%.3f" % x for x in v)
'

pair_case() { # LABEL DELAY BUFFER: two flows of each algorithm, then the bbr2/bbr line
  local label=$1
  link "$label" "$2" "$3" 0
  start_sink
  for r in $(seq "$reps"); do
    for cc in bbr2 bbr cubic; do flows "$label-$cc-$r" "$cc,$cc" "0,2"; done
  done
  py "$label" <<PYEOF
$pyhead
label = args[0]
R, G = [], []
for rep in range(1, reps + 1):
    r = {}
    for cc in ("bbr2", "bbr", "cubic"):
        fl = ld(f"{label}-{cc}-{rep}")
        sent = sum(f["bytes_sent"] for f in fl); re = sum(f["bytes_retrans"] for f in fl)
        r[cc] = {"goodput": sum(f["goodput_bps"] for f in fl), "retrans": re / sent if sent else 0.0,
                 "rtt": sorted(f["rtt_p50_ms"] for f in fl)[0], "model": [f.get("model", "") for f in fl]}
        print("bpfcc detail %s #%d %s goodput %.2f Mbit/s retrans %.3f %% rtt_p50 %.1f ms%s" % (
            label, rep, cc, r[cc]["goodput"] / 1e6, r[cc]["retrans"] * 100, r[cc]["rtt"],
            ("  model: " + "; ".join(m for m in r[cc]["model"] if m)) if any(r[cc]["model"]) else ""))
    R.append(r["bbr2"]["retrans"] / r["bbr"]["retrans"] if r["bbr"]["retrans"] > 0 else float("inf"))
    G.append(r["bbr2"]["goodput"] / r["bbr"]["goodput"] if r["bbr"]["goodput"] > 0 else float("nan"))
print("bpfcc detail %s repeats retrans %s goodput %s" % (label, each(R), each(G)))
name = "bpfcc bbr2/bbr" if label == "1bdp-20ms" else "bpfcc bbr2/bbr %s" % label
print("%s retrans %.3f goodput %.3f" % (name, med(R), med(G)))
PYEOF
}

for c in $cases; do
  case $c in
    shallow) pair_case 1bdp-20ms 10 1 ;;
    deep) pair_case 8bdp-20ms 10 8 ;;
    rtt100) pair_case 1bdp-100ms 50 1 ;;
    loss)
      for p in $losses; do
        link "loss$p" $((loss_rtt / 2)) 2 "$p"; start_sink
        for r in $(seq "$reps"); do
          for cc in bbr2 bbr cubic; do flows "loss$p-$cc-$r" "$cc" "0"; done
        done
        py "$p" "$rate" "$loss_rtt" <<PYEOF
$pyhead
p, rate = args[0], float(args[1]) * 1e6
at = "" if args[2] == "20" else " rtt %s ms" % args[2]
u = {cc: [ld(f"loss{p}-{cc}-{rep}")[0]["goodput_bps"] / rate for rep in range(1, reps + 1)] for cc in ("bbr2", "bbr", "cubic")}
print("bpfcc detail loss %g%%%s repeats %s" % (float(p) * 100, at, "  ".join("%s %s" % (cc, each(v)) for cc, v in u.items())))
print("bpfcc loss %g%%%s util bbr2 %.3f bbr %.3f cubic %.3f" % (float(p) * 100, at, med(u["bbr2"]), med(u["bbr"]), med(u["cubic"])))
PYEOF
      done ;;
    share)
      link share 10 2 0; start_sink
      for r in $(seq "$reps"); do
        for cc in bbr2 bbr; do flows "share-$cc-$r" "cubic,$cc" "0,0"; done
      done
      py <<PYEOF
$pyhead
out = []
for cc in ("bbr2", "bbr"):
    js = []
    for rep in range(1, reps + 1):
        x = [f["goodput_bps"] for f in ld(f"share-{cc}-{rep}")]
        js.append(jain(x))
        print("bpfcc detail share #%d cubic %.2f Mbit/s %s %.2f Mbit/s" % (rep, x[0] / 1e6, cc, x[1] / 1e6))
    out.append("cubic+%s %.3f" % (cc, med(js)))
print("bpfcc jain " + " ".join(out))
PYEOF
      ;;
    probertt)
      link probertt 10 1 0; start_sink
      for r in $(seq "$reps"); do
        for cc in bbr2 bbr; do flows "prt-$cc-$r" "$cc" "0" 32; done
      done
      py <<PYEOF
$pyhead
out = []
for cc in ("bbr2", "bbr"):
    gaps = []
    for rep in range(1, reps + 1):
        f = ld(f"prt-{cc}-{rep}")[0]
        s = f["probe_rtt_starts_s"]
        gaps += [b - a for a, b in zip(s, s[1:])]
        print("bpfcc detail probe_rtt #%d %s starts %s (from %s)" % (rep, cc, " ".join("%.1f" % v for v in s), f["probe_rtt_from"]))
    out.append("%s period %s" % (cc, "%.1f s" % med(gaps) if gaps else "n/a"))
print("bpfcc probe_rtt " + " ".join(out))
PYEOF
      ;;
    vivace)
      grep -q '"cc_effective":"vivace"' <<<"${vst:-}" || continue
      link vloss 10 2 0.01; start_sink
      for r in $(seq "$reps"); do
        for cc in vivace cubic; do flows "vloss-$cc-$r" "$cc" "0"; done
      done
      link vdeep 10 8 0; start_sink
      for r in $(seq "$reps"); do
        for cc in vivace cubic; do flows "vdeep-$cc-$r" "$cc" "0"; done
      done
      link vfair 10 2 0; start_sink
      for r in $(seq "$reps"); do flows "vfair-$r" "vivace,vivace" "0,2"; done
      py "$rate" <<PYEOF
$pyhead
rate = float(args[0]) * 1e6
R = range(1, reps + 1)
u = {cc: [ld(f"vloss-{cc}-{r}")[0]["goodput_bps"] / rate for r in R] for cc in ("vivace", "cubic")}
q = {cc: [ld(f"vdeep-{cc}-{r}")[0]["rtt_p50_ms"] - 20 for r in R] for cc in ("vivace", "cubic")}
js = []
for r in R:
    for cc in ("vivace", "cubic"):
        f = ld(f"vdeep-{cc}-{r}")[0]
        print("bpfcc detail vivace-case #%d deep8bdp %s goodput %.2f Mbit/s rtt_p50 %.1f ms retrans %.3f %%%s" % (
            r, cc, f["goodput_bps"] / 1e6, f["rtt_p50_ms"], f["retrans_share"] * 100, ("  model: " + f["model"]) if f.get("model") else ""))
    x = [f["goodput_bps"] for f in ld(f"vfair-{r}")]
    js.append(jain(x))
    print("bpfcc detail vivace-case #%d fair %s" % (r, " ".join("%.2f Mbit/s" % (v / 1e6) for v in x)))
print("bpfcc detail vivace-case repeats util %s cubic %s jain2 %s" % (each(u["vivace"]), each(u["cubic"]), each(js)))
print("bpfcc vivace loss1%% util %.3f cubic %.3f queue_ms %.1f cubic %.1f jain2 %.3f" % (
    med(u["vivace"]), med(u["cubic"]), med(q["vivace"]), med(q["cubic"]), med(js)))
PYEOF
      ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
echo "bpfcc detail load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if ! grep -q '"cc_effective":"vivace"' <<<"${vst:-}"; then echo "bpfcc vivace not run: $(echo "${vst:-}" | tail -1 | cut -c1-200)"; fi
