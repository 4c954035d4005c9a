"""``ccab dashboards build|check``: Grafana dashboards and provisioning files from code."""

from __future__ import annotations

import sys
from pathlib import Path

from ccab.dashboards.build import GENERATED_DIR, PROVISIONING_DIR, build, stale


def _cmd_build(args) -> int:
    for path in build(args.out, args.provisioning):
        print(path)
    return 0


def _cmd_check(args) -> int:
    bad = stale(args.out, args.provisioning)
    for path in bad:
        print(f"ccab dashboards check: {path} is not what the code generates (run `ccab dashboards build`)",
              file=sys.stderr)
    if not bad:
        print(f"ccab dashboards check: OK: {args.out} and {args.provisioning} are what the code generates")
    return 1 if bad else 0


def register(sub) -> None:
    p = sub.add_parser("dashboards", help="Grafana dashboards and provisioning files from code",
                       description="Write (build) or verify (check) the Grafana dashboards JSON and the provisioning "
                                   "files (ClickHouse datasource, dashboard provider, guardrail alert rules).")
    dsub = p.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    for name, func, helptext in (("build", _cmd_build, "write the files"),
                                 ("check", _cmd_check, "fail if the committed files differ from the code")):
        q = dsub.add_parser(name, help=helptext)
        q.add_argument("--out", type=Path, default=GENERATED_DIR, metavar="DIR",
                       help="dashboards JSON directory (default: dashboards/generated)")
        q.add_argument("--provisioning", type=Path, default=PROVISIONING_DIR, metavar="DIR",
                       help="provisioning directory (default: dashboards/provisioning)")
        q.set_defaults(func=func)
