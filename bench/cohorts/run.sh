#!/usr/bin/env bash
# The hourly cohort job on 1M and 10M simulated tcp samples vs a pandas baseline computing the
# same histograms in the same run; prints both times, the ratio, and the 10M/1M scaling.
# Usage: bench/cohorts/run.sh [--samples N] [--keep]   (see bench_cohorts.py --help)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python bench/cohorts/bench_cohorts.py "$@"
