-- cohort_goodput_by_rtt_class: nginx goodput of bulk requests per arm and client RTT class.
-- Grain: one row per arm x RTT class of the client prefix (pre-treatment: the median min RTT of
-- the prefix's tcp samples in the hour, pooled over arms; 'rtt:unknown' = no tcp sample of that
-- prefix in the hour). One value per bulk request (body >= the job's bulk filter, 1 MiB default).
-- goodput_bps_ratio = all body bits / all request seconds (a time-weighted mean);
-- rtt_class_lo_ms = the class's lower bound (NULL for 'rtt:unknown'), for sorting.
-- Parameters: pop, rollout_id ('' = all), t_from, t_to (DateTime, UTC).
WITH
classes AS (
    SELECT arm, cc, segment, hosts, n, ratio, p10, p50, p90, p99
    FROM cohort_quantiles(pop = {pop:String}, rollout_id = {rollout_id:String}, metric = 'goodput_bps',
                          segment = 'rtt:%', t_from = {t_from:DateTime('UTC')}, t_to = {t_to:DateTime('UTC')})
)
SELECT arm,
       cc,
       segment                                                               AS rtt_class,
       if(segment = 'rtt:unknown', NULL,
          toFloat64OrNull(extract(segment, '^rtt:(\\d+)')))                   AS rtt_class_lo_ms,
       hosts,
       n                                                                     AS requests,
       p10                                                                   AS goodput_bps_p10,
       p50                                                                   AS goodput_bps_p50,
       p90                                                                   AS goodput_bps_p90,
       ratio                                                                 AS goodput_bps_ratio
FROM classes
ORDER BY rtt_class_lo_ms NULLS LAST, arm
