-- network_cells: the histograms of the per-connection metrics of one hour by the client's
-- network, as cells (-> cohort_cells_hourly_stage). Same connections, values and segments as
-- network_metrics.sql (which writes their sums and counts).
-- How: the three families (access, country, ASN) have open sets of values, so each value is
-- counted once per family: one aggregation per (cohort, metric, segment, bin) over the values
-- copied into their 3 segments; no Map, no GROUPING SETS. Only values > 0 are binned. The group
-- keys are fixed-width — cohort_id, the metric's position, a 64-bit hash of the segment's name
-- (a collision among an hour's few hundred segment names: ~1e-15), the bin — and the cohort's keys
-- and the segment's name are joined back once per output row (see connection_cells.sql).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _connection_values.sql
client_prefixes AS (SELECT peer_prefix FROM connections),
-- include: _prefix_networks.sql
segment_codes AS (
    SELECT cityHash64(peer_prefix) AS prefix_key, cityHash64(access_segment) AS access_code, cityHash64(country_segment) AS country_code,
           cityHash64(asn_segment) AS asn_code
    FROM prefixes
),
segment_names AS (
    SELECT DISTINCT cityHash64(segment) AS code, segment
    FROM prefixes ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
),
cells AS (
    SELECT cohort_id, m, segment_code, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin, count() AS n
    FROM (
        SELECT v.cohort_id AS cohort_id, v.m AS m, v.value AS value,
               [p.access_code, p.country_code, p.asn_code] AS codes
        FROM connection_values AS v
        LEFT JOIN segment_codes AS p ON p.prefix_key = v.prefix_key  -- fixed-width key: one probe per value
        WHERE v.value IS NOT NULL AND isFinite(v.value) AND v.value > 0
    )
    ARRAY JOIN codes AS segment_code
    GROUP BY cohort_id, m, segment_code, bin
)
SELECT k.hour AS hour, k.pop AS pop, k.rollout_id AS rollout_id, k.arm AS arm, k.kernel AS kernel, k.cc AS cc,
       k.cc_version AS cc_version, k.host AS host, g.segment AS segment,
       metric_names[c.m + 1] AS metric, c.bin AS bin, c.n AS count
FROM cells AS c
INNER JOIN cohorts AS k ON k.cohort_id = c.cohort_id
INNER JOIN segment_names AS g ON g.code = c.segment_code
