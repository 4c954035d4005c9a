#!/usr/bin/env bash
# bench/collector, netlink part: the netlink sampler vs `ss -tinHOe` dumping the same
# 10,000 loopback sockets (wall and CPU time, median of 5), and the sampler's peak RSS
# with 100,000 sockets. Each runs in a fresh network namespace that is deleted afterwards.
# Needs root (namespaces, RLIMIT_NOFILE); prints a skip line otherwise.
#   CCAB_BENCH_SOCKETS (10000), CCAB_BENCH_RSS_SOCKETS (100000), CCAB_BENCH_REPS (5)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${CCAB_BENCH_SOCKETS:-10000}
rss_n=${CCAB_BENCH_RSS_SOCKETS:-100000}
reps=${CCAB_BENCH_REPS:-5}
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v ss >/dev/null; then
  echo "netlink bench: skipped (needs root, ip and ss)"
  exit 0
fi
tmp=$(mktemp -d)
nss=()
cleanup() {
  for ns in "${nss[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -o "$tmp/ccab-collector" ./collectors/cmd/ccab-collector
CGO_ENABLED=0 go build -o "$tmp/netlinkbench" ./bench/collector/netlinkbench
fresh_ns() { # sets ns
  ns="ccab-bench-$$-$1"
  ip netns add "$ns"
  nss+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
}
fresh_ns speed
ip netns exec "$ns" "$tmp/netlinkbench" -mode speed -sockets "$n" -reps "$reps" -collector "$tmp/ccab-collector"
ip netns delete "$ns"
fresh_ns rss
ip netns exec "$ns" "$tmp/netlinkbench" -mode rss -sockets "$rss_n" -collector "$tmp/ccab-collector"
