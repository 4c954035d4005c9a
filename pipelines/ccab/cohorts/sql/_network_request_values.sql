-- _network_request_values (a fragment: `-- include: _network_request_values.sql` after
-- _bulk_requests.sql and _prefix_networks.sql): the hour's bulk requests with their goodput values
-- and their client network's three segments (access, country, ASN), used by
-- network_request_cells.sql and network_request_metrics.sql.
-- Ends with a comma: the including statement's WITH list goes on after it.
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
    LEFT JOIN prefixes AS p ON p.peer_prefix = r.peer_prefix
    LEFT JOIN versions AS v ON v.hour = r.hour AND v.pop = r.pop AND v.host = r.host AND v.cc = r.cc
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid
    FROM computed
),
