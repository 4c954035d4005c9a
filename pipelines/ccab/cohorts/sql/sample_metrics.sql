-- sample_metrics: per-sample (snapshot) metrics of one hour, summarised (-> cohort_hourly_stage).
-- Grain: one row per hour x cohort x segment x metric. Source grain: one value per tcp sample
-- (every snapshot in the hour, so long-lived sockets weigh more: what a PDF of raw `ss` output
-- shows; Dropbox's in-flight PDFs are of this kind). Segments: 'all' and the prefix's RTT class.
-- Metrics: inflight_bytes_per_sample (Send-Q - notsent), rtt_us_per_sample (srtt).
-- Cohort keys come from each sample itself (its arm at sampling time).
-- How: one aggregation per cohort x metric x RTT class, then each of its rows added to 'all' and its
-- class (a second aggregation over those few rows); the cells are sample_cells.sql's;
-- the big aggregation groups by a 64-bit hash of the cohort keys (see connection_metrics.sql).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _sample_values.sql
finest AS (
    SELECT cohort_id, metric, rtt_class,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm, any(kernel) AS kernel,
           any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           sumIf(value, valid)                                                AS value_total,
           sumIf(value * value, valid)                                        AS value_sq_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM classified
    GROUP BY cohort_id, metric, rtt_class
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host,
       segment,
       metric,
       sum(n_values)                                                          AS n,
       sum(n_zero_values)                                                     AS n_zero,
       sum(n_missing_values)                                                  AS n_missing,
       toUInt64(0)                                                            AS n_above_50pct,
       sum(value_total)                                                       AS value_sum,
       sum(value_sq_total)                                                    AS value_sum_sq,
       toFloat64(0)                                                           AS ratio_num,
       toFloat64(0)                                                           AS ratio_den,
       sum(weight_total)                                                      AS weight_sum
FROM finest
ARRAY JOIN ['all', rtt_class] AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric
