-- network_metrics: per-connection metrics of one hour by the client's network (-> cohort_hourly_stage).
-- Same grain, metrics and columns as connection_metrics.sql; segments are the client prefix's
-- access type ('access:mobile|fixed|satellite|hosting|unknown'), country ('country:JP', ...,
-- 'country:unknown') and ASN ('asn:<n>' for the ASNs in network_asn_rank, 'asn:other' for the
-- rest, 'asn:unknown'), looked up on peer_prefix in the prefix_networks_dict IP-trie dictionary
-- (sql/migrations/0012_prefix_networks.sql; longest network containing the prefix's first
-- address). Each family partitions the cohort ('unknown' included: never dropped). The
-- lookup is one dictionary probe per distinct prefix of the hour, joined back to the connections.
-- Pre-treatment: a prefix's network does not depend on the arm. A rollup keeps the metadata of
-- the time it was computed; reloading the networks changes later hours (and recomputed ones).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _connection_values.sql
client_prefixes AS (SELECT peer_prefix FROM connections),
-- include: _prefix_networks.sql
segment_codes AS (
    SELECT cityHash64(peer_prefix) AS prefix_key, access_segment, country_segment, asn_segment FROM prefixes
),
finest AS (
    -- the finest split (cohort x metric x the three segments), then each row added to its 3 segments
    SELECT cohort_id, m, p.access_segment AS access_segment, p.country_segment AS country_segment,
           p.asn_segment AS asn_segment,
           countIf(valid)                                                     AS n_values,
           countIf(valid AND value = 0)                                       AS n_zero_values,
           countIf(NOT valid)                                                 AS n_missing_values,
           countIf(valid AND value > 50)                                      AS n_above_values,
           sumIf(assumeNotNull(value), valid)                                 AS value_total,
           sumIf(assumeNotNull(value) * assumeNotNull(value), valid)          AS value_sq_total,
           sumIf(num, valid)                                                  AS num_total,
           sumIf(den, valid)                                                  AS den_total,
           sumIf(weight, valid)                                               AS weight_total
    FROM (SELECT *, value IS NOT NULL AND isFinite(value) AND value >= 0 AS valid FROM connection_values) AS v
    LEFT JOIN segment_codes AS p ON p.prefix_key = v.prefix_key
    GROUP BY cohort_id, m, access_segment, country_segment, asn_segment
),
segments AS (
    SELECT cohort_id, m, segment,
           sum(n_values) AS n, sum(n_zero_values) AS n_zero, sum(n_missing_values) AS n_missing,
           sum(n_above_values) AS n_above, sum(value_total) AS value_sum, sum(value_sq_total) AS value_sum_sq,
           sum(num_total) AS ratio_num, sum(den_total) AS ratio_den, sum(weight_total) AS weight_sum
    FROM finest
    ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
    GROUP BY cohort_id, m, segment
)
SELECT k.hour AS hour, k.pop AS pop, k.rollout_id AS rollout_id, k.arm AS arm, k.kernel AS kernel, k.cc AS cc,
       k.cc_version AS cc_version, k.host AS host, s.segment AS segment, metric_names[s.m + 1] AS metric,
       s.n AS n, s.n_zero AS n_zero, s.n_missing AS n_missing,
       -- values above 50: counted for the percentages only
       if(endsWith(metric, '_pct'), s.n_above, 0)                             AS n_above_50pct,
       s.value_sum AS value_sum, s.value_sum_sq AS value_sum_sq, s.ratio_num AS ratio_num,
       s.ratio_den AS ratio_den, s.weight_sum AS weight_sum
FROM segments AS s
INNER JOIN cohorts AS k ON k.cohort_id = s.cohort_id
