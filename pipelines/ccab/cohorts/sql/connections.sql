-- connections: the per-connection grain of each hour of [hour_start, hour_end) (-> cohort_connections_stage).
-- Grain: one row per hour x connection (pop x host x sock_id) that ended in the hour, counted once
-- however long it lived (a snapshot-weighted PDF would over-count long flows; see the
-- *_per_sample metrics for that view). Two sources, never both for one connection:
--  * 'close': its tcp_conn/1 record (the kernel's final counters when the socket was destroyed)
--    has ts in the hour. Complete and unbiased: short connections that no poll ever saw count too.
--  * 'poll': no close record covers it (a collector without close capture): its last tcp_sample
--    falls in the hour and it is not sampled in the next hour (then it belongs to a later hour),
--    and no close record of it arrives in this or the next hour (then that record wins).
-- Bytes in flight is a gauge that is 0 once a transfer is done, so a connection's inflight_bytes
-- is the mean over its samples in the hour that had data in flight, and NULL (missing, not 0)
-- when no sample saw it busy — a connection never polled while busy has no in-flight value.
-- Several hours run as one statement (every CTE is per hour: grouped or joined on `hour`), so a
-- window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
hour_samples_light AS (
    SELECT toStartOfHour(ts)                                                    AS hour,
           cityHash64(host, sock_id)                                            AS conn_key,
           ts_ms,
           toInt64(send_q_bytes) - toInt64(notsent_bytes)                       AS inflight_bytes,
           bbr_min_rtt_us
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
),
closes AS (
    SELECT toStartOfHour(ts) AS hour, cityHash64(host, sock_id)                 AS conn_key, *
    FROM tcp_conns
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
    LIMIT 1 BY hour, conn_key  -- a re-delivered close record cannot count twice
),
closed_keys AS (
    -- (hour, connection) pairs a close record covers: its close in this hour or the next (a
    -- connection whose last sample is in this hour may close a moment after the hour turned)
    SELECT arrayJoin([toStartOfHour(ts), toStartOfHour(ts) - INTERVAL 1 HOUR]) AS hour,
           cityHash64(host, sock_id)                                            AS conn_key
    FROM tcp_conns
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')} + INTERVAL 1 HOUR
),
next_hour AS (
    -- (hour, connection) pairs still sampled in the hour after
    SELECT toStartOfHour(ts) - INTERVAL 1 HOUR                                  AS hour,
           cityHash64(host, sock_id)                                            AS conn_key
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
      AND ts < {hour_end:DateTime('UTC')} + INTERVAL 1 HOUR
),
sampled AS (
    -- per polled connection of the hour: its last sample and its in-flight bytes while busy
    SELECT hour, conn_key,
           max(ts_ms)                                                           AS last_ts_ms,
           avgIf(inflight_bytes, inflight_bytes > 0)                            AS inflight_busy_mean_bytes,
           argMax(bbr_min_rtt_us, ts_ms)                                        AS last_bbr_min_rtt_us
    FROM hour_samples_light
    GROUP BY hour, conn_key
),
poll_ends AS (
    SELECT hour, conn_key, last_ts_ms, inflight_busy_mean_bytes
    FROM sampled
    WHERE (hour, conn_key) NOT IN (SELECT hour, conn_key FROM next_hour)
      AND (hour, conn_key) NOT IN (SELECT hour, conn_key FROM closed_keys)
),
hour_samples AS (
    SELECT toStartOfHour(ts) AS hour, cityHash64(host, sock_id) AS conn_key, ts_ms, pop, host, sock_id, rollout_id, arm, kernel,
           cc, cc_version, peer_prefix, sample_rate, bytes_sent, bytes_acked, bytes_retrans, busy_ms,
           rwnd_limited_ms, sndbuf_limited_ms, rtt_us, min_rtt_us, bbr_min_rtt_us, delivery_rate_bps,
           total_rto
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
),
ends AS (
    SELECT 'poll' AS source, s.hour AS hour, s.ts_ms AS ts_ms, s.pop AS pop, s.host AS host, s.sock_id AS sock_id,
           s.rollout_id AS rollout_id, s.arm AS arm, s.kernel AS kernel, s.cc AS cc,
           s.cc_version AS cc_version, s.peer_prefix AS peer_prefix, s.sample_rate AS sample_rate,
           CAST(s.bytes_sent AS Nullable(UInt64)) AS bytes_sent,
           CAST(s.bytes_acked AS Nullable(UInt64)) AS bytes_acked,
           CAST(s.bytes_retrans AS Nullable(UInt64)) AS bytes_retrans,
           CAST(s.busy_ms AS Nullable(UInt64)) AS busy_ms,
           CAST(s.rwnd_limited_ms AS Nullable(UInt64)) AS rwnd_limited_ms,
           CAST(s.sndbuf_limited_ms AS Nullable(UInt64)) AS sndbuf_limited_ms,
           CAST(s.rtt_us AS Nullable(UInt32)) AS rtt_us, CAST(s.min_rtt_us AS Nullable(UInt32)) AS min_rtt_us,
           s.bbr_min_rtt_us AS bbr_min_rtt_us,
           CAST(s.delivery_rate_bps AS Nullable(UInt64)) AS delivery_rate_bps,
           s.total_rto AS rto_count,
           e.inflight_busy_mean_bytes AS inflight_busy_mean_bytes
    FROM hour_samples AS s
    INNER JOIN poll_ends AS e ON s.hour = e.hour AND s.conn_key = e.conn_key AND s.ts_ms = e.last_ts_ms
    LIMIT 1 BY s.hour, s.conn_key  -- a duplicated sample cannot count twice
    UNION ALL
    SELECT 'close' AS source, c.hour, c.ts_ms, c.pop, c.host, c.sock_id, c.rollout_id, c.arm, c.kernel, c.cc,
           c.cc_version, c.peer_prefix, c.sample_rate, c.bytes_sent, c.bytes_acked, c.bytes_retrans,
           c.busy_ms, c.rwnd_limited_ms, c.sndbuf_limited_ms, c.rtt_us, c.min_rtt_us,
           -- a destroy event carries no BBR info: BBR's min RTT from the poller, when it saw the socket
           if(b.conn_key = 0, NULL, b.last_bbr_min_rtt_us) AS bbr_min_rtt_us,
           c.delivery_rate_bps, c.total_rto AS rto_count,
           if(b.conn_key = 0, nan, b.inflight_busy_mean_bytes) AS inflight_busy_mean_bytes
    FROM closes AS c
    LEFT JOIN sampled AS b ON b.hour = c.hour AND b.conn_key = c.conn_key  -- unmatched: conn_key 0 (join_use_nulls=0)
),
classes AS (
    SELECT hour, pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
)
SELECT c.hour                                                               AS hour,
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
       ifNull(c.bytes_acked, 0) >= {bulk_min_bytes:UInt64}                  AS is_bulk,
       if(c.sample_rate > 0, 1 / c.sample_rate, 0)                          AS weight,
       c.ts_ms                                                              AS last_ts_ms,
       c.source                                                             AS source,
       c.bytes_sent                                                         AS bytes_sent,
       c.bytes_retrans                                                      AS bytes_retrans,
       c.busy_ms                                                            AS busy_ms,
       c.rwnd_limited_ms                                                    AS rwnd_limited_ms,
       c.sndbuf_limited_ms                                                  AS sndbuf_limited_ms,
       if(c.bytes_sent > 0, 100 * c.bytes_retrans / c.bytes_sent, NULL)     AS retrans_pct,
       if(isFinite(c.inflight_busy_mean_bytes), c.inflight_busy_mean_bytes, NULL) AS inflight_bytes,
       c.rtt_us                                                             AS rtt_us,
       c.min_rtt_us                                                         AS min_rtt_us,
       c.bbr_min_rtt_us                                                     AS bbr_min_rtt_us,
       c.delivery_rate_bps                                                  AS delivery_rate_bps,
       if(c.busy_ms > 0, 100 * c.rwnd_limited_ms / c.busy_ms, NULL)         AS rwnd_limited_pct,
       if(c.busy_ms > 0, 100 * c.sndbuf_limited_ms / c.busy_ms, NULL)       AS sndbuf_limited_pct,
       c.rto_count                                                          AS rto_count
FROM ends AS c
LEFT JOIN classes AS p ON p.hour = c.hour AND p.pop = c.pop AND p.peer_prefix = c.peer_prefix
