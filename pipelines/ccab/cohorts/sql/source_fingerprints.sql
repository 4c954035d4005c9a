-- source_fingerprints: what raw rows exist per hour (the late-data check's input).
-- Grain: one row per source table x hour in [range_start, range_end).
-- rows + max(_loaded_at) change whenever rows are added to (or removed from) the hour
-- ('tcp' = tcp_samples + tcp_conns).
-- Parameters: range_start, range_end DateTime('UTC').
WITH
tcp AS (
    -- tcp samples and close records together: the connection grain depends on both
    SELECT 'tcp' AS source, hour, sum(n) AS rows, max(loaded) AS max_loaded_at
    FROM (
        SELECT toStartOfHour(ts) AS hour, count() AS n, max(_loaded_at) AS loaded
        FROM tcp_samples
        WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
        GROUP BY hour
        UNION ALL
        SELECT toStartOfHour(ts) AS hour, count() AS n, max(_loaded_at) AS loaded
        FROM tcp_conns
        WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
        GROUP BY hour
    )
    GROUP BY hour
),
http AS (
    SELECT 'http' AS source, toStartOfHour(ts) AS hour, count() AS rows, max(_loaded_at) AS max_loaded_at
    FROM http_requests
    WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}
    GROUP BY hour
)
SELECT source, toDateTime(hour, 'UTC') AS hour, rows, max_loaded_at FROM tcp
UNION ALL
SELECT source, toDateTime(hour, 'UTC') AS hour, rows, max_loaded_at FROM http
ORDER BY source, hour
