"""deploy/prometheus/ stays true to the code: every metric a rule uses is exported by a component
(or is in the controller's contract), every rule routes and explains itself, every rule has unit
tests that fire and stay quiet, and the scrape config uses the components' default ports.
(promtool itself runs in `make test-prometheus`.)"""

from __future__ import annotations

import re

import pytest
import yaml

from paths import REPO
PROM = REPO / "deploy" / "prometheus"


def _rules() -> list[dict]:
    doc = yaml.safe_load((PROM / "rules" / "ccab.rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _exported_metrics() -> dict[str, str]:
    """metric name -> where it is defined (histograms also give _bucket, _count, _sum)."""
    names: dict[str, str] = {}

    def add(name: str, where: str, histogram: bool = False) -> None:
        names[name] = where
        if histogram:
            for suffix in ("_bucket", "_count", "_sum"):
                names[name + suffix] = where

    go = REPO / "collectors" / "metrics" / "metrics.go"
    for kind, name in re.findall(r'\bf\.(counter|counterVec|gauge|histogram)\("([a-z0-9_]+)"', go.read_text()):
        add("ccab_collector_" + name, str(go.relative_to(REPO)), kind == "histogram")
    agent = REPO / "rollout" / "agent" / "metrics.go"
    for name in re.findall(r'\b(?:cv|g|c)\("([a-z0-9_]+)"', agent.read_text()):
        add("ccab_agent_" + name, str(agent.relative_to(REPO)))
    loader = REPO / "pipelines" / "ccab" / "ingest" / "loader.py"
    for kind, name in re.findall(r'\b(Counter|Gauge|Histogram)\("(ccab_[a-z0-9_]+)"', loader.read_text()):
        add(name, str(loader.relative_to(REPO)), kind == "Histogram")
    contract = PROM / "README.md"
    for name in re.findall(r"^\| `(ccab_(?:controller|rollout)_[a-z0-9_]+)` \|", contract.read_text(), re.M):
        add(name, "controller contract in deploy/prometheus/README.md")
    return names


def test_the_sources_are_parsed():
    names = _exported_metrics()
    # one known name from each source, so a changed definition style cannot empty the list silently
    for n in ("ccab_collector_records_dropped_total", "ccab_collector_poll_duration_seconds_bucket",
              "ccab_agent_refusals_total", "ccab_loader_lag_records", "ccab_controller_heartbeat_timestamp_seconds",
              "ccab_rollout_arm_state"):
        assert n in names, n
    assert len(names) > 60


def test_every_metric_a_rule_uses_is_exported_or_in_the_controller_contract():
    names = _exported_metrics()
    missing = {}
    for r in _rules():
        for m in set(re.findall(r"\bccab_[a-z0-9_]+", r["expr"])):
            if m not in names:
                missing.setdefault(r["alert"], []).append(m)
    assert missing == {}, f"rules use metrics nothing exports: {missing}"


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_every_rule_routes_and_explains_itself(rule):
    labels, ann = rule.get("labels", {}), rule.get("annotations", {})
    assert rule["alert"].startswith("Ccab")
    assert labels.get("severity") in ("page", "ticket")
    assert labels.get("component") in ("collector", "agent", "loader", "controller", "rollout")
    assert labels.get("team") == "ccab"
    for key in ("summary", "description", "runbook"):
        assert ann.get(key, "").strip(), f"{rule['alert']}: no {key}"


def test_every_rule_has_a_test_that_fires_and_one_that_stays_quiet():
    fires, quiet = set(), set()
    for f in sorted((PROM / "tests").glob("*.yml")):
        doc = yaml.safe_load(f.read_text())
        assert doc["rule_files"] == ["../rules/ccab.rules.yml"], f
        for group in doc["tests"]:
            for t in group.get("alert_rule_test", []):
                (fires if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = {r["alert"] for r in _rules()}
    assert alerts - fires == set(), "rules without a firing test"
    assert alerts - quiet == set(), "rules without a quiet test"
    assert (fires | quiet) - alerts == set(), "tests of rules that do not exist"


def test_the_scrape_config_uses_the_components_default_ports():
    collector = re.search(r'MetricsAddr:\s+"127\.0\.0\.1:(\d+)"', (REPO / "collectors/config/config.go").read_text())
    agent = re.search(r'"metrics-addr", "127\.0\.0\.1:(\d+)"', (REPO / "rollout/cmd/ccab-agent/main.go").read_text())
    loader = re.search(r'DEFAULT_METRICS_PORT = (\d+)', (REPO / "pipelines/ccab/cli/load.py").read_text())
    assert collector and agent and loader
    cfg = yaml.safe_load((PROM / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"ccab-collector", "ccab-agent", "ccab-loader", "ccab-controller", "ccab-link"}

    def sd_ports(job):
        ports = set()
        for sd in jobs[job]["file_sd_configs"]:
            for pattern in sd["files"]:
                for f in (PROM).glob(pattern):
                    for entry in yaml.safe_load(f.read_text()):
                        ports |= {t.rsplit(":", 1)[1] for t in entry["targets"]}
        return ports

    assert sd_ports("ccab-collector") == {collector.group(1)}
    assert sd_ports("ccab-agent") == {agent.group(1)}
    loader_targets = [t for sc in jobs["ccab-loader"]["static_configs"] for t in sc["targets"]]
    assert loader_targets == [f"127.0.0.1:{loader.group(1)}"]  # the loader binds 127.0.0.1 only
    controller_targets = [t for sc in jobs["ccab-controller"]["static_configs"] for t in sc["targets"]]
    assert controller_targets == ["127.0.0.1:9466"]  # the contract's port (README.md)
    link_targets = [t for sc in jobs["ccab-link"]["static_configs"] for t in sc["targets"]]
    # every component has its own port: two of them on one host (make demo: collector and loader)
    # must not fight over one
    ports = [collector.group(1), agent.group(1), loader.group(1), "9466"] + [t.rsplit(":", 1)[1] for t in link_targets]
    assert len(ports) == len(set(ports)), ports
