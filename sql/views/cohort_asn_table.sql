-- cohort_asn_table: the per-ASN table: for each ASN segment ('asn:<n>' for the ranked top-N,
-- 'asn:other', 'asn:unknown') x arm, connections and the headline metrics over a window.
-- Grain: one row per ASN segment x arm. Columns: AS name (prefix_networks, now), hosts,
-- connections (n of rtt_us), goodput_bps p10/p50 (bulk requests), queue_delay_us p50/p90
-- (rtt_us - min_rtt_us per connection), rtt_us p50, retrans_pct as bytes_retrans / bytes_sent.
-- Quantiles: inverted-CDF rank over the merged 1/128-octave histograms (zeros included),
-- reported at the bin's geometric midpoint (as cohort_quantiles).
-- Whole UTC days of [t_from, t_to) are read from cohort_daily, the hours at its edges from
-- cohort_hourly (the same rows; sql/migrations/0017_cohort_daily.sql).
-- Parameters: pop, rollout_id ('' = all), t_from, t_to (DateTime, UTC).
WITH
cohort_rows AS (
    SELECT segment, arm, cc, host, metric, n, n_zero, ratio_num, ratio_den
    FROM cohort_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND segment LIKE 'asn:%'
      AND metric IN ('goodput_bps', 'queue_delay_us', 'rtt_us', 'retrans_pct')
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
    UNION ALL
    SELECT segment, arm, cc, host, metric, n, n_zero, ratio_num, ratio_den
    FROM cohort_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND segment LIKE 'asn:%'
      AND metric IN ('goodput_bps', 'queue_delay_us', 'rtt_us', 'retrans_pct')
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
),
-- the histograms' cells of the same rows (0018_cohort_cells.sql), summed by bin below
cell_rows AS (
    SELECT segment, arm, metric, bin, count
    FROM cohort_cells_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND segment LIKE 'asn:%'
      AND metric IN ('goodput_bps', 'queue_delay_us', 'rtt_us', 'retrans_pct')
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
    UNION ALL
    SELECT segment, arm, metric, bin, count
    FROM cohort_cells_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND segment LIKE 'asn:%'
      AND metric IN ('goodput_bps', 'queue_delay_us', 'rtt_us', 'retrans_pct')
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
),
merged_sums AS (
    SELECT segment, arm, metric,
           arrayStringConcat(arraySort(groupUniqArray(cc)), '+')              AS ccs,
           uniqExact(host)                                                   AS host_count,
           sum(n) AS n_values, sum(n_zero) AS n_zero_values,
           sum(ratio_num) AS num_total, sum(ratio_den) AS den_total
    FROM cohort_rows
    GROUP BY segment, arm, metric
),
merged_cells AS (
    SELECT segment, arm, metric, arraySort(groupArray((bin, c))) AS sorted_cells
    FROM (SELECT segment, arm, metric, bin, sum(count) AS c FROM cell_rows GROUP BY segment, arm, metric, bin)
    GROUP BY segment, arm, metric
),
merged AS (
    -- the merged histogram as a Map(bin -> count), bins ascending
    SELECT s.*, mapFromArrays(arrayMap(x -> x.1, c.sorted_cells), arrayMap(x -> x.2, c.sorted_cells)) AS merged_hist
    FROM merged_sums AS s LEFT JOIN merged_cells AS c USING (segment, arm, metric)
),
quantiled AS (
    SELECT *,
           arrayCumSum(mapValues(merged_hist))                               AS cum_counts,
           arrayMap(p -> if(n_values = 0, nan,
                            if(toUInt64(greatest(1, ceil(p * n_values))) <= n_zero_values, 0.,
                               exp2((mapKeys(merged_hist)[arrayFirstIndex(
                                   c -> c + n_zero_values >= toUInt64(greatest(1, ceil(p * n_values))),
                                   arrayCumSum(mapValues(merged_hist)))] + 0.5) / 128))),
                    [0.1, 0.5, 0.9])                                         AS q
    FROM merged
)
SELECT segment,
       any(nm.as_name)                                                       AS as_name,
       arm,
       anyIf(ccs, metric = 'rtt_us')                                         AS cc,
       max(host_count)                                                       AS hosts,
       sumIf(n_values, metric = 'rtt_us')                                    AS connections,
       anyIf(q[1], metric = 'goodput_bps')                                   AS goodput_bps_p10,
       anyIf(q[2], metric = 'goodput_bps')                                   AS goodput_bps_p50,
       anyIf(q[2], metric = 'queue_delay_us')                                AS queue_delay_us_p50,
       anyIf(q[3], metric = 'queue_delay_us')                                AS queue_delay_us_p90,
       anyIf(q[2], metric = 'rtt_us')                                        AS rtt_us_p50,
       if(sumIf(den_total, metric = 'retrans_pct') > 0,
          100 * sumIf(num_total, metric = 'retrans_pct') / sumIf(den_total, metric = 'retrans_pct'), NULL) AS retrans_pct
FROM quantiled AS qd
LEFT JOIN (SELECT asn, any(as_name) AS as_name FROM prefix_networks GROUP BY asn) AS nm
       ON nm.asn = toUInt32OrZero(substring(qd.segment, 5))
GROUP BY segment, arm
ORDER BY connections DESC, segment, arm
