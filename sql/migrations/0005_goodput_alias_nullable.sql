-- http_requests.goodput_bps is NULL when nginx logged a request time of 0 (a body served from
-- the socket buffer within a millisecond): 0001 declared the alias Float64, so reading it for such
-- a row failed with "Cannot convert NULL value to non-Nullable type". Same expression, Nullable.
-- (ALTER ... MODIFY COLUMN is idempotent. On a cluster `ccab db cluster-ddl` applies it to both the
-- _local and the Distributed table.)
ALTER TABLE http_requests
    MODIFY COLUMN goodput_bps Nullable(Float64)
        ALIAS if(request_time_ms <= 0, NULL, body_bytes_sent * 8 / (request_time_ms / 1000));
