-- _network_request_values (a fragment: `-- include: _network_request_values.sql` after WITH): the
-- hour's bulk requests with their weights and goodput values, and the client network of each
-- distinct prefix as its three segments (access, country, ASN), used by network_request_cells.sql
-- and network_request_metrics.sql.
-- Ends with a comma: the including statement's WITH list goes on after it.
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
