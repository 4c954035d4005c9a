"""Grafana provisioning files: the ClickHouse datasource, the dashboards' file provider and the
guardrail alert rules. Values that differ per installation are environment-variable placeholders
(Grafana expands ``$VAR`` / ``${VAR}`` in every provisioning file), so the files hold no host,
password. One UID is fixed on purpose: the provisioned datasource declares ``uid: ccab-clickhouse``
and the alert rules point at it (Grafana does not interpolate env vars in a rule's query model,
and a rule must name its datasource by UID). It is the UID this file gives the datasource, not
one copied from some Grafana instance; the dashboards never name a UID (``${datasource}``).
Alert annotations keep ``{{ $labels.x }}`` templates (annotations are not env-interpolated); the
rule SQL contains no ``$`` and takes its time window from ``now()``.
"""

from __future__ import annotations

from typing import Any

from ccab.dashboards.model import FORMAT_TABLE, PLUGIN_ID

DS_UID = "ccab-clickhouse"

DATASOURCE: dict[str, Any] = {
    "apiVersion": 1,
    "datasources": [{
        "name": "ccab ClickHouse",
        "type": PLUGIN_ID,
        "uid": DS_UID,
        "access": "proxy",
        "editable": False,
        "jsonData": {
            "host": "${CCAB_CLICKHOUSE_HOST}",
            "port": "${CCAB_CLICKHOUSE_PORT}",
            "protocol": "${CCAB_CLICKHOUSE_PROTOCOL}",
            "secure": "${CCAB_CLICKHOUSE_SECURE}",
            "username": "${CCAB_CLICKHOUSE_USER}",
            "defaultDatabase": "${CCAB_CLICKHOUSE_DATABASE}",
        },
        "secureJsonData": {"password": "${CCAB_CLICKHOUSE_PASSWORD}"},
    }],
}

DASHBOARD_PROVIDER: dict[str, Any] = {
    "apiVersion": 1,
    "providers": [{
        "name": "ccab",
        "orgId": 1,
        "folder": "ccab",
        "type": "file",
        "disableDeletion": False,
        "allowUiUpdates": False,
        "updateIntervalSeconds": 60,
        "options": {"path": "${CCAB_DASHBOARDS_DIR}", "foldersFromFilesStructure": False},
    }],
}

# (uid, title, severity, SQL, threshold, for, summary, description). Each SQL returns one numeric
# column per label set (pop, rollout_id / schema): one alert instance per label set.
RULES = [
    ("ccab-open-page-alerts", "ccab: open page alerts", "page", """
SELECT pop, rollout_id, count() AS open_page_alerts
FROM alerts FINAL
WHERE severity = 'page' AND action != 'rolled_back'
  AND ts_ms >= toUnixTimestamp64Milli(now64(3) - INTERVAL 2 HOUR)
GROUP BY pop, rollout_id""", 0, "0s",
     "A page guardrail of rollout {{ $labels.rollout_id }} in {{ $labels.pop }} regressed",
     "{{ $values.B }} page alert(s) seen by the judge in the last 2 hours and not rolled back. "
     "See the Rollout and alerts dashboard and the alert's report_url."),
    ("ccab-open-ticket-alerts", "ccab: open ticket alerts", "ticket", """
SELECT pop, rollout_id, count() AS open_ticket_alerts
FROM alerts FINAL
WHERE severity = 'ticket' AND action != 'rolled_back'
  AND ts_ms >= toUnixTimestamp64Milli(now64(3) - INTERVAL 2 HOUR)
GROUP BY pop, rollout_id""", 0, "0s",
     "A ticket guardrail of rollout {{ $labels.rollout_id }} in {{ $labels.pop }} regressed",
     "{{ $values.B }} ticket alert(s) in the last 2 hours (the controller halts the rollout)."),
    ("ccab-loader-dead-letters", "ccab: loader dead letters", "ticket", """
SELECT schema, count() AS dead_letters_15m
FROM dead_letters FINAL
WHERE ts >= now() - INTERVAL 15 MINUTE
GROUP BY schema""", 0, "5m",
     "The loader rejected {{ $labels.schema }} records",
     "{{ $values.B }} records of schema {{ $labels.schema }} went to dead_letters in 15 minutes: "
     "the Fleet dashboard's 'Latest dead letters' shows the reasons."),
]


def _rule(uid: str, title: str, severity: str, sql: str, threshold: float, for_: str, summary: str,
          description: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "condition": "C",
        "data": [
            {"refId": "A", "relativeTimeRange": {"from": 7200, "to": 0}, "datasourceUid": DS_UID,
             "model": {"refId": "A", "editorType": "sql", "format": FORMAT_TABLE, "queryType": "table",
                       "rawSql": sql.strip(), "intervalMs": 60000, "maxDataPoints": 43200}},
            {"refId": "B", "datasourceUid": "__expr__",
             "model": {"refId": "B", "type": "reduce", "expression": "A", "reducer": "last",
                       "settings": {"mode": "dropNN"}}},
            {"refId": "C", "datasourceUid": "__expr__",
             "model": {"refId": "C", "type": "threshold", "expression": "B",
                       "conditions": [{"evaluator": {"type": "gt", "params": [threshold]}}]}},
        ],
        "noDataState": "OK",
        "execErrState": "Error",
        "for": for_,
        "annotations": {"summary": summary, "description": description,
                        "runbook_url": "dashboards/README.md#alert-rules"},
        "labels": {"severity": severity, "team": "ccab"},
        "isPaused": False,
    }


def alert_rules() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "groups": [{"orgId": 1, "name": "ccab-guardrails", "folder": "ccab", "interval": "1m",
                    "rules": [_rule(*r) for r in RULES]}],
    }


def files() -> dict[str, dict[str, Any]]:
    """Path under dashboards/provisioning/ -> document."""
    return {
        "datasources/ccab-clickhouse.yaml": DATASOURCE,
        "dashboards/ccab.yaml": DASHBOARD_PROVIDER,
        "alerting/ccab-guardrails.yaml": alert_rules(),
    }
