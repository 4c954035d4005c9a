"""Plain-dict builders for Grafana 11 dashboard JSON (schemaVersion 39) on the ClickHouse plugin.

No Grafana SDK: a dashboard is a dict, written with sorted keys so the committed JSON diffs well.
Every query and every query variable names its datasource as ``${datasource}``, the dashboard's
datasource variable (pluginId ``grafana-clickhouse-datasource``): no datasource UID is ever
written. Template variables reach SQL only percent-encoded, inside a string literal, and decoded
by ClickHouse: ``sql_value("pop")`` / ``sql_in("arm", "arm")`` (see there and dashboards/README.md,
*Variables and quoting*); ccab/dashboards/expand.py mirrors what Grafana and the plugin do with them
(for the tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PLUGIN_ID = "grafana-clickhouse-datasource"
DS_REF = {"type": PLUGIN_ID, "uid": "${datasource}"}
SCHEMA_VERSION = 39

# --- variables in SQL --------------------------------------------------------------------------------
# Grafana's ``percentencode`` format (Grafana 11, formatRegistry) is encodeURIComponent plus ! ' ( ) *:
# every byte of the UTF-8 value outside A-Z a-z 0-9 - _ . ~ becomes %XX. Its output can hold no quote,
# backslash, comma or brace, so inside '...' it is inert text whatever the value, and ClickHouse's
# decodeURLComponent gives the value back exactly. (sqlstring / singlequote double or backslash the
# quote but leave a backslash alone: ``x\' OR 1=1 --`` ends the literal early in ClickHouse.)
# A multi-value variable (an array, "All" included when no allValue is set) renders as the encoded
# glob ``{v1,v2}`` = ``%7Bv1%2Cv2%7D``: the braces are stripped and the list split at ``%2C`` while
# still encoded (a ``%`` always starts a %XX triplet there, so ``%2C`` is always a comma), then each
# item decoded. A single value (a repeated panel's clone, a non-array value) has no braces: one item.
# A comma inside a multi-value item is therefore a separator (Grafana joins the array with commas
# before encoding, so the two cannot be told apart): it selects each part, never more.


def sql_literal(var: str) -> str:
    """The variable percent-encoded by Grafana, as a ClickHouse string literal (inert text)."""
    return f"'${{{var}:percentencode}}'"


def sql_value(var: str) -> str:
    """The exact value of single-value variable ``var`` (a ClickHouse String expression)."""
    return f"decodeURLComponent({sql_literal(var)})"


def sql_values(var: str) -> str:
    """The values of multi-value variable ``var`` (a ClickHouse Array(String) expression)."""
    e = sql_literal(var)
    inner = f"if(startsWith({e}, '%7B') AND endsWith({e}, '%7D'), substring({e}, 4, length({e}) - 6), {e})"
    return f"arrayMap(x -> decodeURLComponent(x), splitByString('%2C', {inner}))"


def sql_in(var: str, column: str) -> str:
    """``column`` is one of the values of multi-value variable ``var``."""
    return f"has({sql_values(var)}, {column})"


# The ClickHouse plugin's query formats (its Format enum) and query types.
FORMAT_TIMESERIES = 0
FORMAT_TABLE = 1

# What shape each panel type needs from its SQL (checked by pipelines/tests/test_dashboards.py).
#   timeseries: first column `time` (DateTime), sorted ascending, then numeric values (and string
#               labels, which the plugin turns long -> wide)
#   heatmap:    numeric x, numeric y bucket, numeric count (long; groupingToMatrix makes it rows)
#   xy:         numeric x, string series, numeric y (long; groupingToMatrix by series)
#   table/stat/bargauge/state-timeline: see each panel
SHAPES = ("timeseries", "heatmap", "xy", "table", "stat", "statetimeline")


@dataclass
class Panel:
    """One panel: a title, a Grafana panel type, its SQL and the shape that SQL must return."""

    title: str
    type: str
    sql: str
    shape: str
    description: str = ""
    w: int = 12
    h: int = 8
    unit: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    field_config: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    transformations: list[dict[str, Any]] = field(default_factory=list)
    repeat: str | None = None
    reads: tuple[str, ...] = ()  # tables the SQL reads (documentation, and checked by the tests)
    # Grafana's per-panel "relative time" (e.g. "24h"): the panel shows the last 24 h whatever the
    # dashboard's range — for panels over raw heartbeats, which are meant for hours, not months
    time_from: str | None = None

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"panel {self.title!r}: unknown shape {self.shape!r}")

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        fmt = FORMAT_TIMESERIES if self.shape == "timeseries" else FORMAT_TABLE
        defaults: dict[str, Any] = {"custom": {}}
        defaults.update(self.field_config)
        if self.unit:
            defaults["unit"] = self.unit
        out: dict[str, Any] = {
            "id": panel_id,
            "type": self.type,
            "title": self.title,
            "description": self.description,
            "datasource": dict(DS_REF),
            "gridPos": {"x": x, "y": y, "w": self.w, "h": self.h},
            "targets": [{
                "refId": "A",
                "datasource": dict(DS_REF),
                "editorType": "sql",
                "format": fmt,
                "queryType": "timeseries" if fmt == FORMAT_TIMESERIES else "table",
                "rawSql": self.sql.strip(),
            }],
            "fieldConfig": {"defaults": defaults, "overrides": list(self.overrides)},
            "options": dict(self.options),
            "transformations": list(self.transformations),
        }
        if self.time_from:
            out["timeFrom"] = self.time_from
        if self.repeat:
            out["repeat"] = self.repeat
            out["repeatDirection"] = "h"
            out["maxPerRow"] = 3
        return out


# Prometheus panels read the fleet's own metrics (ccab_collector_* ...) through the dashboard's
# `prometheus` variable (any Prometheus datasource; no UID). Their PromQL uses no template variable:
# nothing a dashboard viewer picks reaches it.
PROM_PLUGIN_ID = "prometheus"
PROM_DS_REF = {"type": PROM_PLUGIN_ID, "uid": "${prometheus}"}


@dataclass
class PromPanel:
    """A time-series panel of one PromQL expression (one series per ``legend`` label set)."""

    title: str
    expr: str
    legend: str
    description: str = ""
    w: int = 12
    h: int = 8
    unit: str | None = None
    field_config: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if re.search(r"\$(?!__rate_interval\b)", self.expr):
            raise ValueError(f"panel {self.title!r}: a template variable in PromQL (only $__rate_interval)")

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        defaults: dict[str, Any] = {"custom": {}}
        defaults.update(self.field_config)
        if self.unit:
            defaults["unit"] = self.unit
        return {
            "id": panel_id,
            "type": "timeseries",
            "title": self.title,
            "description": self.description,
            "datasource": dict(PROM_DS_REF),
            "gridPos": {"x": x, "y": y, "w": self.w, "h": self.h},
            "targets": [{"refId": "A", "datasource": dict(PROM_DS_REF), "expr": self.expr.strip(),
                         "legendFormat": self.legend, "range": True}],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": dict(self.options),
            "transformations": [],
        }


def prometheus_variable() -> dict[str, Any]:
    """The Prometheus datasource of :class:`PromPanel` panels."""
    return {
        "name": "prometheus",
        "label": "Prometheus",
        "type": "datasource",
        "query": PROM_PLUGIN_ID,
        "pluginId": PROM_PLUGIN_ID,
        "refresh": 1,
        "regex": "",
        "hide": 0,
        "current": {},
        "options": [],
    }


@dataclass
class Row:
    """A collapsible-free row header grouping the panels after it."""

    title: str


def datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "ClickHouse",
        "type": "datasource",
        "query": PLUGIN_ID,
        "pluginId": PLUGIN_ID,
        "refresh": 1,
        "regex": "",
        "hide": 0,
        "current": {},
        "options": [],
    }


def query_variable(name: str, label: str, sql: str, *, multi: bool = False, include_all: bool = False) -> dict[str, Any]:
    """A variable whose options come from the warehouse.

    ``include_all`` without an ``allValue``: Grafana then expands "All" to the array of every
    option, formatted like any selection (a custom allValue is a fixed string, inserted unformatted
    by most formats: the dashboards set none).
    """
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DS_REF),
        "definition": sql.strip(),
        "query": {"rawSql": sql.strip(), "editorType": "sql", "format": FORMAT_TABLE, "refId": "var"},
        "refresh": 2,  # on time range change
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "hide": 0,
        "regex": "",
        "current": {},
        "options": [],
    }


def custom_variable(name: str, label: str, values: list[tuple[str, str]], default: str) -> dict[str, Any]:
    """A fixed list of (value, text) options."""
    opts = [{"text": t, "value": v, "selected": v == default} for v, t in values]
    return {
        "name": name,
        "label": label,
        "type": "custom",
        "query": ",".join(f"{t} : {v}" for v, t in values),
        "multi": False,
        "includeAll": False,
        "hide": 0,
        "current": {"text": dict((v, t) for v, t in values)[default], "value": default},
        "options": opts,
    }


def layout(items: list[Panel | PromPanel | Row]) -> tuple[list[dict[str, Any]], dict[int, Panel]]:
    """Place panels left to right in rows 24 units wide; ids are 1.. in order.

    Returns the panels' JSON and panel id -> :class:`Panel` (what each SQL query must return;
    PromPanels are not in it)."""
    panels: list[dict[str, Any]] = []
    by_id: dict[int, Panel] = {}
    x = y = 0
    row_h = 0
    next_id = 1
    for item in items:
        if isinstance(item, Row):
            if x:
                y += row_h
            x, row_h = 0, 0
            panels.append({"id": next_id, "type": "row", "title": item.title, "collapsed": False,
                           "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
            y += 1
        else:
            if x + item.w > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(item.to_json(next_id, x, y))
            if isinstance(item, Panel):
                by_id[next_id] = item
            x += item.w
            row_h = max(row_h, item.h)
        next_id += 1
    return panels, by_id


def dashboard(uid: str, title: str, description: str, items: list[Panel | PromPanel | Row], variables: list[dict[str, Any]],
              *, annotations: list[dict[str, Any]] | None = None, time_from: str = "now-6h",
              tags: tuple[str, ...] = ("ccab",)) -> tuple[dict[str, Any], dict[int, Panel]]:
    builtin = {
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
        "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
    }
    panels, by_id = layout(items)
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(tags),
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "utc",
        "time": {"from": time_from, "to": "now"},
        "refresh": "1m",
        "links": [{"type": "dashboards", "tags": ["ccab"], "asDropdown": True, "title": "ccab", "includeVars": True,
                   "keepTime": True}],
        "templating": {"list": variables},
        "annotations": {"list": [builtin] + list(annotations or [])},
        "panels": panels,
    }, by_id
