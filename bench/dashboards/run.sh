#!/usr/bin/env bash
# Every dashboard panel and analyst view on 90 days of rollups for a 500-host PoP (generated with
# INSERT ... SELECT ... FROM numbers()), each panel's best time against the goal (< 1 s) and
# against one scan of the rollup it reads. Usage: bench/dashboards/run.sh [--hosts N] [--days D]
# [--workdir DIR --keep]   (see bench_dashboards.py --help)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python bench/dashboards/bench_dashboards.py "$@"
