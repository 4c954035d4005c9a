-- connection_metrics: per-connection metrics of one hour, summarised (-> cohort_hourly_stage).
-- Grain: one row per hour x cohort (pop, rollout_id, arm, kernel, cc, cc_version, host) x segment
-- x metric. Source grain: one value per connection (cohort_connections_stage: its last sample).
-- Segments: 'all', the prefix's RTT class ('rtt:...'), and 'bulk' (bytes_acked >= bulk filter).
-- Metrics (units in the names): retrans_pct (100 x bytes_retrans / bytes_sent), inflight_bytes
-- (Send-Q - notsent), rtt_us (srtt), min_rtt_us (the kernel's generic tcpi_min_rtt, every cc),
-- bbr_min_rtt_us (BBR's own mrtt, BBR sockets only: never compare it with min_rtt_us),
-- delivery_rate_bps, rwnd_limited_pct and sndbuf_limited_pct (100 x *_limited_ms / busy_ms).
-- Bins: floor(log2(value) * 128) for value > 0; zeros only in n_zero (see 0003_cohort_rollups.sql).
-- Parameters: hour_start DateTime('UTC').
WITH
connections AS (
    SELECT *,
           arrayConcat(['all', rtt_class], if(is_bulk, ['bulk'], []))           AS segments
    FROM cohort_connections_stage
    WHERE hour = {hour_start:DateTime('UTC')}
),
metric_values AS (
    SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segments, weight,
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
        ('sndbuf_limited_pct', CAST(sndbuf_limited_pct AS Nullable(Float64)), toFloat64(sndbuf_limited_ms), toFloat64(busy_ms))
    ] AS m
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid,
           toInt32(floor(log2(if(valid AND value > 0, assumeNotNull(value), 1)) * 128)) AS bin
    FROM metric_values
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric,
       countIf(valid)                                                         AS n,
       countIf(valid AND value = 0)                                           AS n_zero,
       countIf(NOT valid)                                                     AS n_missing,
       countIf(valid AND value > 50 AND endsWith(metric, '_pct'))             AS n_above_50pct,
       sumIf(assumeNotNull(value), valid)                                     AS value_sum,
       sumIf(assumeNotNull(value) * assumeNotNull(value), valid)              AS value_sum_sq,
       sumIf(num, valid)                                                      AS ratio_num,
       sumIf(den, valid)                                                      AS ratio_den,
       sumIf(weight, valid)                                                   AS weight_sum,
       sumMapIf(map(bin, toUInt64(1)), valid AND value > 0)                   AS hist
FROM classified
ARRAY JOIN segments AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric
