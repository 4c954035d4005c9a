#!/usr/bin/env bash
# a circuit breaker's query while the hourly cohort job runs, through the warehouse service:
# serialized (one statement at a time) vs the service's parallel sessions + priority slot.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python bench/warehouse/bench_warehouse.py "$@"
