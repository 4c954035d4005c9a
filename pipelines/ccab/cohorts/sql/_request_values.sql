-- _request_values (a fragment: `-- include: _request_values.sql` after _bulk_requests.sql): the
-- hour's bulk nginx requests with their RTT classes, size classes and goodput values, used by
-- request_cells.sql and request_metrics.sql.
-- Ends with a comma: the including statement's WITH list goes on after it.
classes AS (
    SELECT hour, pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
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
