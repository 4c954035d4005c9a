"""The three ccab dashboards: Fleet, Canary comparison, Rollout and alerts.

Each panel's SQL reads the warehouse tables directly (sql/migrations/), never a view, so a panel
works on any ClickHouse that ran the migrations. Filters, in every panel that has the column:
``pop = sql_value("pop")``, ``rollout_id = sql_value("rollout")``, ``sql_in("arm", "arm")``,
``sql_in("kernel", "kernel")`` (variables only percent-encoded: model.py, dashboards/README.md);
the time range through the plugin's macros.
Rollup rows may not have merged yet: always aggregate (sum; histogram cells summed by bin), read judge tables
with FINAL.
"""

from __future__ import annotations

from typing import Any

from ccab.base import vocabulary
from ccab.dashboards.model import (DS_REF, FORMAT_TABLE, Panel, PromPanel, Row, custom_variable, dashboard,
                                   datasource_variable, prometheus_variable, query_variable, sql_in, sql_value)

POP = f"pop = {sql_value('pop')}"
ROLLOUT = f"rollout_id = {sql_value('rollout')}"
ARMS = sql_in("arm", "arm")
KERNELS = sql_in("kernel", "kernel")
TO_MS = "1000 * toUnixTimestamp($__toTime)"
FROM_MS = "1000 * toUnixTimestamp($__fromTime)"
ZERO_BIN = "-2147483648"

# Metrics offered on the Canary dashboard (vocabulary.shown_in("dashboard")): (metric, label,
# divisor to the display unit, Grafana unit id).
GRAFANA_UNITS = {"%": "percent", "ms": "ms", "KiB": "kbytes", "Mbit/s": "Mbits", "RTOs": "short"}
METRICS = [(m.name, f"{m.label or m.name} ({m.unit})", m.scale, GRAFANA_UNITS[m.unit])
           for m in vocabulary.shown_in("dashboard")]
_SCALE = "multiIf(" + ", ".join(f"{sql_value('metric')} = '{m}', {d}" for m, _, d, _ in METRICS if d != 1) + ", 1)"


def _variables(*, metric: bool = False) -> list[dict[str, Any]]:
    v = [
        datasource_variable(),
        query_variable("pop", "PoP", """
SELECT pop FROM (
    SELECT DISTINCT pop FROM assignments
    UNION ALL SELECT DISTINCT pop FROM cohort_hourly
) GROUP BY pop ORDER BY pop"""),
        query_variable("rollout", "Rollout", f"""
SELECT rollout_id FROM (
    SELECT DISTINCT rollout_id FROM assignments WHERE {POP}
    UNION ALL SELECT DISTINCT rollout_id FROM cohort_hourly WHERE {POP}
) GROUP BY rollout_id ORDER BY rollout_id"""),
        query_variable("arm", "Arm", f"""
SELECT arm FROM (
    SELECT DISTINCT arm FROM assignments WHERE {POP} AND {ROLLOUT}
    UNION ALL SELECT DISTINCT arm FROM cohort_hourly WHERE {POP} AND {ROLLOUT}
) GROUP BY arm ORDER BY arm""", multi=True, include_all=True),
        query_variable("kernel", "Kernel", f"""
SELECT kernel FROM (
    SELECT DISTINCT kernel FROM agent_status WHERE {POP}
    UNION ALL SELECT DISTINCT kernel FROM cohort_hourly WHERE {POP}
) GROUP BY kernel ORDER BY kernel""", multi=True, include_all=True),
    ]
    if metric:
        v.append(custom_variable("metric", "Metric", [(m, label) for m, label, _, _ in METRICS], "retrans_pct"))
        # every segment the rollups hold: all, bulk, rtt:*, size:*, and the client's network
        # (access:mobile|fixed|..., country:JP, asn:<n>|other|unknown); 'all' first (the default)
        v.append(query_variable("segment", "Segment", f"""
SELECT segment FROM (SELECT DISTINCT segment FROM cohort_hourly WHERE {POP} AND {ROLLOUT})
ORDER BY segment != 'all', segment != 'bulk', segment"""))
    return v


# --- Fleet ---------------------------------------------------------------------------------------

def fleet() -> tuple[dict, dict]:
    items: list[Panel | Row] = [
        Row("Arms and hosts"),
        Panel("Hosts per arm, every PoP", "table", shape="table", w=12, h=8, reads=("assignments",),
              description="Each host once, in the arm of its latest assignment (highest generation) issued "
                          "before the end of the time range. All PoPs and rollouts: the fleet at a glance.",
              sql=f"""
WITH latest AS (
    SELECT pop, rollout_id, host,
           argMax(arm, (generation, issued_at_ms)) AS arm,
           argMax(cc, (generation, issued_at_ms))  AS cc
    FROM assignments
    WHERE issued_at_ms <= {TO_MS}
    GROUP BY pop, rollout_id, host
)
SELECT pop, rollout_id, arm, arrayStringConcat(arraySort(groupUniqArray(cc)), '+') AS cc, count() AS hosts
FROM latest
GROUP BY pop, rollout_id, arm
ORDER BY pop, rollout_id, arm"""),
        Panel("Hosts applied vs assigned", "table", shape="table", w=12, h=8, reads=("assignments", "agent_status"),
              description="Per arm of the selected rollout: hosts assigned (latest assignment per host) and hosts "
                          "whose latest agent status (of the day before the range's end; agents report every "
                          "few minutes) is 'applied' at that generation or later.",
              sql=f"""
WITH
assigned AS (
    SELECT host, argMax(arm, generation) AS assigned_arm, max(generation) AS assigned_generation
    FROM assignments
    WHERE {POP} AND {ROLLOUT} AND issued_at_ms <= {TO_MS}
    GROUP BY host
),
status AS (
    SELECT host, argMax(state, ts_ms) AS last_state, argMax(generation, ts_ms) AS status_generation,
           argMax(kernel, ts_ms) AS last_kernel
    FROM agent_status
    WHERE {POP} AND {ROLLOUT} AND ts <= $__toTime AND ts > $__toTime - INTERVAL 1 DAY
    GROUP BY host
)
SELECT a.assigned_arm AS arm,
       count() AS hosts_assigned,
       countIf(s.last_state = 'applied' AND s.status_generation >= a.assigned_generation) AS hosts_applied,
       hosts_assigned - hosts_applied AS hosts_not_applied
FROM assigned AS a
LEFT JOIN status AS s ON s.host = a.host
WHERE {sql_in('arm', 'a.assigned_arm')} AND (s.last_kernel = '' OR {sql_in('kernel', 's.last_kernel')})
GROUP BY arm
ORDER BY arm"""),
        Panel("Hosts not (yet) applied", "table", shape="table", w=24, h=7, reads=("assignments", "agent_status"),
              description="Hosts whose latest status is not 'applied' at their assigned generation, with the "
                          "agent's state and reason (e.g. 'algorithm unavailable', 'qdisc fq unavailable'); "
                          "'no status' when the agent reported nothing in the day before the range's end.",
              sql=f"""
WITH
assigned AS (
    SELECT host, argMax(arm, generation) AS assigned_arm, max(generation) AS assigned_generation,
           argMax(cc, generation) AS assigned_cc
    FROM assignments
    WHERE {POP} AND {ROLLOUT} AND issued_at_ms <= {TO_MS}
    GROUP BY host
),
status AS (
    SELECT host, argMax(state, ts_ms) AS last_state, argMax(generation, ts_ms) AS status_generation,
           argMax(kernel, ts_ms) AS last_kernel, argMax(cc_effective, ts_ms) AS last_cc,
           argMax(reason, ts_ms) AS last_reason, max(ts) AS last_status
    FROM agent_status
    WHERE {POP} AND {ROLLOUT} AND ts <= $__toTime AND ts > $__toTime - INTERVAL 1 DAY
    GROUP BY host
)
SELECT a.host AS host, a.assigned_arm AS arm, a.assigned_generation AS assigned_generation,
       a.assigned_cc AS cc_assigned, if(s.host = '', 'no status', s.last_state) AS state,
       s.status_generation AS status_generation, s.last_cc AS cc_effective, s.last_kernel AS kernel,
       s.last_reason AS reason, s.last_status AS last_status
FROM assigned AS a
LEFT JOIN status AS s ON s.host = a.host
WHERE {sql_in('arm', 'a.assigned_arm')} AND (s.last_kernel = '' OR {sql_in('kernel', 's.last_kernel')})
  AND NOT (s.last_state = 'applied' AND s.status_generation >= a.assigned_generation)
ORDER BY arm, host"""),
        Row("Collector and loader health"),
        Panel("tcp samples per minute per host", "timeseries", shape="timeseries", w=12, h=8, unit="short",
              reads=("tcp_samples",),
              description="Rows in tcp_samples per minute of event time, per host. A host that drops to zero "
                          "stopped sampling or shipping; a dip shared by all hosts is the loader.",
              sql=f"""
SELECT $__timeInterval(ts) AS time, host, count() / ($__interval_s / 60) AS rows_per_min
FROM tcp_samples
WHERE $__timeFilter(ts) AND {POP} AND {KERNELS}
GROUP BY time, host
ORDER BY time, host"""),
        Panel("http requests per minute per host", "timeseries", shape="timeseries", w=12, h=8, unit="short",
              reads=("http_requests",),
              description="Rows in http_requests (sampled nginx log lines) per minute of event time, per host.",
              sql=f"""
SELECT $__timeInterval(ts) AS time, host, count() / ($__interval_s / 60) AS rows_per_min
FROM http_requests
WHERE $__timeFilter(ts) AND {POP} AND {KERNELS}
GROUP BY time, host
ORDER BY time, host"""),
        Panel("Load lag (event time to loaded)", "timeseries", shape="timeseries", w=12, h=8, unit="s",
              reads=("tcp_samples", "http_requests"),
              description="Seconds from a record's event time to its insert into the warehouse (_loaded_at), "
                          "median and max per minute of event time, per raw table.",
              sql=f"""
SELECT time, source, median_lag_s, max_lag_s FROM (
    SELECT $__timeInterval(ts) AS time, 'tcp_samples' AS source,
           quantileExact(0.5)(toInt64(_loaded_at) - toInt64(toDateTime(ts))) AS median_lag_s,
           max(toInt64(_loaded_at) - toInt64(toDateTime(ts))) AS max_lag_s
    FROM tcp_samples
    WHERE $__timeFilter(ts) AND {POP} AND {KERNELS}
    GROUP BY time
    UNION ALL
    SELECT $__timeInterval(ts) AS time, 'http_requests' AS source,
           quantileExact(0.5)(toInt64(_loaded_at) - toInt64(toDateTime(ts))) AS median_lag_s,
           max(toInt64(_loaded_at) - toInt64(toDateTime(ts))) AS max_lag_s
    FROM http_requests
    WHERE $__timeFilter(ts) AND {POP} AND {KERNELS}
    GROUP BY time
)
ORDER BY time, source"""),
        Panel("Dead letters per minute", "timeseries", shape="timeseries", w=12, h=8, unit="short",
              reads=("dead_letters",),
              description="Records the loader rejected, per minute and schema (all PoPs: a rejected record "
                          "may not even have a readable pop).",
              options={"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
              field_config={"custom": {"drawStyle": "bars", "fillOpacity": 60, "stacking": {"mode": "normal"}}},
              sql="""
SELECT $__timeInterval(ts) AS time, schema, count() AS dead_letters
FROM dead_letters FINAL
WHERE $__timeFilter(ts)
GROUP BY time, schema
ORDER BY time, schema"""),
        Panel("Latest dead letters", "table", shape="table", w=24, h=7, reads=("dead_letters",),
              description="The 50 newest rejected records with the loader's reason and the start of the payload.",
              sql="""
SELECT ts, _topic AS topic, _partition AS partition, _offset AS offset, schema, reason,
       substring(raw, 1, 160) AS raw_start, raw_bytes
FROM dead_letters FINAL
WHERE $__timeFilter(ts)
ORDER BY ts DESC
LIMIT 50"""),
        Row("Records lost on the edge (Prometheus)"),
        PromPanel("Collector records lost, by host and reason", unit="short", w=12,
                  expr="sum by (pop, host, reason) (increase(ccab_collector_records_dropped_total[$__rate_interval]))",
                  legend="{{pop}} {{host}} {{reason}}",
                  description="Records a collector lost for good, every PoP (the $prometheus datasource): spool_full, "
                              "queue_full, rejected, encode, spool_write, and the close-time capture's close_rcvbuf "
                              "(destroy events the kernel dropped: the receive buffer was full) and close_decode. "
                              "Alerts: CcabCollectorRecordsDropped, CcabCollectorCloseEventsLost, CcabPopRecordsDropping.",
                  field_config={"custom": {"drawStyle": "bars", "fillOpacity": 60, "stacking": {"mode": "normal"}}}),
        PromPanel("Records only in memory, per collector", unit="short", w=6,
                  expr="sum by (pop, host) (ccab_collector_queue_records + ccab_collector_inflight_records)",
                  legend="{{pop}} {{host}}",
                  description="Records in a collector's queue or held by its Kafka client, not yet acknowledged: "
                              "what a crash (SIGKILL) would lose of the sampler's and the close capture's records "
                              "(the tailer re-reads its lines). Bounded by queue.max_records + "
                              "kafka.max_inflight_records; beyond that the sink spools to disk."),
        PromPanel("Collector processes that died without shutting down", unit="short", w=6,
                  expr="sum by (pop, host) (increase(ccab_collector_unclean_stops_total[$__rate_interval]))",
                  legend="{{pop}} {{host}}",
                  description="Starts that found the previous collector process had died (SIGKILL, OOM, power): "
                              "each lost at most queue.max_records + kafka.max_inflight_records of its in-memory "
                              "records, plus close events not yet read (docs/collector/sink.md). "
                              "Alert: CcabCollectorDiedUnclean.",
                  field_config={"custom": {"drawStyle": "bars", "fillOpacity": 60}}),
        PromPanel("Collectors not scraped, per PoP", unit="short", w=6,
                  expr="count by (pop) (up{job=\"ccab-collector\"} == 0)",
                  legend="{{pop}}",
                  description="Collectors Prometheus cannot scrape (CcabCollectorDown after 10 min): connections "
                              "closing on those hosts meanwhile are never seen, their samples never taken."),
    ]
    return dashboard("ccab-fleet", "ccab / Fleet",
                     "Arms per PoP, hosts applied vs assigned, collector and loader health, records lost on the edge.",
                     items, _variables() + [prometheus_variable()], time_from="now-6h")


# --- Canary comparison -----------------------------------------------------------------------------

_COHORT_FILTER = (f"{POP} AND {ROLLOUT} AND {ARMS} AND {KERNELS} AND metric = {sql_value('metric')} "
                  f"AND segment = {sql_value('segment')}")
_HEAT_FILTER = f"{POP} AND {ROLLOUT} AND {sql_in('arm', 'arm')} AND {KERNELS} AND segment = {sql_value('segment')}"
# Whole UTC days of the range come from the daily rollups, the hours at its edges from the hourly
# ones (sql/migrations/0017_cohort_daily.sql): the same rows as reading every hour, and a 90-day
# range reads 90 rows per host and cohort instead of 2,160.
_DAY_FIRST = "toStartOfDay($__fromTime + 86399, 'UTC')"  # first midnight at or after the range's start
_DAY_END = "toStartOfDay($__toTime, 'UTC')"  # last midnight at or before its end


def _rollup_rows(columns: str, where: str, hourly: str = "cohort_hourly", daily: str = "cohort_daily") -> str:
    """A subquery of ``columns`` of the rollup rows in the dashboard's range that match ``where``."""
    return f"""(
    SELECT {columns} FROM {hourly}
    WHERE {where} AND $__timeFilter(hour) AND NOT (hour >= {_DAY_FIRST} AND hour < {_DAY_END})
    UNION ALL
    SELECT {columns} FROM {daily}
    WHERE {where} AND day >= {_DAY_FIRST} AND day < {_DAY_END}
)"""
_PER_OCTAVE = 16  # PDF/CDF resolution: the 128-per-octave histograms re-binned (merges exactly)


def _merged_bins_sql() -> str:
    return f"""
merged AS (
    SELECT arm, sum(n) AS n_values, sum(n_zero) AS n_zeros
    FROM {_rollup_rows("arm, n, n_zero", _COHORT_FILTER)}
    GROUP BY arm
),
fine AS (
    -- the histogram cells (cohort_cells_*), summed by bin
    SELECT arm, n_values, n_zeros, fine_bin, c
    FROM merged
    INNER JOIN (SELECT arm, bin AS fine_bin, sum(count) AS c
                FROM {_rollup_rows("arm, bin, count", _COHORT_FILTER, "cohort_cells_hourly", "cohort_cells_daily")}
                GROUP BY arm, fine_bin) AS cells USING (arm)
),
binned AS (
    SELECT arm, n_values, n_zeros, toInt32(floor(fine_bin * {_PER_OCTAVE} / 128)) AS bin, sum(c) AS bin_values
    FROM fine
    GROUP BY arm, n_values, n_zeros, bin
)"""


def _heatmap(pair: str, y_name: str, y_div: str, y_unit: str, title: str) -> Panel:
    return Panel(title, "heatmap", shape="heatmap", w=8, h=9, repeat="arm",
                 reads=("cohort_heatmap_hourly", "cohort_heatmap_daily"),
                 description=f"Share of the arm's connections per cell of RTT (x, ms) and {y_name} (y), from "
                             "cohort_heatmap_hourly re-binned to 2 bins per octave (a connection counted once, at "
                             "its last sample). y = 0 is the row of connections with exactly 0. One panel per arm.",
                 options={"calculate": False, "cellGap": 1,
                          "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5,
                                    "steps": 64, "fill": "dark-orange", "reverse": False},
                          "yAxis": {"axisPlacement": "left", "unit": y_unit, "reverse": False},
                          "rowsFrame": {"layout": "le"}, "cellValues": {"unit": "percentunit"},
                          "filterValues": {"le": 1e-9}, "legend": {"show": True},
                          "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": False},
                          "exemplars": {"color": "rgba(255,0,255,0.7)"}},
                 transformations=[{"id": "groupingToMatrix", "options": {
                     "rowField": "rtt_ms", "columnField": y_name, "valueField": "share", "emptyValue": "zero"}}],
                 sql=f"""
WITH cells AS (
    SELECT if(x_bin = {ZERO_BIN}, x_bin, toInt32(floor(x_bin / 4))) AS x,
           if(y_bin = {ZERO_BIN}, y_bin, toInt32(floor(y_bin / 4))) AS y,
           sum(connections) AS conns
    FROM {_rollup_rows("x_bin, y_bin, connections", f"pair = '{pair}' AND {_HEAT_FILTER}",
                       "cohort_heatmap_hourly", "cohort_heatmap_daily")}
    GROUP BY x, y
)
SELECT if(x = {ZERO_BIN}, 0, round(exp2(x / 2) / 1000, 4)) AS rtt_ms,
       if(y = {ZERO_BIN}, 0, round(exp2(y / 2) / {y_div}, 4)) AS {y_name},
       conns / sum(conns) OVER () AS share
FROM cells
ORDER BY rtt_ms, {y_name}""")


def canary() -> tuple[dict, dict]:
    xy_opts = {"legend": {"displayMode": "table", "placement": "right", "showLegend": True},
               "tooltip": {"mode": "multi", "sort": "desc"}}
    xy_fc = {"custom": {"drawStyle": "line", "lineInterpolation": "stepAfter", "spanNulls": True,
                        "scaleDistribution": {"type": "linear"}, "fillOpacity": 0}}
    log_x = [{"matcher": {"id": "byName", "options": "value"},
              "properties": [{"id": "custom.scaleDistribution", "value": {"type": "log", "log": 10}}]}]
    items: list[Panel | Row] = [
        Row("Distributions per arm (${metric}, ${segment})"),
        Panel("PDF per arm", "trend", shape="xy", w=12, h=9, reads=("cohort_hourly", "cohort_daily", "cohort_cells_hourly", "cohort_cells_daily"), options=xy_opts,
              field_config=xy_fc, overrides=log_x,
              transformations=[{"id": "groupingToMatrix", "options": {
                  "rowField": "value", "columnField": "arm", "valueField": "density_per_decade", "emptyValue": "null"}}],
              description="Density per decade of the selected metric per arm (log-x PDF), from the host-hour "
                          f"histograms (cohort_cells_hourly, summed by bin) merged over hosts and hours and re-binned to "
                          f"{_PER_OCTAVE} bins per octave. x = bin's geometric midpoint in the metric's display unit "
                          "(ms, %, KiB, Mbit/s). Exact zeros are not on a log axis: see the CDF's first point.",
              sql=f"""
WITH {_merged_bins_sql().strip()}
SELECT exp2((bin + 0.5) / {_PER_OCTAVE}) / {_SCALE} AS value, arm,
       bin_values / n_values / log10(exp2(1 / {_PER_OCTAVE})) AS density_per_decade
FROM binned
ORDER BY value, arm"""),
        Panel("CDF per arm", "trend", shape="xy", w=12, h=9, reads=("cohort_hourly", "cohort_daily", "cohort_cells_hourly", "cohort_cells_daily"), options=xy_opts,
              field_config={**xy_fc, "unit": "percentunit", "min": 0, "max": 1}, overrides=log_x,
              transformations=[{"id": "groupingToMatrix", "options": {
                  "rowField": "value", "columnField": "arm", "valueField": "cum_share", "emptyValue": "null"}}],
              description="Share of the arm's values below each bin's upper edge (zeros included: the first "
                          "point's share is at least the share of exact zeros). Same histograms as the PDF.",
              sql=f"""
WITH {_merged_bins_sql().strip()}
SELECT exp2((bin + 1) / {_PER_OCTAVE}) / {_SCALE} AS value, arm,
       (n_zeros + sum(bin_values) OVER (PARTITION BY arm ORDER BY bin ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
           / n_values AS cum_share
FROM binned
ORDER BY value, arm"""),
        Row("Joint distributions per arm (${segment})"),
        _heatmap("rtt_us:retrans_pct", "retrans_pct", "1", "percent", "RTT × retransmit % — ${arm}"),
        _heatmap("rtt_us:inflight_bytes", "inflight_kib", "1024", "kbytes", "RTT × bytes in flight — ${arm}"),
        Row("Effects (statistical judge)"),
        Panel("Effect estimates at the latest look", "table", shape="table", w=24, h=10, reads=("judge_results",),
              description="judge_results at the newest window in the time range: relative change of each statistic, "
                          "treatment vs control (-0.12 = 12% lower), its confidence interval, p (and BH q), the "
                          "hosts per arm and the outcome. Role: guardrail (one-sided, declared), info, segment, shift.",
              overrides=[{"matcher": {"id": "byRegexp", "options": "^(estimate|ci_low|ci_high|margin)$"},
                          "properties": [{"id": "unit", "value": "percentunit"}, {"id": "decimals", "value": 2}]},
                         {"matcher": {"id": "byName", "options": "outcome"},
                          "properties": [{"id": "custom.cellOptions", "value": {"type": "color-text"}},
                                         {"id": "mappings", "value": [{"type": "value", "options": {
                                             "regression": {"color": "red", "index": 0},
                                             "improvement": {"color": "green", "index": 1},
                                             "non_inferior": {"color": "green", "index": 2}}}]}]}],
              sql=f"""
WITH latest AS (
    SELECT max(window_end) AS w
    FROM judge_results FINAL
    WHERE {POP} AND {ROLLOUT} AND $__timeFilter(window_end)
)
SELECT window_start, window_end, look, looks_planned, treatment_arm, control_arm, role, metric, statistic, segment,
       estimate, ci_low, ci_high, p_value, q_value, margin, value_treatment, value_control,
       hosts_treatment, hosts_control, method, severity, outcome
FROM judge_results FINAL
WHERE {POP} AND {ROLLOUT} AND {sql_in('arm', 'treatment_arm')} AND window_end = (SELECT w FROM latest)
ORDER BY role = 'guardrail' DESC, metric, statistic, segment, treatment_arm"""),
        Panel("Guardrail estimates over looks", "timeseries", shape="timeseries", w=24, h=9, unit="percentunit",
              reads=("judge_results",),
              description="Each guardrail's estimate and interval at every look (x = window end), segment 'all': "
                          "the interval narrows as hosts and hours accumulate.",
              field_config={"custom": {"drawStyle": "line", "pointSize": 6, "showPoints": "always"}},
              sql=f"""
SELECT window_end AS time, concat(treatment_arm, ' ', metric, ' ', statistic) AS series,
       estimate, ci_low, ci_high
FROM judge_results FINAL
WHERE {POP} AND {ROLLOUT} AND {sql_in('arm', 'treatment_arm')} AND role = 'guardrail' AND segment = 'all'
  AND $__timeFilter(window_end)
ORDER BY time, series"""),
        Row("Per host"),
        Panel("Per-host mean of ${metric}", "table", shape="table", w=24, h=9, reads=("cohort_hourly", "cohort_daily"),
              description="One row per host: connections (or requests), mean and ratio of the selected metric over "
                          "the time range — a single bad host shows up here before it moves an arm.",
              sql=f"""
SELECT arm, host, kernel, cc, sum(n) AS n_values,
       sum(value_sum) / nullIf(sum(n), 0) / {_SCALE} AS mean,
       if(sum(ratio_den) = 0, NULL, sum(ratio_num) / sum(ratio_den)) AS ratio_raw_units,
       sum(n_zero) / nullIf(sum(n), 0) AS zero_share
FROM {_rollup_rows("arm, host, kernel, cc, n, value_sum, ratio_num, ratio_den, n_zero", _COHORT_FILTER)}
GROUP BY arm, host, kernel, cc
ORDER BY arm, mean DESC"""),
    ]
    return dashboard("ccab-canary", "ccab / Canary comparison",
                     "Per-arm distributions, joint heatmaps against RTT and the judge's effect estimates.",
                     items, _variables(metric=True), time_from="now-24h")


# --- Rollout and alerts --------------------------------------------------------------------------

VERDICT_ANNOTATION_SQL = f"""
SELECT window_end AS time, window_end AS timeEnd,
       concat(treatment_arm, ': ', decision) AS title,
       concat(treatment_arm, ' vs ', control_arm, ' look ', toString(look), '/', toString(looks_planned), ': ',
              decision, '. ', arrayStringConcat(reasons, ' ')) AS text,
       arrayConcat([decision, treatment_arm], gates_failed) AS tags
FROM judge_verdicts FINAL
WHERE {POP} AND {ROLLOUT} AND $__timeFilter(window_end)
ORDER BY time"""


def rollout() -> tuple[dict, dict]:
    items: list[Panel | Row] = [
        Row("Stages"),
        Panel("Generation applied per host", "state-timeline", shape="timeseries", w=24, h=9,
              reads=("agent_status",),
              description="The assignment generation each host reported as applied, per interval (stage "
                          "timeline; annotations are the judge's verdicts). A host lagging the others is "
                          "still on an older stage. Always the last 7 days (raw heartbeats), in steps of at "
                          "least an hour (a stage lasts hours; 500 hosts x 1000 steps would be 500,000 points).",
              time_from="7d",
              options={"showValue": "auto", "mergeValues": True, "rowHeight": 0.8, "alignValue": "left"},
              field_config={"color": {"mode": "palette-classic"}},
              sql=f"""
SELECT toStartOfInterval(ts, INTERVAL greatest($__interval_s, 3600) SECOND) AS time, host, max(generation) AS generation
FROM agent_status
WHERE $__timeFilter(ts) AND {POP} AND {ROLLOUT} AND {ARMS} AND {KERNELS} AND state = 'applied'
GROUP BY time, host
ORDER BY time, host"""),
        Panel("Hosts per arm and state", "timeseries", shape="timeseries", w=12, h=8, unit="short",
              reads=("agent_status",),
              description="Distinct hosts reporting each (arm, state) per interval from agent_status "
                          "(applied, failed, unavailable, ...). Always the last 7 days (raw heartbeats).",
              time_from="7d",
              field_config={"custom": {"drawStyle": "line", "lineInterpolation": "stepAfter"}},
              sql=f"""
SELECT $__timeInterval(ts) AS time, concat(arm, ' ', state) AS arm_state, uniqExact(host) AS hosts
FROM agent_status
WHERE $__timeFilter(ts) AND {POP} AND {ROLLOUT} AND {ARMS} AND {KERNELS}
GROUP BY time, arm_state
ORDER BY time, arm_state"""),
        Panel("Assignments issued", "table", shape="table", w=12, h=8, reads=("assignments",),
              description="Per generation and arm: hosts assigned, the algorithm, when it was issued.",
              sql=f"""
SELECT generation, arm, arrayStringConcat(arraySort(groupUniqArray(cc)), '+') AS cc, uniqExact(host) AS hosts,
       fromUnixTimestamp64Milli(min(issued_at_ms)) AS first_issued, fromUnixTimestamp64Milli(max(issued_at_ms)) AS last_issued
FROM assignments
WHERE {POP} AND {ROLLOUT} AND {ARMS} AND issued_at_ms >= {FROM_MS} AND issued_at_ms <= {TO_MS}
GROUP BY generation, arm
ORDER BY generation DESC, arm"""),
        Row("Alerts and decisions"),
        Panel("Open alerts", "table", shape="table", w=24, h=8, reads=("alerts",),
              description="Alerts last seen in the time range that the controller has not answered with a rollback "
                          "(action none or halted), pages first. Estimate and interval: relative change, treatment "
                          "vs control. The report link has the evidence.",
              overrides=[{"matcher": {"id": "byRegexp", "options": "^(estimate|ci_low|ci_high)$"},
                          "properties": [{"id": "unit", "value": "percentunit"}, {"id": "decimals", "value": 2}]},
                         {"matcher": {"id": "byName", "options": "report_url"},
                          "properties": [{"id": "links", "value": [{"title": "report", "url": "${__value.raw}"}]}]}],
              sql=f"""
SELECT severity, summary, kind, metric, statistic, segment, treatment_arm, control_arm, direction,
       estimate, ci_low, ci_high, p_value, action,
       fromUnixTimestamp64Milli(first_seen_ms) AS first_seen, fromUnixTimestamp64Milli(ts_ms) AS last_seen,
       report_url, alert_id
FROM alerts FINAL
WHERE {POP} AND {ROLLOUT} AND {sql_in('arm', 'treatment_arm')}
  AND action != 'rolled_back' AND ts_ms >= {FROM_MS} AND ts_ms <= {TO_MS}
ORDER BY indexOf(['page', 'ticket', 'info'], severity), ts_ms DESC"""),
        Panel("Decisions", "table", shape="table", w=24, h=8, reads=("judge_verdicts",),
              description="The judge's decision at each look (rollback, halt, continue, pass, no_decision, "
                          "inconclusive_by_design), its reasons, failed data-quality gates and the alerts that are "
                          "its evidence.",
              sql=f"""
SELECT window_end, look, looks_planned, treatment_arm, control_arm, decision,
       arrayStringConcat(reasons, ' | ') AS reasons, arrayStringConcat(gates_failed, ', ') AS gates_failed,
       length(alert_ids) AS alerts, arrayStringConcat(alert_ids, ', ') AS alert_ids
FROM judge_verdicts FINAL
WHERE {POP} AND {ROLLOUT} AND {sql_in('arm', 'treatment_arm')} AND $__timeFilter(window_end)
ORDER BY window_end DESC, treatment_arm"""),
        Panel("Evidence: guardrails and findings at the latest look", "table", shape="table", w=12, h=9,
              reads=("judge_results",),
              description="judge_results rows of the newest look that are guardrails or that found a difference: "
                          "what a decision rests on.",
              overrides=[{"matcher": {"id": "byRegexp", "options": "^(estimate|ci_low|ci_high|margin)$"},
                          "properties": [{"id": "unit", "value": "percentunit"}, {"id": "decimals", "value": 2}]}],
              sql=f"""
WITH latest AS (
    SELECT max(window_end) AS w FROM judge_results FINAL WHERE {POP} AND {ROLLOUT} AND $__timeFilter(window_end)
)
SELECT treatment_arm, role, metric, statistic, segment, estimate, ci_low, ci_high, margin, p_value, severity, outcome
FROM judge_results FINAL
WHERE {POP} AND {ROLLOUT} AND {sql_in('arm', 'treatment_arm')} AND window_end = (SELECT w FROM latest)
  AND (role = 'guardrail' OR outcome IN ('regression', 'improvement'))
ORDER BY outcome = 'regression' DESC, role = 'guardrail' DESC, metric, statistic"""),
        Panel("Data-quality gates at the latest look", "table", shape="table", w=12, h=9, reads=("judge_gates",),
              description="judge_gates of the newest window: host completeness, sampling rate, cc compliance, "
                          "traffic share, hosts per arm. A failed gate means no decision.",
              sql=f"""
WITH latest AS (
    SELECT max(window_end) AS w FROM judge_gates FINAL WHERE {POP} AND {ROLLOUT} AND $__timeFilter(window_end)
)
SELECT gate, arm, host, status, value, threshold, detail
FROM judge_gates FINAL
WHERE {POP} AND {ROLLOUT} AND window_end = (SELECT w FROM latest)
ORDER BY status = 'fail' DESC, gate, arm, host"""),
    ]
    annotation = {"name": "Judge verdicts", "enable": True, "hide": False, "iconColor": "red",
                  "datasource": dict(DS_REF),
                  "target": {"refId": "Anno", "datasource": dict(DS_REF), "editorType": "sql",
                             "format": FORMAT_TABLE, "queryType": "table", "rawSql": VERDICT_ANNOTATION_SQL.strip()}}
    return dashboard("ccab-rollout", "ccab / Rollout and alerts",
                     "Stage timeline with the judge's verdicts, open alerts, decisions and their evidence.",
                     items, _variables(), annotations=[annotation], time_from="now-24h")


DASHBOARDS = {"fleet": fleet, "canary": canary, "rollout": rollout}
