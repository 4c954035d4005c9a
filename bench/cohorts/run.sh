#!/usr/bin/env bash
# The hourly cohort job vs pandas, duckdb and polars on the same cells, in one run (bench_cohorts.py);
# with --parts, where the job's time goes against the floor of each of its parts (parts.py).
# Usage: bench/cohorts/run.sh [--mode close|samples|both] [--replicas 1,10] [--rounds R] [--keep]
#        bench/cohorts/run.sh --parts [--replicas 10] [--rounds R] [--keep]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--parts" ]]; then
    shift
    exec .venv/bin/python bench/cohorts/parts.py "$@"
fi
exec .venv/bin/python bench/cohorts/bench_cohorts.py "$@"
