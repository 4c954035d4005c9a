#!/usr/bin/env bash
# One tier of the Python tests (README, "Tests"): scripts/pytest-tier.sh NAME 'MARKER EXPRESSION' [pytest args].
# Every test's duration is recorded in $CCAB_DATA_DIR/test-reports/NAME.xml (JUnit XML, setup + call
# + teardown per test) and the 10 slowest are printed; the tier's wall time and the load average
# close the output. A tier that selects no test fails (pytest exit 5): a tier is never empty, so
# an empty one means a marker or a path went wrong, not that all is well.
set -uo pipefail
cd "$(dirname "$0")/.."
name=$1 marks=$2
shift 2
reports=${CCAB_DATA_DIR:-$PWD/.ccab}/test-reports
mkdir -p "$reports"
start=$SECONDS
.venv/bin/python -m pytest -q -m "$marks" --durations=10 --durations-min=1.0 \
  --junitxml="$reports/$name.xml" -o junit_family=xunit2 "$@"
rc=$?
elapsed=$((SECONDS - start))
printf '%s: %dm%02ds wall, load average %s (pytest exit %d; durations: %s)\n' "$name" $((elapsed / 60)) \
  $((elapsed % 60)) "$(cut -d' ' -f1-3 /proc/loadavg)" "$rc" "$reports/$name.xml"
if [ "$rc" -eq 5 ]; then
  echo "$name: FAILED: no test selected by -m '$marks' (pytest exit 5)" >&2
  exit 1
fi
exit "$rc"
