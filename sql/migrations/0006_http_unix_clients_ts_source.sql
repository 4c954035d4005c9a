-- http_request/1 now keeps unix-socket clients (nginx logs `unix:` as $remote_addr): their
-- peer_prefix is NULL, not a made-up prefix. And a log_format without a time variable gets the
-- collector's read time, marked ts_source = 'read' (NULL: the time nginx logged).
-- The landing layer (0002, generated from the contracts) is re-created by `ccab db migrate` after
-- this runs. ALTER ... IF NOT EXISTS / MODIFY COLUMN are idempotent.
ALTER TABLE http_requests
    MODIFY COLUMN peer_prefix LowCardinality(Nullable(String));

ALTER TABLE http_requests
    ADD COLUMN IF NOT EXISTS ts_source LowCardinality(Nullable(String)) AFTER sample_rate;
