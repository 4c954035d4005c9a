-- Close-time connection records (tcp_conn/1): one row per sampled connection, written when the
-- kernel destroyed its socket (sock_diag destroy broadcast), with its final counters. The hourly
-- job reads per-connection metrics from here directly; tcp_samples stays the source of what only a
-- time series shows (bytes in flight while busy, RTT over a transfer) and of connections that no
-- close record covers (a collector without close capture). Every field the kernel's event does
-- not report is NULL, never 0.
CREATE TABLE IF NOT EXISTS tcp_conns
(
    ts_ms                Int64                  CODEC(Delta, ZSTD(1)),
    ts                   DateTime64(3, 'UTC')   MATERIALIZED fromUnixTimestamp64Milli(ts_ms),
    pop                  LowCardinality(String),
    host                 LowCardinality(String),
    kernel               LowCardinality(String),
    arm                  LowCardinality(String),
    rollout_id           LowCardinality(String),
    cc                   LowCardinality(String),
    cc_version           Nullable(UInt8),
    cc_source            LowCardinality(String),
    sock_id              String                 CODEC(ZSTD(1)),
    peer_prefix          LowCardinality(String),
    local_port           UInt16,
    duration_ms          Nullable(UInt64),
    seen_duration_ms     Nullable(UInt64),
    rtt_us               Nullable(UInt32),
    rttvar_us            Nullable(UInt32),
    min_rtt_us           Nullable(UInt32),
    rto_ms               Nullable(UInt32),
    mss                  Nullable(UInt32),
    cwnd                 Nullable(UInt32),
    ssthresh             Nullable(UInt32),
    unacked              Nullable(UInt32),
    sacked               Nullable(UInt32),
    lost                 Nullable(UInt32),
    retrans_out          Nullable(UInt32),
    total_retrans        Nullable(UInt32),
    reordering           Nullable(UInt32),
    bytes_sent           Nullable(UInt64),
    bytes_acked          Nullable(UInt64),
    bytes_retrans        Nullable(UInt64),
    bytes_received       Nullable(UInt64),
    segs_out             Nullable(UInt64),
    segs_in              Nullable(UInt64),
    data_segs_out        Nullable(UInt64),
    data_segs_in         Nullable(UInt64),
    delivery_rate_bps    Nullable(UInt64),
    pacing_rate_bps      Nullable(UInt64),
    delivered            Nullable(UInt64),
    delivered_ce         Nullable(UInt64),
    app_limited          Nullable(Bool),
    busy_ms              Nullable(UInt64),
    rwnd_limited_ms      Nullable(UInt64),
    sndbuf_limited_ms    Nullable(UInt64),
    notsent_bytes        Nullable(UInt64),
    snd_wnd              Nullable(UInt64),
    rcv_space            Nullable(UInt64),
    dsack_dups           Nullable(UInt32),
    reord_seen           Nullable(UInt32),
    rcv_ooopack          Nullable(UInt32),
    total_rto            Nullable(UInt32),
    total_rto_recoveries Nullable(UInt32),
    total_rto_time_ms    Nullable(UInt64),
    sample_rate          Float64,
    _topic               LowCardinality(String),
    _partition           UInt32,
    _offset              UInt64                 CODEC(Delta, ZSTD(1)),
    _loaded_at           DateTime('UTC')        DEFAULT now() CODEC(Delta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (pop, toStartOfHour(ts), rollout_id, arm, host, sock_id, ts_ms)
TTL _loaded_at + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- RTOs (kernel >= 6.7) in the samples too: null where the kernel or ss does not report them.
ALTER TABLE tcp_samples ADD COLUMN IF NOT EXISTS total_rto Nullable(UInt32) AFTER bbr_cwnd_gain;
ALTER TABLE tcp_samples ADD COLUMN IF NOT EXISTS total_rto_recoveries Nullable(UInt32) AFTER total_rto;
ALTER TABLE tcp_samples ADD COLUMN IF NOT EXISTS total_rto_time_ms Nullable(UInt64) AFTER total_rto_recoveries;

-- The per-connection grain of the hourly job: where each connection's values came from ('close'
-- record or the last 'poll' sample), its RTOs, and bytes in flight NULL (missing, not 0) when no
-- sample ever saw it with data in flight.
ALTER TABLE cohort_connections_stage ADD COLUMN IF NOT EXISTS source LowCardinality(String) DEFAULT 'poll';
ALTER TABLE cohort_connections_stage ADD COLUMN IF NOT EXISTS rto_count Nullable(UInt32);
ALTER TABLE cohort_connections_stage MODIFY COLUMN inflight_bytes Nullable(Float64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN rtt_us Nullable(UInt32);
ALTER TABLE cohort_connections_stage MODIFY COLUMN min_rtt_us Nullable(UInt32);
ALTER TABLE cohort_connections_stage MODIFY COLUMN delivery_rate_bps Nullable(UInt64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN bytes_sent Nullable(UInt64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN bytes_retrans Nullable(UInt64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN busy_ms Nullable(UInt64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN rwnd_limited_ms Nullable(UInt64);
ALTER TABLE cohort_connections_stage MODIFY COLUMN sndbuf_limited_ms Nullable(UInt64);
