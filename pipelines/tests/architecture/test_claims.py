"""ARCHITECTURE.md's checkable claims hold: one parser of the warehouse's time text, one place
that catches any exception, plans take every metric the vocabulary lets the judge guard, the
report's hand-listed figures name real metrics, and the collector's main.go is wiring only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from factories import base_plan
from paths import REPO

PACKAGE = REPO / "pipelines" / "ccab"
WORKSHOP = REPO / "pipelines" / "ccab_workshop"

# --------------------------------------------------------------------------- time text parsers

#: module -> what it parses (ARCHITECTURE.md, base/chtime.py). Nothing else parses time text.
TIME_PARSERS = {
    "ccab/base/chtime.py": "ClickHouse DateTime('UTC') text",
    "ccab/cli/common.py": "an ISO time a person types (parse_time)",
    "ccab/alerting/alertmanager.py": "Alertmanager's RFC 3339 timestamps",
    "ccab_workshop/sim/scenario.py": "a scenario file's ISO start",
    # Not yet true: the alerts' store parses an alert's window_end itself (ISO or ClickHouse text,
    # as the alert was built or read back): to become chtime's one parser of both forms.
    "ccab/judge/alerts/store.py": "PENDING: an alert's window_end (should be chtime)",
}


def time_parsing_calls(source: str) -> list[int]:
    """Lines that call ``strptime`` or ``fromisoformat`` (datetime's, or anyone's)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("strptime", "fromisoformat")]


def test_only_the_named_modules_parse_time_text():
    found = {}
    for path in [*PACKAGE.rglob("*.py"), *WORKSHOP.rglob("*.py")]:
        rel = path.relative_to(REPO / "pipelines").as_posix()
        if (lines := time_parsing_calls(path.read_text())) and rel not in TIME_PARSERS:
            found[rel] = lines
    assert not found, f"time text parsed outside base/chtime.py (use chtime.parse_sql_time or cli.common.parse_time): {found}"


def test_the_time_parser_check_sees_a_planted_one():
    planted = "from datetime import datetime\nx = datetime.fromisoformat(row[0])\ny = datetime.strptime(s, f)\n"
    assert time_parsing_calls(planted) == [2, 3]


# ----------------------------------------------------------------------------- the error path

BROAD = re.compile(r"^\s*except\s*(Exception|BaseException)?\s*(as\s+\w+)?\s*:(.*)$")


def broad_excepts(source: str) -> list[str]:
    """``except Exception`` / bare ``except`` lines without a ``noqa: BLE001 - reason``."""
    out = []
    for line in source.splitlines():
        m = BROAD.match(line)
        if m and not re.search(r"noqa: BLE001 - \S", m.group(3)):
            out.append(line.strip())
    return out


def test_only_cli_main_catches_any_exception():
    """cli/__init__.py's main is the last error path (no traceback reaches a person, the log is
    named); a command that catches everything itself must say why on the line (noqa: BLE001 - ...)."""
    found = {p.name: broad_excepts(p.read_text()) for p in (PACKAGE / "cli").glob("*.py") if p.name != "__init__.py"}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"catch-all outside cli/__init__.py main: {found}"
    assert broad_excepts((PACKAGE / "cli" / "__init__.py").read_text())  # main's own is there


def test_the_error_path_check_sees_a_planted_catch_all():
    assert broad_excepts("try:\n    x()\nexcept Exception as exc:\n    pass\nexcept:\n    pass\n") == [
        "except Exception as exc:", "except:"]
    assert broad_excepts("except Exception as exc:  # noqa: BLE001 - a status line must not fail\n") == []


# ------------------------------------------------------------------------------ adding a metric

def test_plans_accept_a_guardrail_on_every_metric_the_judge_guards():
    """'Adding a metric: ... plans pick it up': a plan may guard every judged metric by every
    statistic the judge computes for it, with no list of its own."""
    from ccab.base.vocabulary import JUDGED_METRICS, statistics_of
    from ccab.rollout.plan import plan_from_dict

    guards = [{"metric": m, "statistic": s, "margin": 0.1} for m in JUDGED_METRICS for s in statistics_of(m)]
    assert len(guards) > len(JUDGED_METRICS)
    plan = plan_from_dict(base_plan(guardrails=guards))
    assert [(g.metric, g.statistic) for g in plan.guardrails] == [(g["metric"], g["statistic"]) for g in guards]


def test_the_dashboards_and_reports_show_what_the_vocabulary_declares():
    """A metric is declared once (vocabulary.Metric.shown_in): the Canary dashboard's metric picker,
    the rollout report's distributions and the daily report's figures are read from there, and the
    heatmaps' axes are vocabulary metrics."""
    from ccab.base.vocabulary import METRICS, shown_in
    from ccab.dashboards import definitions
    from ccab.report import build, daily

    assert [m for m, *_ in definitions.METRICS] == [m.name for m in shown_in("dashboard")]
    assert list(build.DISTRIBUTIONS) == [m.name for m in shown_in("report")]
    assert list(daily.FIGURE_METRICS) == [m.name for m in shown_in("daily")]
    assert all(definitions.METRICS) and build.DISTRIBUTIONS and daily.FIGURE_METRICS
    names = {m.name for m in METRICS}
    axes = {m for pair, *_ in (*build.HEATMAPS, *daily.HEATMAPS) for m in pair.split(":")}
    assert axes <= names, f"heatmaps of metrics the vocabulary does not define: {axes - names}"


# ------------------------------------------------------------------ ccab-collector's main.go

def go_logic(source: str) -> list[str]:
    """What makes a Go file more than wiring: functions besides main, control flow, goroutines."""
    body = re.sub(r"//.*", "", source)
    out = [f"func {name}" for name in re.findall(r"^func\s+(?:\([^)]*\)\s*)?(\w+)", body, re.M) if name != "main"]
    out += [kw for kw in ("if", "for", "switch", "select", "go", "defer") if re.search(rf"\b{kw}\b[ \t]", body)]
    return out


@pytest.mark.parametrize("main_go", ["collectors/cmd/ccab-collector/main.go"])
def test_collector_main_is_wiring_only(main_go):
    assert go_logic((REPO / main_go).read_text()) == []


def test_the_wiring_check_sees_logic():
    assert go_logic("package main\n// if only\nfunc main() {\n\tif x {\n\t}\n}\nfunc helper() {}\n") == [
        "func helper", "if"]


def test_named_files_exist():
    for rel in TIME_PARSERS:
        assert (REPO / "pipelines" / rel).exists() or rel.startswith("ccab/judge/alerts"), rel
    assert Path(REPO / "ARCHITECTURE.md").read_text().count("test_claims.py") >= 1
