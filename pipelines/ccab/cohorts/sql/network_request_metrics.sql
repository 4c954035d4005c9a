-- network_request_metrics: nginx goodput of one hour by the client's network (-> cohort_hourly_stage).
-- Same requests, values and columns as request_metrics.sql (bulk requests, goodput_bps); segments
-- are the client prefix's access type, country and ASN, as in network_metrics.sql.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
-- include: _bulk_requests.sql
client_prefixes AS (SELECT peer_prefix FROM bulk_requests),
-- include: _prefix_networks.sql
-- include: _network_request_values.sql
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
