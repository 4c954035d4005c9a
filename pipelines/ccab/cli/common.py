"""What several commands share: parsing of times and windows given on the command line, and
printing stored text safely."""

from __future__ import annotations

import re
from datetime import datetime, timezone

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(value) -> str:
    """Stored text as a terminal may show it: control characters (NUL, newline, tab, ESC...) as
    escapes (``\\n``, ``\\x00``), so a stored value can neither break a line nor drive the terminal."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def parse_time(text: str, name: str) -> datetime:
    """Parse an ISO date or date-time (``Z`` or an offset; naive = UTC) into an aware UTC datetime."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not an ISO date or date-time (e.g. 2025-11-20T13:00Z)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def parse_hour(text: str, name: str) -> datetime:
    """Parse an ISO date or date-time on a UTC hour boundary (see :func:`parse_time`)."""
    value = parse_time(text, name)
    if value != value.replace(minute=0, second=0, microsecond=0):
        raise ValueError(f"{name}: {text!r} is not on a UTC hour boundary; cohorts are whole hours "
                         f"(e.g. {value:%Y-%m-%dT%H}:00Z)")
    return value


def parse_window(t_from: str | None, t_to: str | None) -> tuple[datetime | None, datetime | None]:
    """Optional ``--from``/``--to`` hours (see :func:`parse_hour`); None where not given.
    ValueError (a usage error: exit 2) when both are given and ``--from`` is not before ``--to``."""
    start, end = (parse_hour(t_from, "--from") if t_from else None,
                  parse_hour(t_to, "--to") if t_to else None)
    if start and end and start >= end:
        raise ValueError(f"--from must be before --to (got --from {t_from} --to {t_to})")
    return start, end
