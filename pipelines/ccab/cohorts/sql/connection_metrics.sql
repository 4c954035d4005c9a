-- connection_metrics: per-connection metrics of one hour, summarised (-> cohort_hourly_stage).
-- Grain: one row per hour x cohort (pop, rollout_id, arm, kernel, cc, cc_version, host) x segment
-- x metric. Source grain: one value per connection (cohort_connections_stage: its close record, or
-- its last sample when no close record covers it).
-- Segments: 'all', the prefix's RTT class ('rtt:...'), and 'bulk' (bytes_acked >= bulk filter).
-- Metrics (units in the names): retrans_pct (100 x bytes_retrans / bytes_sent), inflight_bytes
-- (Send-Q - notsent, mean over busy samples), rtt_us (srtt), min_rtt_us (the kernel's generic
-- tcpi_min_rtt, every cc), bbr_min_rtt_us (BBR's own mrtt, BBR sockets only: never compare it
-- with min_rtt_us), delivery_rate_bps, rwnd_limited_pct and sndbuf_limited_pct
-- (100 x *_limited_ms / busy_ms), rto_count (RTO timeouts of the connection, tcpi_total_rto,
-- kernel >= 6.7; missing elsewhere), queue_delay_us (rtt_us - min_rtt_us: the standing queue the
-- flow sees; missing when either is) and queue_delay_pct (its share of the RTT; ratio of sums =
-- queueing time / RTT time).
-- The histograms (cells: one row per bin with its count) are connection_cells.sql's, into
-- cohort_cells_hourly_stage; this file writes the sums and counts only.
-- How: one aggregation over the values at the finest split (cohort x metric x RTT class x bulk),
-- then each of its (few) rows is added to the segments it belongs to ('all', its RTT class, and
-- 'bulk' when bulk) — a second aggregation over the finest rows, not over the values (exact:
-- every column is a sum).
-- The big aggregation groups by fixed-width keys only (cohort_id, the metric's position, the RTT
-- class's position, bulk); the cohort's keys are joined back and the names looked up at the end
-- (_connection_values.sql).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _connection_values.sql
finest AS (
    SELECT cohort_id, m, rtt_class_ix, is_bulk,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           countIf(valid AND value > 50)                                      AS n_above_values,
           sumIf(assumeNotNull(value), valid)                                 AS value_total,
           sumIf(assumeNotNull(value) * assumeNotNull(value), valid)          AS value_sq_total,
           sumIf(num, valid)                                                  AS num_total,
           sumIf(den, valid)                                                  AS den_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM (SELECT *, value IS NOT NULL AND isFinite(value) AND value >= 0 AS valid FROM connection_values)
    GROUP BY cohort_id, m, rtt_class_ix, is_bulk
),
segments AS (
    SELECT cohort_id, m, segment,
           sum(n_values) AS n, sum(n_zero_values) AS n_zero, sum(n_missing_values) AS n_missing,
           sum(n_above_values) AS n_above, sum(value_total) AS value_sum, sum(value_sq_total) AS value_sum_sq,
           sum(num_total) AS ratio_num, sum(den_total) AS ratio_den, sum(weight_total) AS weight_sum
    FROM finest
    ARRAY JOIN arrayConcat(['all', ['rtt:0-20ms', 'rtt:20-50ms', 'rtt:50-100ms', 'rtt:100-200ms', 'rtt:200ms+',
                              'rtt:unknown'][rtt_class_ix]], if(is_bulk, ['bulk'], [])) AS segment
    GROUP BY cohort_id, m, segment
)
SELECT k.hour AS hour, k.pop AS pop, k.rollout_id AS rollout_id, k.arm AS arm, k.kernel AS kernel, k.cc AS cc,
       k.cc_version AS cc_version, k.host AS host, s.segment AS segment, metric_names[s.m + 1] AS metric,
       s.n AS n, s.n_zero AS n_zero, s.n_missing AS n_missing,
       -- values above 50: counted for the percentages only
       if(endsWith(metric, '_pct'), s.n_above, 0)                             AS n_above_50pct,
       s.value_sum AS value_sum, s.value_sum_sq AS value_sum_sq, s.ratio_num AS ratio_num,
       s.ratio_den AS ratio_den, s.weight_sum AS weight_sum
FROM segments AS s
INNER JOIN cohorts AS k ON k.cohort_id = s.cohort_id
