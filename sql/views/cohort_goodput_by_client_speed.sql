-- cohort_goodput_by_client_speed: nginx goodput per client-speed band x arm (Dropbox's central
-- figure: goodput by client speed x cc).
-- Grain: one row per speed band x arm. A client prefix's band comes from its median goodput in the
-- PRE-PERIOD [pre_from, pre_to) only (requests with body >= 100 kB, at least 3 of them; the same
-- bands as the judge's heterogeneity, ccab.judge.data.SPEED_BANDS_MBPS: <1, 1-10, 10-50, >50
-- Mbit/s), never from the window's outcomes: the view refuses a pre-period that ends after t_from.
-- Prefixes without a pre-period band are left out (`requests` counts what is banded).
-- Values: the window [t_from, t_to)'s requests of the rollout with body >= 100 kB; quantiles are
-- exact (quantilesExact), goodput_bps_gmean = exp(mean log goodput) (what the judge compares).
-- Parameters: pop, rollout_id ('' = all), pre_from, pre_to, t_from, t_to (DateTime, UTC).
WITH
bands AS (
    SELECT peer_prefix,
           multiIf(m < 1e6, 'speed:<1Mbps', m < 10e6, 'speed:1-10Mbps', m < 50e6, 'speed:10-50Mbps',
                   'speed:>50Mbps')                                          AS speed_band,
           multiIf(m < 1e6, 0., m < 10e6, 1., m < 50e6, 10., 50.)           AS speed_band_lo_mbps
    FROM (
        SELECT peer_prefix, quantileExact(0.5)(goodput_bps) AS m
        FROM http_requests
        WHERE ({pop:String} = '' OR pop = {pop:String})
          AND ts_ms >= toUnixTimestamp({pre_from:DateTime('UTC')}) * 1000
          AND ts_ms < toUnixTimestamp({pre_to:DateTime('UTC')}) * 1000
          AND throwIf({pre_to:DateTime('UTC')} > {t_from:DateTime('UTC')},
                      'the pre-period (pre_to) must end at or before t_from: bands come from pre-treatment data only') = 0
          AND body_bytes_sent >= 100000 AND goodput_bps > 0 AND peer_prefix IS NOT NULL
        GROUP BY peer_prefix
        HAVING count() >= 3
    )
),
window_requests AS (
    SELECT b.speed_band AS speed_band, b.speed_band_lo_mbps AS speed_band_lo_mbps, r.arm AS arm, r.cc AS cc,
           r.host AS host, assumeNotNull(r.goodput_bps) AS goodput_bps
    FROM http_requests AS r
    INNER JOIN bands AS b ON b.peer_prefix = r.peer_prefix
    WHERE ({pop:String} = '' OR r.pop = {pop:String})
      AND ({rollout_id:String} = '' OR r.rollout_id = {rollout_id:String})
      AND r.ts_ms >= toUnixTimestamp({t_from:DateTime('UTC')}) * 1000
      AND r.ts_ms < toUnixTimestamp({t_to:DateTime('UTC')}) * 1000
      AND r.body_bytes_sent >= 100000 AND r.goodput_bps > 0
)
SELECT speed_band,
       any(speed_band_lo_mbps)                                               AS speed_band_lo_mbps,
       arm,
       arrayStringConcat(arraySort(groupUniqArray(cc)), '+')                 AS cc,
       uniqExact(host)                                                       AS hosts,
       count()                                                               AS requests,
       quantilesExact(0.1, 0.5, 0.9)(goodput_bps) AS q,
       q[1]                                                                  AS goodput_bps_p10,
       q[2]                                                                  AS goodput_bps_p50,
       q[3]                                                                  AS goodput_bps_p90,
       exp(avg(log(goodput_bps)))                                            AS goodput_bps_gmean
FROM window_requests
GROUP BY speed_band, arm
ORDER BY speed_band_lo_mbps, arm
