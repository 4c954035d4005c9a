-- cohort_heatmap: joint distribution of two per-connection metrics per arm over a window.
-- Grain: one row per arm x x_bin x y_bin (bins_per_octave per factor of 2: 1, 2, 4 or 8),
-- counting connections (each connection once, at its last sample). The pair names the axes
-- 'x:y' with their units: 'rtt_us:retrans_pct', 'rtt_us:inflight_bytes'. A value of exactly 0
-- has the bin -2147483648 (x_lo = x_hi = 0): zero retransmits are a row of their own.
-- share_of_arm = connections / all connections of the arm in the heatmap (rows sum to 1 per arm).
-- Whole UTC days of [t_from, t_to) are read from cohort_heatmap_daily, the hours at its edges from
-- cohort_heatmap_hourly (the same rows; sql/migrations/0017_cohort_daily.sql).
-- Parameters: pop, rollout_id ('' = all), pair, segment ('all', 'bulk' or an access type
--             'access:mobile|fixed|satellite|hosting|unknown'), t_from, t_to
--             (DateTime, UTC), bins_per_octave (UInt8: 1, 2, 4 or 8).
WITH
cohort_rows AS (
    SELECT arm, cc, x_bin, y_bin, connections
    FROM cohort_heatmap_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND pair = {pair:String}
      AND segment = {segment:String}
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
      AND throwIf(8 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be 1, 2, 4 or 8') = 0
    UNION ALL
    SELECT arm, cc, x_bin, y_bin, connections
    FROM cohort_heatmap_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND pair = {pair:String}
      AND segment = {segment:String}
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
      AND throwIf(8 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be 1, 2, 4 or 8') = 0
),
rebinned AS (
    SELECT arm,
           arrayStringConcat(arraySort(groupUniqArray(cc)), '+')              AS ccs,
           if(x_bin = -2147483648, x_bin, toInt32(floor(x_bin * {bins_per_octave:UInt8} / 8))) AS x,
           if(y_bin = -2147483648, y_bin, toInt32(floor(y_bin * {bins_per_octave:UInt8} / 8))) AS y,
           sum(connections)                                                  AS cell_connections
    FROM cohort_rows
    GROUP BY arm, x, y
)
SELECT arm,
       ccs                                                                   AS cc,
       x                                                                     AS x_bin,
       y                                                                     AS y_bin,
       if(x = -2147483648, 0., exp2(x / {bins_per_octave:UInt8}))            AS x_lo,
       if(x = -2147483648, 0., exp2((x + 1) / {bins_per_octave:UInt8}))      AS x_hi,
       if(y = -2147483648, 0., exp2(y / {bins_per_octave:UInt8}))            AS y_lo,
       if(y = -2147483648, 0., exp2((y + 1) / {bins_per_octave:UInt8}))      AS y_hi,
       cell_connections                                                      AS connections,
       cell_connections / sum(cell_connections) OVER (PARTITION BY arm)      AS share_of_arm
FROM rebinned
ORDER BY arm, x_bin, y_bin
