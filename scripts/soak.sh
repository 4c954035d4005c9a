#!/usr/bin/env bash
# The soak test of the whole system (issue 28), as root: Kafka, the warehouse service, the loader,
# the controller service, the hourly job, an analyst loop, Alertmanager with a webhook receiver and
# edge hosts in network namespaces (nginx, ccab-collector, ccab-agent), each a separate process,
# while two rollouts run on disjoint hosts (one faulty, one clean) and chaos is injected on a
# seeded schedule (SIGKILLs, Kafka down 60 s, warehouse restart, hostile records, a stale state
# file, a second deployment). Prints one table and exits 1 when a goal is missed.
# Not part of `make test` (>= 30 min): `make soak`. Options: --minutes N (default 30), --seed S;
# python -m ccab_workshop.lab.soak --help. Output of a run: docs/soak.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "soak: needs root (network namespaces, nftables, sysctl); run it with sudo" >&2
  exit 2
fi
for b in bin/ccab-agent bin/ccab-collector .venv/bin/python; do
  [ -x "$b" ] || { echo "soak: $b missing: run make setup" >&2; exit 2; }
done
work=${SOAK_DIR:-$(mktemp -d /tmp/ccab-soak.XXXXXX)}
export CCAB_DATA_DIR="$work/data"   # its own broker, warehouse service and rollouts
export PYTHONPATH="$PWD/pipelines${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m ccab_workshop.lab.soak --out "$work" "$@"
