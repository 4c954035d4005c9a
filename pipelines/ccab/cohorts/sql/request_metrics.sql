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
bulk_requests AS (
    SELECT toStartOfHour(ts) AS hour, pop, rollout_id, arm, kernel, cc, host, peer_prefix, body_bytes_sent, request_time_ms,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight
    FROM http_requests
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
      AND body_bytes_sent >= {bulk_min_bytes:UInt64}
),
classes AS (
    SELECT hour, pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
versions AS (
    SELECT hour, pop, host, cc, max(cc_version) AS cc_version
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
    GROUP BY hour, pop, host, cc
),
computed AS (
    SELECT r.hour AS hour, r.pop AS pop, r.rollout_id AS rollout_id, r.arm AS arm, r.kernel AS kernel, r.cc AS cc,
           r.host AS host, r.weight AS weight,
           v.cc_version                                                         AS cc_version,
           cityHash64(r.hour, r.pop, r.rollout_id, r.arm, r.kernel, r.cc, v.cc_version, r.host) AS cohort_id,
           if(r.request_time_ms > 0,
              r.body_bytes_sent * 8 / (r.request_time_ms / 1000), NULL)          AS value,
           toFloat64(r.body_bytes_sent * 8)                                     AS num,
           r.request_time_ms / 1000                                             AS den,
           if(p.rtt_class = '', 'rtt:unknown', p.rtt_class)                     AS rtt_class,
           multiIf(r.body_bytes_sent < 4194304,  'size:<4MiB',
                   r.body_bytes_sent < 16777216, 'size:4-16MiB',
                                                 'size:16MiB+')                 AS size_class
    FROM bulk_requests AS r
    LEFT JOIN classes AS p ON p.hour = r.hour AND p.pop = r.pop AND p.peer_prefix = r.peer_prefix
    LEFT JOIN versions AS v ON v.hour = r.hour AND v.pop = r.pop AND v.host = r.host AND v.cc = r.cc
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid
    FROM computed
),
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
