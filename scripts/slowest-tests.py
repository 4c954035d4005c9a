"""The N slowest tests of the tiers just run (README, "Tests"): slowest-tests.py [-n N] REPORT.xml...

Reads the JUnit XML each tier writes (scripts/pytest-tier.sh) and prints one line per test, slowest
first: seconds (setup + call + teardown), the tier, the test (dotted module path :: name)."""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="slowest-tests.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="how many tests (default 10)")
    ap.add_argument("reports", nargs="+", type=Path, help="JUnit XML files (a missing one is named and skipped)")
    args = ap.parse_args(argv)
    rows = []
    for report in args.reports:
        if not report.is_file():
            print(f"slowest-tests: no report {report} (the tier did not run)", file=sys.stderr)
            continue
        for case in ET.parse(report).getroot().iter("testcase"):
            test = f"{case.get('classname', '')}::{case.get('name')}"  # module path (dotted), class, test
            rows.append((float(case.get("time") or 0), report.stem, test))
    print(f"the {min(args.n, len(rows))} slowest of {len(rows)} tests:")
    for seconds, tier, test in sorted(rows, reverse=True)[:args.n]:
        print(f"{seconds:8.1f} s  {tier:12s} {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
