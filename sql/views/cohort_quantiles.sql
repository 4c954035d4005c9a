-- cohort_quantiles: one metric's distribution per arm over a window, read from cohort_hourly.
-- Grain: one row per arm x segment (segments matching the `segment` LIKE pattern: 'all',
-- 'bulk', 'rtt:%', ...), pooled over hosts and hours of [t_from, t_to); with metric = '', one
-- row per arm x segment x metric (every metric in one pass: the `metric` column names it).
-- Quantiles: inverted-CDF rank k = ceil(p * n) over all n values (zeros included); reported as 0
-- when the rank falls among the zeros, else as the geometric midpoint of its 1/128-octave bin
-- (within 0.27% of the exact quantile). p50_nonzero: the median of the values > 0 only (e.g.
-- retransmits of connections that had any; in flight of busy sockets). Units: the metric's own.
-- ratio: sum(ratio_num) / sum(ratio_den) in the metric's unit (x100 for *_pct), NULL if not a ratio.
-- Whole UTC days of [t_from, t_to) are read from cohort_daily, the hours at its edges from
-- cohort_hourly (the same rows; sql/migrations/0017_cohort_daily.sql).
-- Parameters: pop, rollout_id ('' = all), metric ('' = all), segment (LIKE pattern),
--             t_from, t_to (DateTime, UTC).
WITH
cohort_rows AS (
    SELECT metric, arm, cc, host, segment, n, n_zero, n_missing, n_above_50pct, value_sum,
           ratio_num, ratio_den
    FROM cohort_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND ({metric:String} = '' OR metric = {metric:String})
      AND segment LIKE {segment:String}
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
    UNION ALL
    SELECT metric, arm, cc, host, segment, n, n_zero, n_missing, n_above_50pct, value_sum,
           ratio_num, ratio_den
    FROM cohort_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND ({metric:String} = '' OR metric = {metric:String})
      AND segment LIKE {segment:String}
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
),
-- the histograms' cells of the same rows (0018_cohort_cells.sql), summed by bin below
cell_rows AS (
    SELECT metric, arm, segment, bin, count
    FROM cohort_cells_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND ({metric:String} = '' OR metric = {metric:String})
      AND segment LIKE {segment:String}
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
    UNION ALL
    SELECT metric, arm, segment, bin, count
    FROM cohort_cells_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND ({metric:String} = '' OR metric = {metric:String})
      AND segment LIKE {segment:String}
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
),
per_arm_sums AS (
    SELECT metric,
           arm,
           segment,
           arrayStringConcat(arraySort(groupUniqArray(cc)), '+')              AS ccs,
           uniqExact(host)                                                   AS host_count,
           sum(n)                                                            AS n_values,
           sum(n_zero)                                                       AS n_zero_values,
           sum(n_missing)                                                    AS n_missing_values,
           sum(n_above_50pct)                                                AS n_above_values,
           sum(value_sum)                                                    AS value_total,
           sum(ratio_num)                                                    AS num_total,
           sum(ratio_den)                                                    AS den_total
    FROM cohort_rows
    GROUP BY metric, arm, segment
),
per_arm_cells AS (
    SELECT metric, arm, segment, arraySort(groupArray((bin, c))) AS sorted_cells
    FROM (SELECT metric, arm, segment, bin, sum(count) AS c FROM cell_rows GROUP BY metric, arm, segment, bin)
    GROUP BY metric, arm, segment
),
per_arm AS (
    -- the merged histogram as a Map(bin -> count), bins ascending
    SELECT s.*, mapFromArrays(arrayMap(x -> x.1, c.sorted_cells), arrayMap(x -> x.2, c.sorted_cells)) AS merged_hist
    FROM per_arm_sums AS s LEFT JOIN per_arm_cells AS c USING (metric, arm, segment)
),
ranked AS (
    SELECT *,
           mapKeys(merged_hist)                                              AS bins,
           arrayCumSum(mapValues(merged_hist))                               AS cum_counts,
           arrayMap(p -> toUInt64(greatest(1, ceil(p * n_values))), [0.1, 0.5, 0.9, 0.99]) AS ranks,
           toUInt64(greatest(1, ceil(0.5 * (n_values - n_zero_values))))    AS rank_nonzero
    FROM per_arm
),
quantiles AS (
    SELECT *,
           arrayMap(k -> if(n_values = 0, nan,
                            if(k <= n_zero_values, 0.,
                               exp2((bins[arrayFirstIndex(c -> c + n_zero_values >= k, cum_counts)] + 0.5) / 128))),
                    ranks)                                                   AS q,
           if(n_values = n_zero_values, nan,
              exp2((bins[arrayFirstIndex(c -> c >= rank_nonzero, cum_counts)] + 0.5) / 128)) AS q_nonzero
    FROM ranked
)
SELECT arm,
       ccs                                                                   AS cc,
       segment,
       host_count                                                            AS hosts,
       n_values                                                              AS n,
       n_zero_values                                                         AS n_zero,
       n_missing_values                                                      AS n_missing,
       if(n_values > 0, n_zero_values / n_values, nan)                       AS zero_share,
       if(n_values > 0, value_total / n_values, nan)                         AS mean,
       if(den_total > 0, num_total / den_total * if(endsWith(metric, '_pct'), 100, 1), NULL) AS ratio,
       if(n_values > 0, n_above_values / n_values, nan)                      AS share_above_50pct,
       q[1]                                                                  AS p10,
       q[2]                                                                  AS p50,
       q[3]                                                                  AS p90,
       q[4]                                                                  AS p99,
       q_nonzero                                                             AS p50_nonzero,
       metric
FROM quantiles
ORDER BY metric, segment, arm
