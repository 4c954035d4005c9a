"""The ``ccab`` command: one CLI for people, the top layer of the package.

Each command group is one module of this package (``ccab.cli.<group>``) with
``register(subparsers)``; this file only wires them together. Shared argument parsing and the one
error path live in :mod:`ccab.cli.common`."""

from __future__ import annotations

import argparse
import importlib
import sys

from ccab import __version__
from ccab.base.errors import UserError, fail

# Modules that contribute subcommands. Imported lazily so `ccab --help` stays fast
# and a heavy dependency of one command never slows down another.
COMMAND_MODULES = [
    "ccab.cli.kafka",       # ccab kafka up|down|status|install
    "ccab.cli.db",          # ccab db migrate|status|gen-landing|cluster-ddl
    "ccab.cli.load",        # ccab loader, ccab load
    "ccab.cli.query",       # ccab query
    "ccab.cli.env",         # ccab env
    "ccab.cli.sim",         # ccab sim
    "ccab.cli.analyze",     # ccab analyze, ccab dags list|test
    "ccab.cli.plot",        # ccab plot
    "ccab.cli.judge",       # ccab verdicts, ccab alerts, ccab power
    "ccab.cli.rollout",     # ccab rollout plan|start|status|step|promote|halt|rollback|resume|sim-actuator
    "ccab.cli.lab",         # ccab lab run|analyze|report
    "ccab.cli.dashboards",  # ccab dashboards build|check
    "ccab.cli.report",      # ccab report
    "ccab.cli.networks",    # ccab networks load|rank|status|lookup
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccab",
        description="Congestion-control A/B rollouts and analytics for edge fleets.",
    )
    parser.add_argument("--version", action="version", version=f"ccab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        return fail(args.command, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
