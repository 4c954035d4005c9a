-- _bulk_requests (a fragment: `-- include: _bulk_requests.sql` first in a WITH list): the hour's bulk
-- nginx requests with their weights (bulk_requests) and each host's congestion-control version
-- (versions), used by request_cells.sql, request_metrics.sql, network_request_cells.sql and
-- network_request_metrics.sql (then _request_values.sql or _network_request_values.sql).
-- Ends with a comma: the including statement's WITH list goes on after it.
bulk_requests AS (
    SELECT toStartOfHour(ts) AS hour, pop, rollout_id, arm, kernel, cc, host, peer_prefix, body_bytes_sent, request_time_ms,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight
    FROM http_requests
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
      AND body_bytes_sent >= {bulk_min_bytes:UInt64}
),
versions AS (
    SELECT hour, pop, host, cc, max(cc_version) AS cc_version
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
    GROUP BY hour, pop, host, cc
),
