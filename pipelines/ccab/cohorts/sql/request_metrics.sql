-- request_metrics: nginx goodput of one hour, summarised (-> cohort_hourly_stage).
-- Grain: one row per hour x cohort x segment x metric (metric = 'goodput_bps').
-- Source grain: one value per bulk request (http_requests with body_bytes_sent >= the bulk
-- filter, 1 MiB by default): smaller bodies fit in the socket buffer and $request_time ends
-- when the last byte is written, not acknowledged, so their "goodput" measures nothing.
-- goodput_bps = body_bytes_sent * 8 / (request_time_ms / 1000); a request with
-- request_time_ms <= 0 has no value (n_missing). ratio_num / ratio_den = body bits / seconds.
-- Cohort keys: the request's host, arm and the host's default cc when the line was read;
-- cc_version is not on the wire for requests, so it is taken from the same host's connections
-- with that cc in the hour (cohort_connections_stage; 0 when there are none). Segments: 'all', the prefix's RTT class
-- (from the hour's tcp samples; 'rtt:unknown' when the prefix had none), and the response size
-- class 'size:<4MiB', 'size:4-16MiB', 'size:16MiB+' (a property of the request, pre-treatment).
-- How: one aggregation per cohort x RTT class x size class, then each of its rows added to the
-- segments it belongs to (a second aggregation over those few rows); the cells are request_cells.sql's.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
-- include: _bulk_requests.sql
-- include: _request_values.sql
finest AS (
    SELECT cohort_id, rtt_class, size_class,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm, any(kernel) AS kernel,
           any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           sumIf(assumeNotNull(value), valid)                                 AS value_total,
           sumIf(assumeNotNull(value) * assumeNotNull(value), valid)          AS value_sq_total,
           sumIf(num, valid)                                                  AS num_total,
           sumIf(den, valid)                                                  AS den_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM classified
    GROUP BY cohort_id, rtt_class, size_class
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host,
       segment,
       'goodput_bps'                                                          AS metric,
       sum(n_values)                                                          AS n,
       sum(n_zero_values)                                                     AS n_zero,
       sum(n_missing_values)                                                  AS n_missing,
       toUInt64(0)                                                            AS n_above_50pct,
       sum(value_total)                                                       AS value_sum,
       sum(value_sq_total)                                                    AS value_sum_sq,
       sum(num_total)                                                         AS ratio_num,
       sum(den_total)                                                         AS ratio_den,
       sum(weight_total)                                                      AS weight_sum
FROM finest
ARRAY JOIN ['all', rtt_class, size_class] AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment
