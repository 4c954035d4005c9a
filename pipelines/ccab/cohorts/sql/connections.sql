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
hour_samples AS (
    SELECT pop, host, sock_id, ts_ms, rollout_id, arm, kernel, cc, cc_version, peer_prefix,
           sample_rate, bytes_sent, bytes_acked, bytes_retrans, busy_ms, rwnd_limited_ms,
           sndbuf_limited_ms, send_q_bytes, notsent_bytes, rtt_us, min_rtt_us, bbr_min_rtt_us,
           delivery_rate_bps
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
),
continuing AS (
    SELECT DISTINCT host, sock_id
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 2 HOUR
),
last_samples AS (
    SELECT pop, host, sock_id,
           max(ts_ms)                               AS last_ts_ms,
           argMax(rollout_id, ts_ms)                AS rollout_id,
           argMax(arm, ts_ms)                       AS arm,
           argMax(kernel, ts_ms)                    AS kernel,
           argMax(cc, ts_ms)                        AS cc,
           argMax(cc_version, ts_ms)                AS cc_version,
           argMax(peer_prefix, ts_ms)               AS peer_prefix,
           argMax(sample_rate, ts_ms)               AS sample_rate,
           argMax(bytes_sent, ts_ms)                AS bytes_sent,
           argMax(bytes_acked, ts_ms)               AS bytes_acked,
           argMax(bytes_retrans, ts_ms)             AS bytes_retrans,
           argMax(busy_ms, ts_ms)                   AS busy_ms,
           argMax(rwnd_limited_ms, ts_ms)           AS rwnd_limited_ms,
           argMax(sndbuf_limited_ms, ts_ms)         AS sndbuf_limited_ms,
           avgIf(toInt64(send_q_bytes) - toInt64(notsent_bytes),
                 send_q_bytes > notsent_bytes)      AS inflight_busy_mean_bytes,
           argMax(rtt_us, ts_ms)                    AS rtt_us,
           argMax(min_rtt_us, ts_ms)                AS min_rtt_us,
           argMax(bbr_min_rtt_us, ts_ms)            AS bbr_min_rtt_us,
           argMax(delivery_rate_bps, ts_ms)         AS delivery_rate_bps
    FROM hour_samples
    WHERE (host, sock_id) NOT IN (SELECT host, sock_id FROM continuing)
    GROUP BY pop, host, sock_id
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
       c.last_ts_ms                                                         AS last_ts_ms,
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
