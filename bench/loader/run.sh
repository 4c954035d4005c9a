#!/usr/bin/env bash
# records/s through the loader vs ClickHouse ingesting the same bytes directly; prints the ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python bench/loader/bench_loader.py "$@"
