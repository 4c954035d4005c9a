-- _prefix_networks (a fragment: `-- include: _prefix_networks.sql` inside a WITH list, after a CTE
-- client_prefixes with a peer_prefix column: the hour's connections or bulk requests): the client
-- network of each distinct prefix — one prefix_networks_dict probe per prefix — as its three
-- segments (access, country, ASN; see network_metrics.sql), used by network_metrics.sql,
-- network_cells.sql, network_request_cells.sql and network_request_metrics.sql.
-- Ends with a comma: the including statement's WITH list goes on after it.
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
        FROM (SELECT DISTINCT peer_prefix FROM client_prefixes)
    )
),