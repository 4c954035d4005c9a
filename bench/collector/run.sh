#!/usr/bin/env bash
# bench/collector: every *.sh here (netlink sampler vs ss, nginx parsing vs a peer, memory).
set -euo pipefail
cd "$(dirname "$0")"
status=0
for b in *.sh; do
  [ "$b" = run.sh ] && continue
  echo "-- bench/collector/$b"
  bash "$b" || status=1
done
exit $status
