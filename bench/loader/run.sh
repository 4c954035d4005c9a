#!/usr/bin/env bash
# records/s through the loader vs ClickHouse ingesting the same bytes directly; prints the ratio.
# --bad-fraction 0.5: the loader on all-good records vs half of them bad; prints the slowdown (goal <= 2x).
# --engine-share [ROUNDS]: the loader's statement against the limit's, part by part (engine_share.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--engine-share" ]; then
    shift
    exec .venv/bin/python bench/loader/engine_share.py "$@"
fi
exec .venv/bin/python bench/loader/bench_loader.py "$@"
