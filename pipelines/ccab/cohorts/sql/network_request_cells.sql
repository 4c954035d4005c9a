-- network_request_cells: the goodput histograms of one hour by the client's network, as cells
-- (-> cohort_cells_hourly_stage). Same requests, values and segments as
-- network_request_metrics.sql (which writes their sums and counts).
-- How: the three families (access, country, ASN) have open sets of values, so each value is
-- counted once per family (one aggregation per (cohort, segment, bin) over the values
-- copied into their 3 segments; no Map, no GROUPING SETS). Only values > 0 are binned.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
-- include: _bulk_requests.sql
client_prefixes AS (SELECT peer_prefix FROM bulk_requests),
-- include: _prefix_networks.sql
-- include: _network_request_values.sql
cells AS (
    SELECT cohort_id, segment, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           count() AS n
    FROM classified
    ARRAY JOIN [access_segment, country_segment, asn_segment] AS segment
    WHERE valid AND value > 0
    GROUP BY cohort_id, segment, bin
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, 'goodput_bps' AS metric, bin, n AS count
FROM cells
