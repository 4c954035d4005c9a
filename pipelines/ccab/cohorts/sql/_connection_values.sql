-- _connection_values (a fragment, not a step: job.read_sql puts it where a statement says
-- `-- include: _connection_values.sql`, inside its WITH list): the per-connection metrics, declared
-- ONCE for connection_metrics, connection_cells, network_metrics and network_cells.sql.
--   metric_names      the metrics, in order: metric m (0-based) is metric_names[m + 1]
--   connections       the hour's connections (cohort_connections_stage) with cohort_id (a 64-bit hash
--                     of the cohort's keys: fixed-width group keys hash faster than seven strings; a
--                     collision between two of an hour's few thousand cohorts has a probability of
--                     ~1e-12), prefix_key (peer_prefix hashed, a fixed-width join key), rtt_class_ix (the position of rtt_class in the RTT classes, 1-based)
--                     and queue_delay_us (srtt above the path's minimum: the standing queue the flow sees)
--   connection_values one row per connection x metric: m, value (NULL: missing), num and den (what the
--                     ratio of sums adds up; 0 for metrics without a ratio). Add a metric here: its
--                     name, its value, its num and den, at the same position in each list.
--   cohorts           one row per cohort_id with its keys: statements group by the fixed-width
--                     cohort_id and join the keys back once per output row (not any() per group)
-- Ends with a comma: the including statement's WITH list goes on after it.
[
    'retrans_pct', 'inflight_bytes', 'rtt_us', 'min_rtt_us', 'bbr_min_rtt_us', 'delivery_rate_bps',
    'rwnd_limited_pct', 'sndbuf_limited_pct', 'rto_count', 'queue_delay_us', 'queue_delay_pct'
] AS metric_names,
connections AS (
    SELECT *,
           cityHash64(hour, pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           cityHash64(peer_prefix) AS prefix_key,
           indexOf(['rtt:0-20ms', 'rtt:20-50ms', 'rtt:50-100ms', 'rtt:100-200ms', 'rtt:200ms+', 'rtt:unknown'],
                   rtt_class) AS rtt_class_ix,
           if(rtt_us >= min_rtt_us, toFloat64(rtt_us) - toFloat64(min_rtt_us), NULL) AS queue_delay_us
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
connection_values AS (
    SELECT *, mv.1 AS m, mv.2 AS value, mv.3 AS num, mv.4 AS den
    FROM connections
    ARRAY JOIN arrayZip(range(11), [
        -- value, one per metric_names entry
        CAST(retrans_pct        AS Nullable(Float64)),
        CAST(inflight_bytes     AS Nullable(Float64)),
        CAST(rtt_us             AS Nullable(Float64)),
        CAST(min_rtt_us         AS Nullable(Float64)),
        CAST(bbr_min_rtt_us     AS Nullable(Float64)),
        CAST(delivery_rate_bps  AS Nullable(Float64)),
        CAST(rwnd_limited_pct   AS Nullable(Float64)),
        CAST(sndbuf_limited_pct AS Nullable(Float64)),
        CAST(rto_count          AS Nullable(Float64)),
        queue_delay_us,
        if(rtt_us > 0, 100 * queue_delay_us / rtt_us, NULL)
    ], [
        -- num: retrans_pct, rwnd_limited_pct, sndbuf_limited_pct, queue_delay_pct are ratios of sums
        toFloat64(bytes_retrans), 0., 0., 0., 0., 0., toFloat64(rwnd_limited_ms), toFloat64(sndbuf_limited_ms), 0., 0.,
        ifNull(queue_delay_us, 0.)
    ], [
        -- den
        toFloat64(bytes_sent), 0., 0., 0., 0., 0., toFloat64(busy_ms), toFloat64(busy_ms), 0., 0.,
        toFloat64(ifNull(rtt_us, 0))
    ]) AS mv
),
cohorts AS (
    SELECT cohort_id, any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host
    FROM connections
    GROUP BY cohort_id
),
