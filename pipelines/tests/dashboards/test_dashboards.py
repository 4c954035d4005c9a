"""The Grafana dashboards (pipelines/ccab/dashboards/), tested without a Grafana server.

- the committed files are what the code generates (drift), valid JSON/YAML, with sane panels
  (unique ids, gridPos inside 24 columns and not overlapping, one target each, datasource
  ``${datasource}``) and no datasource UID but the provisioned one;
- every panel's, variable's, annotation's and alert rule's SQL, with its variables and the
  ClickHouse plugin's macros expanded (ccab.dashboards.expand), runs against chdb on a simulated
  rollout and returns > 0 rows in the shape its panel type needs;
- no variable value can change a query (variables reach SQL only percent-encoded, see
  dashboards/README.md): for every panel and every hostile value (quotes, backslashes, percent
  signs, commas, braces, unicode, newlines) the query's text is the legitimate one's but for the
  variable's inert literal, and the variable is only ever compared whole; run on chdb, a value of
  each kind returns nothing or the legitimate selection's rows, never another PoP's or rollout's;
  legitimate values return the same rows as the former sqlstring/singlequote SQL.

Data: `ccab sim tiny` (PoP tst1, rollout tst1-tiny, arms control/bbr2/bbr1), loaded and rolled up
by the hourly job; assignments, agent_status, judge_* , alerts and dead_letters rows are inserted
here (test data shaped like what the controller and judge write). Every table is then copied to a
second PoP (oth1) and a second rollout (tst1-other) so that a filter that leaks shows.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from ccab import cli
from ccab.dashboards import build, definitions, provisioning
from ccab.dashboards.expand import ExpandError, expand, format_value, variables_used
from ccab.dashboards.model import PLUGIN_ID, Panel, sql_value, sql_values

T0 = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
T1 = T0 + timedelta(hours=2)
T0_MS = int(T0.timestamp() * 1000)
# dead_letters has a 30-day TTL (older rows are dropped on insert): its panels are run on the last 2 h
NOW = datetime.now(timezone.utc).replace(microsecond=0)
POP, ROLLOUT = "tst1", "tst1-tiny"
OTHER_POP, OTHER_ROLLOUT = "oth1", "tst1-other"
ARMS = ["bbr1", "bbr2", "control"]
NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal)")
DATETIME = re.compile(r"^(Nullable\()?DateTime")

BUILT = {name: make() for name, make in definitions.DASHBOARDS.items()}
PANELS = [(name, pid, p) for name, (_, by_id) in BUILT.items() for pid, p in by_id.items()]


# --- static checks -------------------------------------------------------------------------------

def test_committed_files_are_what_the_code_generates():
    rendered = build.render()
    root = build.REPO_ROOT / "dashboards"
    for rel, text in rendered.items():
        assert (root / rel).read_text() == text, f"dashboards/{rel} is stale: run `ccab dashboards build`"
    assert {p.name for p in (root / "generated").glob("*.json")} == {Path(r).name for r in rendered if r.startswith("generated/")}
    assert build.stale() == []


def test_cli_builds_into_a_directory(tmp_path):
    assert cli.main(["dashboards", "build", "--out", str(tmp_path / "g"), "--provisioning", str(tmp_path / "p")]) == 0
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["ccab-canary.json", "ccab-fleet.json", "ccab-rollout.json"]
    assert (tmp_path / "p" / "alerting" / "ccab-guardrails.yaml").exists()
    assert cli.main(["dashboards", "check", "--out", str(tmp_path / "g"), "--provisioning", str(tmp_path / "p")]) == 0


def _walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + "/" + k, k, v
            yield from _walk(v, path + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


@pytest.mark.parametrize("name", sorted(BUILT))
def test_dashboard_schema(name):
    doc = json.loads((build.GENERATED_DIR / f"ccab-{name}.json").read_text())
    assert doc["uid"] == f"ccab-{name}" and doc["schemaVersion"] >= 39 and doc["title"]
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == PLUGIN_ID
    assert {"pop", "rollout", "arm", "kernel"} <= set(variables)
    assert variables["arm"]["multi"] and variables["kernel"]["multi"]
    for v in variables.values():
        assert "allValue" not in v or not v["allValue"], "a custom all value is inserted unquoted"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in doc["panels"]:
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        if p["datasource"]["type"] == "prometheus":  # PromPanel: test_dashboards_prometheus.py
            assert p["datasource"]["uid"] == "${prometheus}" and variables["prometheus"]["query"] == "prometheus"
            continue
        assert p["datasource"] == {"type": PLUGIN_ID, "uid": "${datasource}"}
        assert len(p["targets"]) == 1
        t = p["targets"][0]
        assert t["datasource"] == p["datasource"] and t["rawSql"] and t["refId"] == "A"
        assert t["format"] == (0 if BUILT[name][1][p["id"]].shape == "timeseries" else 1)
        if p.get("repeat"):
            assert p["repeat"] in variables and variables[p["repeat"]]["multi"]
    # every variable a query uses exists and reaches SQL only in the safe form: single-value ones as
    # sql_value(v), multi-value ones as sql_values(v); nothing else with a `$` but the plugin's macros
    sqls = [p["targets"][0]["rawSql"] for p in doc["panels"] if p["type"] != "row" and "rawSql" in p["targets"][0]]
    sqls += [v["query"]["rawSql"] for v in variables.values() if v["type"] == "query"]
    sqls += [a["target"]["rawSql"] for a in doc["annotations"]["list"] if "target" in a]
    for sql in sqls:
        rest = sql
        for var, fmt in variables_used(sql):
            assert var in variables, f"unknown variable {var}"
            assert fmt == "percentencode", f"${{{var}}} not percent-encoded in:\n{sql}"
            rest = rest.replace(sql_values(var) if variables[var].get("multi") else sql_value(var), "")
        assert not re.search(r"\$(?!__(timeFilter|timeInterval|fromTime|toTime|interval_s)\b)", rest), \
            f"a variable outside sql_value/sql_values in:\n{sql}"


def test_no_hard_coded_datasource_uids():
    for rel, text in build.render().items():
        doc = json.loads(text) if rel.endswith(".json") else yaml.safe_load(text)
        for path, key, value in _walk(doc):
            if key == "uid" and "/datasource/" in path + "/":
                assert value in ("${datasource}", "${prometheus}", "-- Grafana --"), f"{rel}{path}: {value}"
            if key == "datasourceUid":
                assert value in (provisioning.DS_UID, "__expr__"), f"{rel}{path}: {value}"
            if key == "uid" and rel.endswith(".yaml") and "/datasources[" in path:
                assert value == provisioning.DS_UID
    ds = yaml.safe_load(build.render()["provisioning/datasources/ccab-clickhouse.yaml"])["datasources"][0]
    assert ds["type"] == PLUGIN_ID
    assert all(str(v).startswith("${CCAB_") for v in ds["jsonData"].values())
    assert ds["secureJsonData"]["password"] == "${CCAB_CLICKHOUSE_PASSWORD}"
    provider = yaml.safe_load(build.render()["provisioning/dashboards/ccab.yaml"])["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == "${CCAB_DASHBOARDS_DIR}"


def test_alert_rule_queries_have_no_dollar():
    # Grafana would not expand env vars in a rule's query model, but a `$` there is a mistake.
    for group in provisioning.alert_rules()["groups"]:
        for rule in group["rules"]:
            assert "$" not in rule["data"][0]["model"]["rawSql"]
            assert rule["condition"] == "C" and rule["labels"]["severity"] in ("page", "ticket")


def test_expander_formats_like_grafana():
    v = {"pop": "a'b", "arm": ["x", "y'z"]}
    # grafana/scenes formatRegistry: encodeURIComponent + !'()*, arrays as an encoded {a,b} glob
    assert expand("${pop:percentencode}", v, T0, T1) == "a%27b"
    assert expand("${arm:percentencode}", v, T0, T1) == "%7Bx%2Cy%27z%7D"
    assert format_value(["foo()bar BAZ", "test2"], "percentencode") == "%7Bfoo%28%29bar%20BAZ%2Ctest2%7D"
    assert format_value("A-Z_a.z~09!*'()\\ €\n", "percentencode") == "A-Z_a.z~09%21%2A%27%28%29%5C%20%E2%82%AC%0A"
    for bad in ("${pop:sqlstring}", "${pop:singlequote}", "${pop:csv}", "${pop:json}", "${pop:queryparam}"):
        with pytest.raises(ExpandError):
            expand(bad, v, T0, T1)
    assert expand("$__timeFilter(ts)", {}, T0, T1) == f"ts >= toDateTime({T0_MS // 1000}) AND ts <= toDateTime({T0_MS // 1000 + 7200})"
    assert expand("$__timeInterval(ts) $__interval_s", {}, T0, T1, 30) == "toStartOfInterval(toDateTime(ts), INTERVAL 30 second) 30"
    for bad in ("$pop", "${pop}", "${pop:raw}", "[[pop]]", "$__nope"):
        with pytest.raises(ExpandError):
            expand(bad, v, T0, T1)


# --- the warehouse ---------------------------------------------------------------------------------

def _jsonl(rows):
    return "\n".join(json.dumps(r) for r in rows).encode()


def _judge_rows(now_ms):
    results, verdicts, gates, alerts = [], [], [], []
    for look, w_end in enumerate([T0 + timedelta(hours=1), T1], start=1):
        ws, we = T0.strftime("%Y-%m-%d %H:%M:%S"), w_end.strftime("%Y-%m-%d %H:%M:%S")
        for arm in ("bbr1", "bbr2"):
            for metric, stat, est in (("retrans_pct", "ratio", 3.4 if arm == "bbr1" else 1.9),
                                      ("rtt_us", "p50", -0.04), ("goodput_bps", "p10", 0.07)):
                role = "guardrail" if metric == "retrans_pct" else "info"
                half = 0.8 / look
                outcome = "regression" if est - half > 0 and role == "guardrail" else "no_difference"
                results.append(dict(window_start=ws, window_end=we, look=look, looks_planned=4, pop=POP,
                                    rollout_id=ROLLOUT, treatment_arm=arm, control_arm="control", metric=metric,
                                    statistic=stat, segment="all", role=role, method="delta-welch",
                                    hosts_treatment=2 if arm == "bbr2" else 1, hosts_control=2,
                                    value_treatment=5.0, value_control=1.2, estimate=est, ci_low=est - half,
                                    ci_high=est + half, p_value=0.01, q_value=None if role == "guardrail" else 0.03,
                                    alpha_look=0.005 if role == "guardrail" else None, min_attainable_p=0.001,
                                    margin=0.1 if role == "guardrail" else None,
                                    severity="page" if role == "guardrail" else "info", outcome=outcome,
                                    computed_seq=look))
            aid = f"a-{arm}-retrans"
            verdicts.append(dict(window_start=ws, window_end=we, look=look, looks_planned=4, pop=POP, rollout_id=ROLLOUT,
                                 treatment_arm=arm, control_arm="control",
                                 decision="rollback" if arm == "bbr1" and look == 2 else "continue",
                                 reasons=[f"retrans_pct ratio of {arm} is up"], alert_ids=[aid],
                                 gates_failed=[] if look == 2 else ["host_completeness"], computed_seq=look))
            for when, suffix in ((int(w_end.timestamp() * 1000), ""), (now_ms, "-now")):
                alerts.append(dict(alert_id=aid + suffix, ts_ms=when, first_seen_ms=when - 3_600_000, rollout_id=ROLLOUT,
                                   pop=POP, kind="guardrail", metric="retrans_pct", statistic="ratio", segment="all",
                                   treatment_arm=arm, control_arm="control", direction="regression", estimate=2.0,
                                   ci_low=1.1, ci_high=2.9, p_value=0.002, severity="page" if arm == "bbr1" else "ticket",
                                   action="none", window_start=ws, window_end=we, summary=f"{arm} retransmits up",
                                   description="...", report_url="https://reports.example/r/1", version=look))
        for gate, status in (("host_completeness", "pass" if look == 2 else "fail"), ("cc_compliance", "pass")):
            gates.append(dict(window_start=ws, window_end=we, pop=POP, rollout_id=ROLLOUT, gate=gate, arm="", host="",
                              status=status, value=0.97, threshold=0.95, detail="", computed_seq=look))
    return results, verdicts, gates, alerts


@pytest.fixture(scope="module")
def wh(tmp_path_factory, tiny_world, warehouse_template):
    from ccab.base.warehouse import ChdbWarehouse

    # the dead letters' "now" is when they are written, not when this module was collected: the
    # loader alert rule reads the last 15 minutes of real time, and a long test run would age them
    global NOW
    NOW = datetime.now(timezone.utc).replace(microsecond=0)
    from ccab.cohorts.job import run_window
    from ccab.ingest.loader import load_files

    sim = tiny_world
    w = ChdbWarehouse(warehouse_template(tmp_path_factory.mktemp("wh-dashboards") / "warehouse"))
    try:
        assert not load_files(w, [sim / "ccab.tcp.v1.jsonl", sim / "ccab.http.v1.jsonl"]).dead
        run_window(w, T0, T1)
        hosts = "(SELECT pop, rollout_id, host, any(arm) AS arm, any(cc) AS cc, any(kernel) AS kernel FROM tcp_samples GROUP BY pop, rollout_id, host)"
        w.command(f"""INSERT INTO assignments (rollout_id, generation, pop, host, arm, cc, qdisc, issued_at_ms, signature, _topic, _partition, _offset)
                      SELECT rollout_id, g, pop, host, arm, cc, NULL, {T0_MS} - 60000 + (g - 1) * 1800000, 'sig', 'test', 0, g
                      FROM {hosts} AS h ARRAY JOIN [1, 2] AS g""")
        failing = "(SELECT min(host) FROM tcp_samples WHERE arm = 'bbr2')"
        w.command(f"""INSERT INTO agent_status (ts_ms, pop, host, kernel, rollout_id, arm, generation, state, cc_effective, cc_available, qdisc_effective, reason, _topic, _partition, _offset)
                      SELECT {T0_MS} + number * 600000 + 30000, pop, host, kernel, rollout_id, arm, if(number < 3, 1, 2),
                             if(host = {failing} AND number >= 3, 'failed', 'applied'), cc, ['reno', 'cubic', 'bbr'], 'fq',
                             if(host = {failing} AND number >= 3, 'algorithm unavailable: bbr2', ''), 'test', 0, number
                      FROM {hosts} AS h CROSS JOIN numbers(12) AS n""")
        now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
        results, verdicts, gates, alerts = _judge_rows(now_ms)
        for table, rows in (("judge_results", results), ("judge_verdicts", verdicts), ("judge_gates", gates), ("alerts", alerts)):
            w.insert_raw(table, _jsonl(rows))
        dead = [dict(ts=t, _topic="ccab.tcp.v1", _partition=0, _offset=i, schema="ccab.tcp.v1", reason="missing field rtt_us",
                     raw='{"pop": "tst1"}', raw_bytes=15)
                for i, t in enumerate([(NOW - timedelta(minutes=m)).strftime("%Y-%m-%d %H:%M:%S") for m in (95, 30, 1)])]
        w.insert_raw("dead_letters", _jsonl(dead))
        # a second PoP and a second rollout with the same data: a leaking filter would show them
        for table in ("tcp_samples", "http_requests", "assignments", "agent_status", "cohort_hourly", "cohort_cells_hourly",
                      "cohort_heatmap_hourly",
                      "judge_results", "judge_verdicts", "judge_gates", "alerts"):
            extra = ", concat(alert_id, '-{0}') AS alert_id" if table == "alerts" else ""
            # (the WHERE in a subquery: REPLACE's alias would shadow the column in the same SELECT)
            w.command(f"INSERT INTO {table} SELECT * REPLACE ('{OTHER_POP}' AS pop{extra.format('p')}) "
                      f"FROM (SELECT * FROM {table} WHERE pop = '{POP}')")
            w.command(f"INSERT INTO {table} SELECT * REPLACE ('{OTHER_ROLLOUT}' AS rollout_id{extra.format('r')}) "
                      f"FROM (SELECT * FROM {table} WHERE pop = '{POP}' AND rollout_id = '{ROLLOUT}')")
        counts = dict(w.query("SELECT pop, count() FROM cohort_hourly GROUP BY pop").rows)
        assert counts[OTHER_POP] * 2 == counts[POP] > 0
        yield w
    finally:
        w.close()


def _vars_static():
    """The legitimate values without a warehouse (kernels as the tiny world names them; only their shape matters)."""
    return {"pop": POP, "rollout": ROLLOUT, "arm": ARMS, "kernel": ["6.1.0-tiny", "6.8.0-tiny"], "metric": "retrans_pct",
            "segment": "all"}


def _vars(wh, **override):
    kernels = [r[0] for r in wh.query(f"SELECT DISTINCT kernel FROM cohort_hourly WHERE pop = '{POP}' ORDER BY kernel").rows]
    v = {"pop": POP, "rollout": ROLLOUT, "arm": ARMS, "kernel": kernels, "metric": "retrans_pct", "segment": "all"}
    v.update(override)
    return v


def _run(wh, panel: Panel, variables, repeat_value=None):
    """Rows of the panel (for a repeated panel: of its clone for ``repeat_value``)."""
    v = dict(variables)
    if panel.repeat:
        v[panel.repeat] = repeat_value if repeat_value is not None else v[panel.repeat][0]
    t0, t1 = (NOW - timedelta(hours=2), NOW + timedelta(minutes=1)) if panel.reads == ("dead_letters",) else (T0, T1)
    return wh.query(expand(panel.sql, v, t0, t1, interval_s=60))


def _is_num(t):
    return bool(NUMERIC.match(t))


def check_shape(panel: Panel, res):
    cols, types, rows = res.columns, res.types, res.rows
    assert rows, f"{panel.title}: no rows"
    if panel.shape == "timeseries":
        assert cols[0] == "time" and DATETIME.match(types[0]), f"{panel.title}: first column must be DateTime `time`"
        times = [r[0] for r in rows]
        assert times == sorted(times), f"{panel.title}: not sorted by time"
        assert any(_is_num(t) for t in types[1:]), f"{panel.title}: no numeric value"
        assert all(_is_num(t) or "String" in t for t in types[1:])
    elif panel.shape == "heatmap":
        assert len(cols) == 3 and all(_is_num(t) for t in types), f"{panel.title}: x, y, value must be numeric: {types}"
        assert all(r[2] >= 0 for r in rows) and sum(r[2] for r in rows) == pytest.approx(1)
        assert [r[:2] for r in rows] == sorted(r[:2] for r in rows)
        assert len({r[:2] for r in rows}) == len(rows), "one row per cell"
    elif panel.shape == "xy":
        assert len(cols) == 3 and _is_num(types[0]) and "String" in types[1] and _is_num(types[2]), types
        xs = [r[0] for r in rows]
        assert xs == sorted(xs) and all(x > 0 for x in xs), "x must be ascending and > 0 (log axis)"
    else:
        assert cols


@pytest.mark.parametrize("name,pid,panel", PANELS, ids=[f"{n}:{p.title}" for n, _, p in PANELS])
def test_panel_sql_returns_the_shape_its_panel_needs(wh, name, pid, panel):
    values = ARMS if panel.repeat == "arm" else [None]
    for value in values:
        res = _run(wh, panel, _vars(wh), value)
        check_shape(panel, res)
        if panel.shape == "xy":  # the CDF ends at 1 for every arm
            if "cum_share" in res.columns:
                last = {}
                for x, arm, c in res.rows:
                    last[arm] = c
                assert set(last) == set(ARMS) and all(c == pytest.approx(1) for c in last.values())
    if "${metric" in panel.sql:
        for metric, *_ in definitions.METRICS:
            if metric == "goodput_bps" and panel.title.startswith("Per-host"):
                continue
            check_shape(panel, _run(wh, panel, _vars(wh, metric=metric)))


def test_panel_reads_the_tables_it_declares():
    for _, _, panel in PANELS:
        assert panel.reads, panel.title
        for table in panel.reads:
            assert re.search(rf"\b(FROM|JOIN)\s+{table}\b", panel.sql), f"{panel.title} does not read {table}"


def test_filtered_panels_see_only_their_pop_and_rollout(wh):
    # the fixture's copies double every table; with the filters each panel sees the original only
    res = _run(wh, dict((p.title, p) for _, _, p in PANELS)["Hosts applied vs assigned"], _vars(wh))
    assert sum(r[1] for r in res.rows) == len(wh.query(f"SELECT DISTINCT host FROM tcp_samples WHERE pop = '{POP}'").rows)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_variable_and_annotation_queries(wh, name):
    doc = BUILT[name][0]
    for v in doc["templating"]["list"]:
        if v["type"] != "query":
            continue
        res = wh.query(expand(v["query"]["rawSql"], _vars(wh), T0, T1))
        assert len(res.columns) == 1 and res.rows, v["name"]
        if v["name"] == "pop":
            assert [r[0] for r in res.rows] == sorted([OTHER_POP, POP])
        if v["name"] == "arm":
            assert [r[0] for r in res.rows] == ARMS
    for a in doc["annotations"]["list"]:
        if "target" in a:
            res = wh.query(expand(a["target"]["rawSql"], _vars(wh), T0, T1))
            assert res.rows and res.columns[:4] == ["time", "timeEnd", "title", "text"]
            assert [r[0] for r in res.rows] == sorted(r[0] for r in res.rows)


def test_alert_rule_queries_fire_on_the_test_data(wh):
    got = {}
    for group in provisioning.alert_rules()["groups"]:
        for rule in group["rules"]:
            res = wh.query(rule["data"][0]["model"]["rawSql"])
            assert res.rows, rule["uid"]
            assert _is_num(res.types[-1]) and all("String" in t for t in res.types[:-1]), res.types
            got[rule["uid"]] = {r[:-1]: r[-1] for r in res.rows}
    assert got["ccab-open-page-alerts"][(POP, ROLLOUT)] == 1  # bbr1's page alert raised "now"
    assert got["ccab-open-ticket-alerts"][(POP, ROLLOUT)] == 1
    assert got["ccab-loader-dead-letters"][("ccab.tcp.v1",)] == 1  # the 15 minutes hold 1 of the 3


# --- quoting ---------------------------------------------------------------------------------------

# Values a viewer can put in the URL (var-pop=..., var-arm=...); `{v}` is the legitimate value.
INJECTIONS = ["{v}' OR 1=1 --", "{v}'' OR ''1''=''1", "' OR pop != '", "{v}') OR (1=1", "{v}' OR 1=1) --",
              "{v}\\' OR 1=1 --", "{v}\\", "{v}\\\\' OR 1=1 --", "\\'{v}", "{v}%27 OR 1=1 --", "{v}%", "%{v}",
              "{v}%2C", "{v},' OR 1=1 --", ",{v}", "{{{v}}}", "{v}}}", "{{{v}", "{v}é€😀", "{v}\n OR 1=1",
              "{v}\r\n--", "{v}\t", "{v}\x00", "{v} ", "$__all", "{v}'; DROP TABLE alerts --", "{v}/*", "{v}`"]
NASTY = sorted({p.format(v="x") for p in INJECTIONS} | {"", "'", "\\", "\\'", "%", "%%", "%zz", "%2", "+", "{", "}",
                                                        "{}", "{,}", "😀", "\u2028", "a,b"})
NOTHING = "-no-such-value-"
VAR_PANELS = [(n, pid, p) for n, pid, p in PANELS if any(v in ("pop", "rollout", "arm", "kernel") for v, _ in variables_used(p.sql))]


def _items(value):
    """A model of sql_values(v): the items ClickHouse gets for a variable value (checked on chdb below)."""
    s = value if isinstance(value, str) else "{" + ",".join(value) + "}"
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    return s.split(",")


def test_percent_encoded_literals_are_inert_and_decode_exactly(wh):
    for value in NASTY:
        sql = expand(f"SELECT {sql_value('pop')} AS one, {sql_values('arm')} AS many, {sql_values('kernel')} AS glob",
                     {"pop": value, "arm": value, "kernel": [value, "k2"]}, T0, T1)
        literals = re.findall(r"'([^']*)'", sql)
        assert all(re.fullmatch(r"[A-Za-z0-9_.~%-]*", lit) for lit in literals), sql
        ((one, many, glob),) = wh.query(sql).rows
        assert one == value
        assert list(many) == _items(value) and list(glob) == _items([value, "k2"])
        if "," not in value:  # a multi-value selection comes back item by item
            assert list(glob) == [value, "k2"] and list(many) == _items(value)


# One value of each kind in INJECTIONS, run on every panel: a quote that would end the literal, a
# backslash before it, a percent sign, a comma (a multi-value separator), braces (the multi-value
# wrapper), a newline, Grafana's "all" token. Every value of INJECTIONS and NASTY is proven inert on
# every panel by test_every_variable_value_reaches_the_sql_as_one_inert_literal (no engine needed:
# the query's text outside the variable's literal is the same for any value), and its decoding is
# checked on chdb by test_percent_encoded_literals_are_inert_and_decode_exactly.
RUN_ON_EVERY_PANEL = ["{v}' OR 1=1 --", "{v}\\' OR 1=1 --", "{v}%", "{v},' OR 1=1 --", "{{{v}}}", "{v}\n OR 1=1",
                      "$__all"]
_LITERAL = re.compile(r"'((?:[^'\\]|\\.)*)'")
# How a panel may use a variable: compared whole (pop/rollout) or as a set of whole items (arm/kernel).
# Anything else (LIKE, match(), a prefix) could give a value more meaning than its own text.
_USES = {False: re.compile(r"\b[\w.]+ = $"), True: re.compile(r"\bhas\($")}


def _masked(sql: str) -> str:
    return _LITERAL.sub("'?'", sql)


@pytest.mark.parametrize("name,pid,panel", VAR_PANELS, ids=[f"{n}:{p.title}" for n, _, p in VAR_PANELS])
def test_every_variable_value_reaches_the_sql_as_one_inert_literal(name, pid, panel):
    assert set(RUN_ON_EVERY_PANEL) <= set(INJECTIONS)
    legit = _vars_static()
    used = {v for v, _ in variables_used(panel.sql)} & {"pop", "rollout", "arm", "kernel"}
    for var in sorted(used):
        multi = isinstance(legit[var], list)
        wrapper = sql_values(var) if multi else sql_value(var)
        # the variable appears only inside its wrapper, and the wrapper only where its value is compared whole
        assert panel.sql.count("${" + var + ":") == panel.sql.count(wrapper) * (5 if multi else 1), (panel.title, var)
        for m in re.finditer(re.escape(wrapper), panel.sql):
            assert _USES[multi].search(panel.sql[max(0, m.start() - 40):m.start()]), (
                f"{panel.title!r} uses ${var} as {panel.sql[max(0, m.start() - 40):m.end() + 10]!r}: compare it whole")
        reference = expand(panel.sql, legit, T0, T1)
        for value in [p.format(v=legit[var][0] if multi else legit[var]) for p in INJECTIONS] + NASTY:
            sql = expand(panel.sql, {**legit, var: [value] if multi else value}, T0, T1)
            assert _masked(sql) == _masked(reference), f"{var}={value!r} changed the text of {panel.title!r}"
            # the same text around the same literals: only the variable's literals differ, and they are inert
            changed = [lit for lit, was in zip(_LITERAL.findall(sql), _LITERAL.findall(reference)) if lit != was]
            assert changed and all(re.fullmatch(r"[A-Za-z0-9_.~%-]*", lit) for lit in changed), (var, value, changed)


@pytest.mark.parametrize("name,pid,panel", VAR_PANELS, ids=[f"{n}:{p.title}" for n, _, p in VAR_PANELS])
def test_no_variable_value_can_change_the_query(wh, name, pid, panel):
    legit = _vars(wh)
    used = {v for v, _ in variables_used(panel.sql)}
    ran = {}

    def run(var, value):
        key = (var, tuple(value) if isinstance(value, list) else value)
        if key not in ran:
            if panel.repeat == var:
                ran[key] = _run(wh, panel, legit, value).rows
            else:
                ran[key] = _run(wh, panel, {**legit, var: value}).rows
        return ran[key]

    for var in sorted(used & {"pop", "rollout", "arm", "kernel"}):
        multi = isinstance(legit[var], list)
        nothing = run(var, [NOTHING] if multi else NOTHING)
        for pattern in RUN_ON_EVERY_PANEL:
            evil = pattern.format(v=legit[var][0] if multi else legit[var])
            rows = run(var, [evil] if multi else evil)
            if multi:
                # items are split at commas (Grafana joins a selection with commas): each item selects
                # exactly the option it names, so the result is that of the options named, or nothing
                named = [i for i in _items([evil]) if i in legit[var]]
                expected = run(var, named) if named else nothing
            else:
                expected = nothing  # the value is compared whole: no PoP or rollout has that name
            assert rows == expected, f"{var}={evil!r} changed the result of {panel.title!r}"
            flat = json.dumps(rows)
            assert OTHER_POP not in flat and OTHER_ROLLOUT not in flat


def test_a_backslash_quote_in_a_variable_cannot_change_the_query(wh):
    # formerly a strict xfail: `${pop:sqlstring}` rendered 'tst1\'' OR 1=1 --' and ClickHouse read \' as a quote
    panel = dict((p.title, p) for _, _, p in PANELS)["tcp samples per minute per host"]
    legit = _vars(wh)
    assert _run(wh, panel, legit).rows
    for evil in ("tst1\\' OR 1=1 --", "tst1\\'' OR 1=1 --", "tst1\\", "tst1\\\\' OR 1=1 --"):
        assert _run(wh, panel, {**legit, "pop": evil}).rows == []
        assert _run(wh, panel, {**legit, "kernel": [k + evil[4:] for k in legit["kernel"]]}).rows == []
    # the test has teeth: in the former SQL the first value ends the literal and the filter with it
    from ccab.dashboards.expand import expand_macros
    old = wh.query(expand_macros(_legacy(panel.sql, {**legit, "pop": "tst1\\' OR 1=1 --"}), T0, T1, 60)).rows
    assert old and old != _run(wh, panel, legit).rows


def _legacy(sql: str, variables) -> str:
    """The panel's SQL as it was before: ``${v:sqlstring}`` / ``col IN (${v:singlequote})``, formatted
    as Grafana does (sqlstring doubles ', singlequote writes \\'): the reference for legitimate values."""
    for var, value in variables.items():
        values = [value] if isinstance(value, str) else list(value)
        sqlstring = ",".join("'" + v.replace("'", "''") + "'" for v in values)
        singlequote = ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
        sql = re.sub(r"has\(" + re.escape(sql_values(var)) + r", ([\w.]+)\)", lambda m: f"{m.group(1)} IN ({singlequote})", sql)
        sql = sql.replace(sql_value(var), sqlstring)
    assert "percentencode" not in sql
    return sql


@pytest.mark.parametrize("name,pid,panel", VAR_PANELS, ids=[f"{n}:{p.title}" for n, _, p in VAR_PANELS])
def test_legitimate_values_return_the_same_rows_as_before(wh, name, pid, panel):
    from ccab.dashboards.expand import expand_macros

    legit = _vars(wh)
    selections = [legit, {**legit, "arm": ["bbr2"]}, {**legit, "arm": ["bbr1", "control"], "kernel": legit["kernel"][:1]}]
    for variables in selections:
        for value in (variables["arm"] if panel.repeat == "arm" else [None]):
            v = {**variables, "arm": value} if value is not None else variables
            t0, t1 = (NOW - timedelta(hours=2), NOW + timedelta(minutes=1)) if panel.reads == ("dead_letters",) else (T0, T1)
            before = wh.query(expand_macros(_legacy(panel.sql, v), t0, t1, 60)).rows
            assert _run(wh, panel, variables, value).rows == before, (panel.title, v)
