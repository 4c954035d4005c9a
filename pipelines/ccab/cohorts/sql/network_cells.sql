-- network_cells: the histograms of the per-connection metrics of one hour by the client's
-- network, as cells (-> cohort_cells_hourly_stage). Same connections, values and segments as
-- network_metrics.sql (which writes their sums and counts).
-- How: the three families (access, country, ASN) have open sets of values, so each value is
-- counted once per family: one aggregation per (cohort, metric, segment, bin) over the values
-- copied into their 3 segments; no Map, no GROUPING SETS. Only values > 0 are binned. The group
-- keys are fixed-width and fit in 16 bytes — cohort_id (8), the metric's position (1), the
-- segment's position in the window's sorted segment names (2: `segment_list`), the bin (4) — so the
-- aggregation hashes them as one 128-bit key (a 64-bit hash of the segment's name made the key 21
-- bytes, hashed as a serialized key: measured at x10 close records, ~14 % more CPU for the
-- statement); the cohort's keys are joined back once per output row (see connection_cells.sql) and
-- the segment's name is looked up by its position.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _connection_values.sql
client_prefixes AS (SELECT peer_prefix FROM connections),
-- include: _prefix_networks.sql
-- the window's segment names, sorted (the same list wherever this CTE is used): a segment's code
-- is its 1-based position, a UInt16 (top-N ASNs, countries, access types: a few hundred names)
segment_list AS (
    SELECT if(throwIf(uniqExact(segment) > 65535, 'network_cells: more than 65535 network segments in the window') = 0,
              arraySort(groupUniqArray(segment)), []) AS names
    FROM prefixes ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
),
segment_codes AS (
    SELECT cityHash64(peer_prefix) AS prefix_key,
           [toUInt16(indexOf(names, access_segment)), toUInt16(indexOf(names, country_segment)),
            toUInt16(indexOf(names, asn_segment))] AS codes
    FROM prefixes CROSS JOIN segment_list
),
cells AS (
    SELECT cohort_id, m, segment_code, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin, count() AS n
    FROM (
        SELECT v.cohort_id AS cohort_id, v.m AS m, v.value AS value, p.codes AS codes
        FROM connection_values AS v
        LEFT JOIN segment_codes AS p ON p.prefix_key = v.prefix_key  -- fixed-width key: one probe per value
        WHERE v.value IS NOT NULL AND isFinite(v.value) AND v.value > 0
    )
    ARRAY JOIN codes AS segment_code
    GROUP BY cohort_id, m, segment_code, bin
)
SELECT k.hour AS hour, k.pop AS pop, k.rollout_id AS rollout_id, k.arm AS arm, k.kernel AS kernel, k.cc AS cc,
       k.cc_version AS cc_version, k.host AS host, (SELECT names FROM segment_list)[c.segment_code] AS segment,
       metric_names[c.m + 1] AS metric, c.bin AS bin, c.n AS count
FROM cells AS c
INNER JOIN cohorts AS k ON k.cohort_id = c.cohort_id
