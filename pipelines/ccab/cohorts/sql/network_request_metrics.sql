-- network_request_metrics: nginx goodput of one hour by the client's network (-> cohort_hourly_stage).
-- Same requests, values and columns as request_metrics.sql (bulk requests, goodput_bps); segments
-- are the client prefix's access type, country and ASN, as in network_metrics.sql.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
bulk_requests AS (
    SELECT toStartOfHour(ts) AS hour, pop, rollout_id, arm, kernel, cc, host, peer_prefix, body_bytes_sent, request_time_ms,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight
    FROM http_requests
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
      AND body_bytes_sent >= {bulk_min_bytes:UInt64}
),
classes AS (
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
        FROM (SELECT DISTINCT peer_prefix FROM bulk_requests)
    )
),
versions AS (
    SELECT hour, pop, host, cc, max(cc_version) AS cc_version
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
    GROUP BY hour, pop, host, cc
),
computed AS (
    SELECT r.hour AS hour, r.pop AS pop, r.rollout_id AS rollout_id, r.arm AS arm, r.kernel AS kernel, r.cc AS cc,
           r.host AS host, r.weight AS weight,
           v.cc_version                                                         AS cc_version,
           cityHash64(r.hour, r.pop, r.rollout_id, r.arm, r.kernel, r.cc, v.cc_version, r.host) AS cohort_id,
           if(r.request_time_ms > 0,
              r.body_bytes_sent * 8 / (r.request_time_ms / 1000), NULL)          AS value,
           toFloat64(r.body_bytes_sent * 8)                                     AS num,
           r.request_time_ms / 1000                                             AS den,
           p.access_segment AS access_segment, p.country_segment AS country_segment,
           p.asn_segment AS asn_segment
    FROM bulk_requests AS r
    LEFT JOIN classes AS p ON p.peer_prefix = r.peer_prefix
    LEFT JOIN versions AS v ON v.hour = r.hour AND v.pop = r.pop AND v.host = r.host AND v.cc = r.cc
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid
    FROM computed
),
finest AS (
    SELECT cohort_id, access_segment, country_segment, asn_segment,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm, any(kernel) AS kernel,
           any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           sumIf(assumeNotNull(value), valid)                                 AS value_total,
           sumIf(assumeNotNull(value) * assumeNotNull(value), valid)          AS value_sq_total,
           sumIf(num, valid)                                                  AS num_total,
           sumIf(den, valid)                                                  AS den_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM classified
    GROUP BY cohort_id, access_segment, country_segment, asn_segment
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host,
       segment,
       'goodput_bps'                                                          AS metric,
       sum(n_values)                                                          AS n,
       sum(n_zero_values)                                                     AS n_zero,
       sum(n_missing_values)                                                  AS n_missing,
       toUInt64(0)                                                            AS n_above_50pct,
       sum(value_total)                                                       AS value_sum,
       sum(value_sq_total)                                                    AS value_sum_sq,
       sum(num_total)                                                         AS ratio_num,
       sum(den_total)                                                         AS ratio_den,
       sum(weight_total)                                                      AS weight_sum
FROM finest
ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment
