-- sample_metrics: per-sample (snapshot) metrics of one hour, summarised (-> cohort_hourly_stage).
-- Grain: one row per hour x cohort x segment x metric. Source grain: one value per tcp sample
-- (every snapshot in the hour, so long-lived sockets weigh more: what a PDF of raw `ss` output
-- shows; Dropbox's in-flight PDFs are of this kind). Segments: 'all' and the prefix's RTT class.
-- Metrics: inflight_bytes_per_sample (Send-Q - notsent), rtt_us_per_sample (srtt).
-- Cohort keys come from each sample itself (its arm at sampling time).
-- Parameters: hour_start DateTime('UTC').
WITH
samples AS (
    SELECT pop, rollout_id, arm, kernel, cc, ifNull(cc_version, 0) AS cc_version, host, peer_prefix,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight,
           toInt64(send_q_bytes) - toInt64(notsent_bytes)                       AS inflight_bytes,
           rtt_us
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
),
classes AS (
    SELECT pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour = {hour_start:DateTime('UTC')}
),
segmented AS (
    SELECT s.pop AS pop, s.rollout_id AS rollout_id, s.arm AS arm, s.kernel AS kernel, s.cc AS cc,
           s.cc_version AS cc_version, s.host AS host, s.weight AS weight,
           s.inflight_bytes AS inflight_bytes, s.rtt_us AS rtt_us,
           ['all', if(p.rtt_class = '', 'rtt:unknown', p.rtt_class)]            AS segments
    FROM samples AS s
    LEFT JOIN classes AS p ON p.pop = s.pop AND p.peer_prefix = s.peer_prefix
),
metric_values AS (
    SELECT pop, rollout_id, arm, kernel, cc, cc_version, host, segments, weight,
           m.1 AS metric, m.2 AS value
    FROM segmented
    ARRAY JOIN [
        ('inflight_bytes_per_sample', CAST(inflight_bytes AS Nullable(Float64))),
        ('rtt_us_per_sample',         CAST(rtt_us         AS Nullable(Float64)))
    ] AS m
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid,
           toInt32(floor(log2(if(valid AND value > 0, assumeNotNull(value), 1)) * 128)) AS bin
    FROM metric_values
)
SELECT {hour_start:DateTime('UTC')}                                           AS hour,
       pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric,
       countIf(valid)                                                         AS n,
       countIf(valid AND value = 0)                                           AS n_zero,
       countIf(NOT valid)                                                     AS n_missing,
       toUInt64(0)                                                            AS n_above_50pct,
       sumIf(assumeNotNull(value), valid)                                     AS value_sum,
       sumIf(assumeNotNull(value) * assumeNotNull(value), valid)              AS value_sum_sq,
       toFloat64(0)                                                           AS ratio_num,
       toFloat64(0)                                                           AS ratio_den,
       sumIf(weight, valid)                                                   AS weight_sum,
       sumMapIf(map(bin, toUInt64(1)), valid AND value > 0)                   AS hist
FROM classified
ARRAY JOIN segments AS segment
GROUP BY pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric
