#!/usr/bin/env bash
# records/s through the loader vs ClickHouse ingesting the same bytes directly; prints the ratio.
# --bad-fraction 0.5: the loader on all-good records vs half of them bad; prints the slowdown (goal <= 2x).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python bench/loader/bench_loader.py "$@"
