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
-- The big aggregation groups by a 64-bit hash of the cohort's keys (fixed-width keys hash ~2x
-- faster than seven strings) and carries the keys with any(); a collision between two of an
-- hour's few thousand cohorts has a probability of ~1e-12.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
connections AS (
    SELECT *,
           cityHash64(hour, pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           -- self-inflicted delay: srtt above the path's minimum = the standing queue the flow sees
           if(rtt_us >= min_rtt_us, toFloat64(rtt_us) - toFloat64(min_rtt_us), NULL) AS queue_delay_us
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
metric_values AS (
    SELECT cohort_id, hour, pop, rollout_id, arm, kernel, cc, cc_version, host, rtt_class, is_bulk, weight,
           m.1 AS metric, m.2 AS value, m.3 AS num, m.4 AS den
    FROM connections
    ARRAY JOIN [
        ('retrans_pct',        CAST(retrans_pct        AS Nullable(Float64)), toFloat64(bytes_retrans),     toFloat64(bytes_sent)),
        ('inflight_bytes',     CAST(inflight_bytes     AS Nullable(Float64)), 0., 0.),
        ('rtt_us',             CAST(rtt_us             AS Nullable(Float64)), 0., 0.),
        ('min_rtt_us',         CAST(min_rtt_us         AS Nullable(Float64)), 0., 0.),
        ('bbr_min_rtt_us',     CAST(bbr_min_rtt_us     AS Nullable(Float64)), 0., 0.),
        ('delivery_rate_bps',  CAST(delivery_rate_bps  AS Nullable(Float64)), 0., 0.),
        ('rwnd_limited_pct',   CAST(rwnd_limited_pct   AS Nullable(Float64)), toFloat64(rwnd_limited_ms),   toFloat64(busy_ms)),
        ('sndbuf_limited_pct', CAST(sndbuf_limited_pct AS Nullable(Float64)), toFloat64(sndbuf_limited_ms), toFloat64(busy_ms)),
        ('rto_count',          CAST(rto_count          AS Nullable(Float64)), 0., 0.),
        ('queue_delay_us',     queue_delay_us,                                 0., 0.),
        ('queue_delay_pct',    if(rtt_us > 0, 100 * queue_delay_us / rtt_us, NULL),
                               ifNull(queue_delay_us, 0.),                     toFloat64(ifNull(rtt_us, 0)))
    ] AS m
),
classified AS (
    SELECT *, value IS NOT NULL AND isFinite(value) AND value >= 0 AS valid
    FROM metric_values
),
finest AS (
    SELECT cohort_id, metric, rtt_class, is_bulk,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           countIf(valid AND value > 50 AND endsWith(metric, '_pct'))         AS n_above_values,
           sumIf(assumeNotNull(value), valid)                                 AS value_total,
           sumIf(assumeNotNull(value) * assumeNotNull(value), valid)          AS value_sq_total,
           sumIf(num, valid)                                                  AS num_total,
           sumIf(den, valid)                                                  AS den_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM classified
    GROUP BY cohort_id, metric, rtt_class, is_bulk
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric,
       sum(n_values)                                                          AS n,
       sum(n_zero_values)                                                     AS n_zero,
       sum(n_missing_values)                                                  AS n_missing,
       sum(n_above_values)                                                    AS n_above_50pct,
       sum(value_total)                                                       AS value_sum,
       sum(value_sq_total)                                                    AS value_sum_sq,
       sum(num_total)                                                         AS ratio_num,
       sum(den_total)                                                         AS ratio_den,
       sum(weight_total)                                                      AS weight_sum
FROM finest
ARRAY JOIN if(is_bulk, ['all', rtt_class, 'bulk'], ['all', rtt_class]) AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric
