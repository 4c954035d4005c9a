#!/usr/bin/env bash
# The live canary (issue 16), as root: real edge hosts in network namespaces (nginx, ccab-collector,
# ccab-agent), Kafka, the loader, the controller service and a real Alertmanager. The faulty case
# makes the treatment hosts' path lossy; the controller must roll them back by itself (read back
# from the namespaces' sysctl) and page/resolve in Alertmanager; the clean case must not trip, and
# its stage's look (due --look-minutes after the hosts applied) must promote the treatment.
# Prints the minutes from fault onset to the last treatment host back on control, the page's life in
# Alertmanager (created, firing, resolved) and the clean case's promotion (every host on bbr).
# Not part of `make test` (~30 min; `--case clean` or `--case faulty` for one): `make live-canary`.
# `--case segment` (issue 32, ~15 min, not in `both`): a plan targeting access:mobile with bbr, the
# agents' BPF socket policy on nginx's cgroups, clients from a mobile and a fixed prefix; prints per
# treated host `segment: mobile on treatment A/B, fixed on control C/D` and the judge's verdict.
# Options: python -m ccab_workshop.lab.canary --help (--treatment-cc bbr2: a BBRv2 treatment arm on this kernel,
# ccab's BPF one loaded by the agents). Output of a run: docs/rollout/live-canary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "live-canary: needs root (network namespaces, nftables, sysctl); run it with sudo" >&2
  exit 2
fi
for b in bin/ccab-agent bin/ccab-collector .venv/bin/python; do
  [ -x "$b" ] || { echo "live-canary: $b missing: run make setup" >&2; exit 2; }
done
work=${LIVE_CANARY_DIR:-$(mktemp -d /tmp/ccab-live-canary.XXXXXX)}
export CCAB_DATA_DIR="$work/data"   # its own rollouts and warehouse: never another rollout's
export PYTHONPATH="$PWD/pipelines${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m ccab_workshop.lab.canary --out "$work/runs" "$@"
