"""The fleet dashboard's Prometheus panels (ccab.dashboards.model.PromPanel): records the edge
loses are on the dashboard, not only in alerts. Each expression is evaluated by promtool (a real
PromQL engine, `promtool test rules`) on series shaped like a collector's, and uses only metrics a
component exports."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from ccab.dashboards import definitions
from ccab.dashboards.model import PromPanel

from paths import REPO

ITEMS = definitions.fleet()[0]["panels"]
PROM_PANELS = {p["title"]: p for p in ITEMS if p.get("datasource", {}).get("type") == "prometheus"}


def _expr(title: str) -> str:
    # Grafana's $__rate_interval is at least 4 scrape intervals: 4m at promtool's 1m here
    return PROM_PANELS[title]["targets"][0]["expr"].replace("$__rate_interval", "4m")


def _promtool(tmp_path, tests: list[dict]) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found (Debian package 'prometheus'; make setup installs it)")
    (tmp_path / "empty.rules.yml").write_text("groups: []\n")
    f = tmp_path / "panels.test.yml"
    f.write_text(yaml.safe_dump({"rule_files": ["empty.rules.yml"], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([tool, "test", "rules", f.name], cwd=tmp_path, capture_output=True, text=True)


def test_fleet_dashboard_shows_every_loss_reason_of_the_collectors(tmp_path):
    title = "Collector records lost, by host and reason"
    assert title in PROM_PANELS, f"no panel {title!r} in the fleet dashboard: {sorted(PROM_PANELS)}"
    # 19,183 close events dropped by the kernel within 4 min, and a spool that shed 30 records
    series = [
        {"series": 'ccab_collector_records_dropped_total{job="ccab-collector", instance="e1:9464", pop="tyo1", '
                   'host="e1", reason="close_rcvbuf"}', "values": "0 0 0 19183 19183 19183 19183"},
        {"series": 'ccab_collector_records_dropped_total{job="ccab-collector", instance="e2:9464", pop="tyo1", '
                   'host="e2", reason="spool_full"}', "values": "0 10 20 30 30 30 30"},
    ]
    res = _promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": [{
        "expr": _expr(title), "eval_time": "4m",
        "exp_samples": [{"labels": '{pop="tyo1", host="e1", reason="close_rcvbuf"}', "value": 19183},
                        {"labels": '{pop="tyo1", host="e2", reason="spool_full"}', "value": 30}]}]}])
    assert res.returncode == 0, res.stdout + res.stderr


def test_records_at_risk_and_collectors_down(tmp_path):
    series = [
        {"series": 'ccab_collector_queue_records{job="ccab-collector", instance="e1:9464", pop="tyo1", host="e1"}',
         "values": "5x5"},
        {"series": 'ccab_collector_inflight_records{job="ccab-collector", instance="e1:9464", pop="tyo1", host="e1"}',
         "values": "120x5"},
        {"series": 'up{job="ccab-collector", instance="e1:9464", pop="tyo1", host="e1"}', "values": "1x5"},
        {"series": 'up{job="ccab-collector", instance="e2:9464", pop="tyo1", host="e2"}', "values": "0x5"},
    ]
    res = _promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": _expr("Records only in memory, per collector"), "eval_time": "3m",
         "exp_samples": [{"labels": '{pop="tyo1", host="e1"}', "value": 125}]},
        {"expr": _expr("Collectors not scraped, per PoP"), "eval_time": "3m",
         "exp_samples": [{"labels": '{pop="tyo1"}', "value": 1}]},
    ]}])
    assert res.returncode == 0, res.stdout + res.stderr


def test_prometheus_panels_use_exported_metrics_and_no_viewer_variable():
    go = (REPO / "collectors" / "metrics" / "metrics.go").read_text()
    exported = {"ccab_collector_" + n for n in re.findall(r'\bf\.(?:counter|counterVec|gauge|histogram)\("([a-z0-9_]+)"', go)}
    assert PROM_PANELS
    for title, p in PROM_PANELS.items():
        expr = p["targets"][0]["expr"]
        assert set(re.findall(r"\bccab_[a-z0-9_]+", expr)) <= exported, title
        assert p["datasource"] == {"type": "prometheus", "uid": "${prometheus}"}
    with pytest.raises(ValueError, match="template variable"):
        PromPanel("x", expr='up{pop="$pop"}', legend="")
