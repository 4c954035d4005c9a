-- network_cells: the histograms of the per-connection metrics of one hour by the client's
-- network, as cells (-> cohort_cells_hourly_stage). Same connections, values and segments as
-- network_metrics.sql (which writes their sums and counts).
-- How: the three families (access, country, ASN) have open sets of values, so each value is
-- counted once per family (one aggregation per (cohort, metric, segment, bin) over the values
-- copied into their 3 segments; no Map, no GROUPING SETS). Only values > 0 are binned.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
connections AS (
    SELECT *,
           cityHash64(hour, pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           if(rtt_us >= min_rtt_us, toFloat64(rtt_us) - toFloat64(min_rtt_us), NULL) AS queue_delay_us
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
prefixes AS (
    SELECT peer_prefix, s.1 AS access_segment, s.2 AS country_segment, s.3 AS asn_segment
    FROM (
        SELECT peer_prefix, toIPv6OrDefault(splitByChar('/', peer_prefix)[1]) AS k,
               tuple(concat('access:', dictGetOrDefault('prefix_networks_dict', 'access', k, 'unknown')),
                 concat('country:', if(dictGetOrDefault('prefix_networks_dict', 'country', k, '') = '', 'unknown',
                                       dictGetOrDefault('prefix_networks_dict', 'country', k, ''))),
                 multiIf(dictGetOrDefault('prefix_networks_dict', 'asn', k, toUInt32(0)) = 0, 'asn:unknown',
                         dictGetOrDefault('prefix_networks_dict', 'asn', k, toUInt32(0)) IN (SELECT asn FROM network_asn_rank),
                         concat('asn:', toString(dictGetOrDefault('prefix_networks_dict', 'asn', k, toUInt32(0)))),
                         'asn:other')) AS s
        FROM (SELECT DISTINCT peer_prefix FROM connections)
    )
),
metric_values AS (
    SELECT cohort_id, hour, pop, rollout_id, arm, kernel, cc, cc_version, host, weight,
           p.access_segment AS access_segment, p.country_segment AS country_segment,
           p.asn_segment AS asn_segment,
           m.1 AS metric, m.2 AS value, m.3 AS num, m.4 AS den
    FROM connections AS c
    LEFT JOIN prefixes AS p ON p.peer_prefix = c.peer_prefix
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
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid
    FROM metric_values
),
cells AS (
    SELECT cohort_id, metric, segment, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           count() AS n
    FROM classified
    ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
    WHERE valid AND value > 0
    GROUP BY cohort_id, metric, segment, bin
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin, n AS count
FROM cells
