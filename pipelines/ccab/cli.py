"""The ``ccab`` command: one CLI for people. Each subcommand lives in the module that owns it;
this file only wires them together (every module in COMMAND_MODULES has ``register(subparsers)``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from ccab import __version__

# Modules that contribute subcommands. Imported lazily so `ccab --help` stays fast
# and a heavy dependency of one command never slows down another.
COMMAND_MODULES = [
    "ccab.kafka_local",   # ccab kafka up|down|status|install
    "ccab.migrate",       # ccab db migrate|status|cluster-ddl
    "ccab.loader",        # ccab loader, ccab load
    "ccab.query",         # ccab query
    "ccab.env_info",      # ccab env
    "ccab.sim.cli",       # ccab sim
    "ccab.cohorts.cli", "ccab.plots.cli",  # ccab analyze, ccab dags list|test; ccab plot
    "ccab.judge.cli",     # ccab alerts, ccab power
    "ccab.rollout.cli",   # ccab rollout plan|start|status|step|promote|halt|rollback|resume|sim-actuator
    "ccab.lab.cli",       # ccab lab run|report
    "ccab.dashboards.build",  # ccab dashboards build|check
    "ccab.report.cli",    # ccab report
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccab",
        description="Congestion-control A/B rollouts and analytics for edge fleets.",
    )
    parser.add_argument("--version", action="version", version=f"ccab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):  # a command module not written yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
