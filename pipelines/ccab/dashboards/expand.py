"""Expand a panel's SQL the way Grafana and the ClickHouse plugin would, without either.

Grafana interpolates template variables first (in the browser), then the plugin's backend
expands its macros. Both steps are mirrored here for the tests (pipelines/tests/test_dashboards.py):

- ``${name:percentencode}``: Grafana 11's formatRegistry (grafana/scenes and the legacy
  public/app/features/templating/formatRegistry.ts): a single value ``encodeURIComponentStrict(v)``,
  an array (a multi-value selection, "All" without allValue = every option)
  ``encodeURIComponentStrict('{' + values.join(',') + '}')``. encodeURIComponentStrict is
  encodeURIComponent (UTF-8, %XX upper-case hex, keeps A-Z a-z 0-9 - _ . ! ~ * ' ( )) that also
  encodes ``! ' ( ) *``: only A-Z a-z 0-9 - _ . ~ stay. (The docs' example,
  https://grafana.com/docs/grafana/latest/dashboards/variables/variable-syntax/#percentencode,
  shows no braces for a multi-value; the code adds them: the SQL accepts both.)
- any other use of a variable in SQL (``$pop``, ``${pop}``, ``${pop:raw}``, ``${pop:sqlstring}``,
  ...) is an error: the dashboards must not contain one (dashboards/README.md, *Variables and quoting*).
- ``$__timeFilter(col)`` -> ``col >= toDateTime(FROM) AND col <= toDateTime(TO)``,
  ``$__fromTime`` / ``$__toTime`` -> ``toDateTime(...)``,
  ``$__timeInterval(col)`` -> ``toStartOfInterval(toDateTime(col), INTERVAL N second)``,
  ``$__interval_s`` -> ``N`` (as in grafana-clickhouse-datasource 4.x).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Mapping, Sequence
from urllib.parse import quote

FORMATS = ("percentencode",)

_VAR_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(?!__)(\w+)|\[\[(\w+)(?::(\w+))?\]\]")
_MACRO_RE = re.compile(r"\$__(\w+)(?:\(([^()]*)\))?")


class ExpandError(ValueError):
    """The SQL uses a variable or macro that the dashboards must not use (or that is unknown)."""


def encode_uri_component_strict(text: str) -> str:
    """Grafana's encodeURIComponentStrict: UTF-8 bytes outside A-Z a-z 0-9 - _ . ~ as %XX.

    (A lone surrogate cannot be encoded: JavaScript throws URIError, Python UnicodeEncodeError.)
    """
    return quote(text, safe="", encoding="utf-8", errors="strict")


def format_value(value: str | Sequence[str], fmt: str) -> str:
    if fmt == "percentencode":
        if isinstance(value, str):
            return encode_uri_component_strict(value)
        return encode_uri_component_strict("{" + ",".join(value) + "}")
    raise ExpandError(f"variable format {fmt!r} is not allowed in SQL (use one of {FORMATS})")


def variables_used(sql: str) -> list[tuple[str, str | None]]:
    """(name, format) of every template variable reference in ``sql``."""
    out = []
    for m in _VAR_RE.finditer(sql):
        if m.group(1):
            out.append((m.group(1), m.group(2)))
        elif m.group(3):
            out.append((m.group(3), None))
        else:
            out.append((m.group(4), m.group(5)))
    return out


def interpolate(sql: str, variables: Mapping[str, str | Sequence[str]]) -> str:
    def repl(m: re.Match) -> str:
        name, fmt = (m.group(1), m.group(2)) if m.group(1) else (m.group(3) or m.group(4), m.group(5))
        if fmt is None:
            raise ExpandError(f"variable {name!r} used without a quoting format")
        if name not in variables:
            raise ExpandError(f"variable {name!r} has no value")
        return format_value(variables[name], fmt)

    return _VAR_RE.sub(repl, sql)


def expand_macros(sql: str, t_from: datetime, t_to: datetime, interval_s: int) -> str:
    f, t = int(t_from.timestamp()), int(t_to.timestamp())

    def repl(m: re.Match) -> str:
        name, arg = m.group(1), m.group(2)
        if name == "timeFilter" and arg:
            return f"{arg.strip()} >= toDateTime({f}) AND {arg.strip()} <= toDateTime({t})"
        if name == "timeInterval" and arg:
            return f"toStartOfInterval(toDateTime({arg.strip()}), INTERVAL {interval_s} second)"
        if name == "fromTime" and arg is None:
            return f"toDateTime({f})"
        if name == "toTime" and arg is None:
            return f"toDateTime({t})"
        if name == "interval_s" and arg is None:
            return str(interval_s)
        raise ExpandError(f"unknown or malformed macro {m.group(0)!r}")

    return _MACRO_RE.sub(repl, sql)


def expand(sql: str, variables: Mapping[str, str | Sequence[str]], t_from: datetime, t_to: datetime,
           interval_s: int = 60) -> str:
    """Variables first (Grafana), then macros (the plugin)."""
    return expand_macros(interpolate(sql, variables), t_from, t_to, interval_s)
