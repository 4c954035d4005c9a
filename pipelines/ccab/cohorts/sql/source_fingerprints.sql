-- source_fingerprints: what raw rows exist per hour (the late-data check's input).
-- Grain: one row per source table ('tcp_samples', 'tcp_conns', 'http_requests') x hour in
-- [range_start, range_end). rows + max(_loaded_at) change whenever rows are added to (or removed
-- from) the hour; job.fingerprint_of combines tcp samples and close records (the connection
-- grain depends on both), and the job skips the per-sample or per-request steps of hours
-- without samples or requests.
-- Parameters: range_start, range_end DateTime('UTC').
SELECT 'tcp_samples' AS source, toDateTime(toStartOfHour(ts), 'UTC') AS hour, count() AS rows,
       max(_loaded_at) AS max_loaded_at
FROM tcp_samples
WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
GROUP BY hour
UNION ALL
SELECT 'tcp_conns' AS source, toDateTime(toStartOfHour(ts), 'UTC') AS hour, count() AS rows,
       max(_loaded_at) AS max_loaded_at
FROM tcp_conns
WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
GROUP BY hour
UNION ALL
SELECT 'http_requests' AS source, toDateTime(toStartOfHour(ts), 'UTC') AS hour, count() AS rows,
       max(_loaded_at) AS max_loaded_at
FROM http_requests
WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
GROUP BY hour
