-- connections: the per-connection grain of one hour (-> cohort_connections_stage).
-- Grain: one row per connection (pop x host x sock_id) whose LAST sample falls in the hour; its
-- values are that last sample's (counters are cumulative, so the last sample carries the whole
-- connection's history). A connection still sampled in the next hour is left out: it belongs to
-- a later hour. Connections are counted once however long they live, so long flows are not
-- over-counted (a snapshot-weighted PDF would be; see the *_per_sample metrics for that view).
-- One exception to "the last sample": bytes in flight is a gauge that is 0 once a transfer is
-- done — and most last samples come after it — so a connection's inflight_bytes is the mean over
-- its samples in the hour that had data in flight (0 if none had).
-- Parameters: hour_start DateTime('UTC'), bulk_min_bytes UInt64.
WITH
hour_samples_light AS (
    SELECT cityHash64(host, sock_id)                                            AS conn_key,
           ts_ms,
           toInt64(send_q_bytes) - toInt64(notsent_bytes)                       AS inflight_bytes
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
),
next_hour AS (
    SELECT cityHash64(host, sock_id)                                            AS conn_key
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 2 HOUR
),
connection_ends AS (
    -- per connection: its last sample in the hour and its in-flight bytes while busy, for the
    -- connections not sampled again in the next hour (those belong to a later hour). Keyed by a
    -- 64-bit hash of (host, sock_id): grouping and set lookups on it are ~4x faster than on
    -- the strings (a collision between two of an hour's connections: probability ~1e-8).
    SELECT conn_key,
           max(ts_ms)                                                           AS last_ts_ms,
           avgIf(inflight_bytes, inflight_bytes > 0)                            AS inflight_busy_mean_bytes
    FROM hour_samples_light
    GROUP BY conn_key
    HAVING conn_key NOT IN (SELECT conn_key FROM next_hour)
),
hour_samples AS (
    SELECT cityHash64(host, sock_id) AS conn_key, ts_ms, pop, host, sock_id, rollout_id, arm, kernel,
           cc, cc_version, peer_prefix, sample_rate, bytes_sent, bytes_acked, bytes_retrans, busy_ms,
           rwnd_limited_ms, sndbuf_limited_ms, rtt_us, min_rtt_us, bbr_min_rtt_us, delivery_rate_bps
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
),
last_samples AS (
    -- the last sample's row itself (LIMIT 1 BY: a duplicated sample cannot count twice)
    SELECT s.conn_key AS conn_key, s.ts_ms AS ts_ms, s.pop AS pop, s.host AS host, s.sock_id AS sock_id,
           s.rollout_id AS rollout_id, s.arm AS arm, s.kernel AS kernel, s.cc AS cc,
           s.cc_version AS cc_version, s.peer_prefix AS peer_prefix, s.sample_rate AS sample_rate,
           s.bytes_sent AS bytes_sent, s.bytes_acked AS bytes_acked, s.bytes_retrans AS bytes_retrans,
           s.busy_ms AS busy_ms, s.rwnd_limited_ms AS rwnd_limited_ms,
           s.sndbuf_limited_ms AS sndbuf_limited_ms, s.rtt_us AS rtt_us, s.min_rtt_us AS min_rtt_us,
           s.bbr_min_rtt_us AS bbr_min_rtt_us, s.delivery_rate_bps AS delivery_rate_bps,
           e.inflight_busy_mean_bytes AS inflight_busy_mean_bytes
    FROM hour_samples AS s
    INNER JOIN connection_ends AS e ON s.conn_key = e.conn_key AND s.ts_ms = e.last_ts_ms
    LIMIT 1 BY conn_key
),
classes AS (
    SELECT pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour = {hour_start:DateTime('UTC')}
)
SELECT {hour_start:DateTime('UTC')}                                         AS hour,
       c.pop                                                                AS pop,
       c.rollout_id                                                         AS rollout_id,
       c.arm                                                                AS arm,
       c.kernel                                                             AS kernel,
       c.cc                                                                 AS cc,
       ifNull(c.cc_version, 0)                                              AS cc_version,
       c.host                                                               AS host,
       c.sock_id                                                            AS sock_id,
       c.peer_prefix                                                        AS peer_prefix,
       if(p.rtt_class = '', 'rtt:unknown', p.rtt_class)                     AS rtt_class,
       c.bytes_acked >= {bulk_min_bytes:UInt64}                             AS is_bulk,
       if(c.sample_rate > 0, 1 / c.sample_rate, 0)                          AS weight,
       c.ts_ms                                                              AS last_ts_ms,
       c.bytes_sent                                                         AS bytes_sent,
       c.bytes_retrans                                                      AS bytes_retrans,
       c.busy_ms                                                            AS busy_ms,
       c.rwnd_limited_ms                                                    AS rwnd_limited_ms,
       c.sndbuf_limited_ms                                                  AS sndbuf_limited_ms,
       if(c.bytes_sent > 0, 100 * c.bytes_retrans / c.bytes_sent, NULL)     AS retrans_pct,
       if(isFinite(c.inflight_busy_mean_bytes), c.inflight_busy_mean_bytes, 0) AS inflight_bytes,
       c.rtt_us                                                             AS rtt_us,
       c.min_rtt_us                                                         AS min_rtt_us,
       c.bbr_min_rtt_us                                                     AS bbr_min_rtt_us,
       c.delivery_rate_bps                                                  AS delivery_rate_bps,
       if(c.busy_ms > 0, 100 * c.rwnd_limited_ms / c.busy_ms, NULL)         AS rwnd_limited_pct,
       if(c.busy_ms > 0, 100 * c.sndbuf_limited_ms / c.busy_ms, NULL)       AS sndbuf_limited_pct
FROM last_samples AS c
LEFT JOIN classes AS p ON p.pop = c.pop AND p.peer_prefix = c.peer_prefix
