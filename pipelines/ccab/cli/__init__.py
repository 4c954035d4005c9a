"""The ``ccab`` command: one CLI for people, the top layer of the package.

Each command group is one module of this package (``ccab.cli.<group>``) with
``register(subparsers)``; this file only wires them together and holds the one error path: a
:class:`~ccab.base.errors.UserError` prints one line and exits with its code; an OS error (a file
that is missing or in the way) prints one line naming the file; anything unexpected prints one
line naming where its traceback went (``$CCAB_DATA_DIR/logs/``) and exits 1. No traceback ever
reaches a person. A misspelled option prints the usage of the subcommand it was given to and the
closest option ("did you mean --from?")."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ccab import __version__
from ccab.base.errors import UserError, fail
from ccab.base.warehouse import WarehouseUnavailable

# Modules that contribute subcommands. Imported lazily so `ccab --help` stays fast
# and a heavy dependency of one command never slows down another.
COMMAND_MODULES = [
    "ccab.cli.kafka",       # ccab kafka up|down|status|install
    "ccab.cli.warehouse",   # ccab warehouse serve|up|down|status
    "ccab.cli.db",          # ccab db migrate|status|gen-landing|cluster-ddl
    "ccab.cli.load",        # ccab loader, ccab load
    "ccab.cli.query",       # ccab query
    "ccab.cli.env",         # ccab env
    "ccab.cli.sim",         # ccab sim
    "ccab.cli.analyze",     # ccab analyze, ccab dags list|test
    "ccab.cli.cohorts",     # ccab cohorts run [--shard K]
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


def _subparser_for(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The deepest (sub)parser the words of ``argv`` select (``rollout step`` -> its parser)."""
    current = parser
    for word in argv:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            current = subs[0].choices[word]
    return current


def _check_options(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A misspelled ``--option`` is reported by the subcommand it was given to, with the closest
    option, before argparse complains about a required option it therefore did not see."""
    target = _subparser_for(parser, argv)
    known = {o for p in (parser, target) for a in p._actions for o in a.option_strings}
    words = argv[:argv.index("--")] if "--" in argv else argv

    def is_known(word: str) -> bool:
        name = word.split("=", 1)[0]
        return name in known or len([o for o in known if o.startswith(name)]) == 1  # argparse's abbreviations

    unknown = [w for w in words if w.startswith("--") and w != "--" and not is_known(w)]
    if unknown:
        _unknown_arguments(parser, argv, unknown)


def _unknown_arguments(parser: argparse.ArgumentParser, argv: list[str], extras: list[str]) -> None:
    """Exit 2 with the usage of the subcommand that was given the unknown arguments, and the
    closest known option."""
    target = _subparser_for(parser, argv)
    options = [o for a in target._actions for o in a.option_strings]
    hints = []
    for word in extras:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close:
                hints.append(f"did you mean {close[0]}?")
    target.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def _log_dir() -> Path:
    """Where an unexpected error's traceback goes: ``$CCAB_DATA_DIR/logs`` when it can be written,
    else the system's temporary directory."""
    try:
        from ccab.base.config import settings
        d = settings().data_dir / "logs"
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except (Exception, SystemExit):
        pass
    return Path(tempfile.gettempdir())


def _unexpected(command: str, argv: list[str], exc: BaseException) -> int:
    """One line for a person, the traceback in a log file."""
    detail = " ".join(str(exc).split())[:200] or "(no message)"
    try:
        path = _log_dir() / f"ccab-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        path.write_text(f"ccab {' '.join(argv)}\n\n" + "".join(traceback.format_exception(exc)))
        where = f"details in {path}"
    except OSError:
        where = "no log file could be written"
    return fail(command, f"unexpected error: {type(exc).__name__}: {detail} ({where}; please report it)", 1)


def _os_error(command: str, exc: OSError) -> int:
    """A file that is missing, in the way or not writable: one line naming it."""
    what = exc.strerror or type(exc).__name__
    name = exc.filename if exc.filename is not None else ""
    hint = {
        FileExistsError: "choose another path or remove it",
        FileNotFoundError: "check the path (its parent folder must exist)",
        PermissionError: "choose a path you can write",
        IsADirectoryError: "give a file, not a folder",
        NotADirectoryError: "a part of the path is a file, not a folder",
    }.get(type(exc), "check the path")
    return fail(command, f"{what}: {name} — {hint}" if name else f"{what} — {hint}", 2 if name else 1)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    _check_options(parser, argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unknown_arguments(parser, argv, extras)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    command = args.command
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        return fail(command, str(exc), exc.exit_code)
    except WarehouseUnavailable as exc:  # the local service is down, or the server unreachable
        return fail(command, " ".join(str(exc).split()), 1)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except OSError as exc:
        if exc.filename is None and not isinstance(exc, (FileExistsError, FileNotFoundError, PermissionError)):
            return _unexpected(command, argv, exc)
        return _os_error(command, exc)
    except Exception as exc:  # the last line of defence: no traceback reaches a person
        return _unexpected(command, argv, exc)


if __name__ == "__main__":
    sys.exit(main())
