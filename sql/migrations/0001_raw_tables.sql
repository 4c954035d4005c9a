-- Raw records as they arrive from Kafka (or replay files), one table per contract schema.
--
-- Grain: one row per record. Sorting keys serve the queries that run on them:
--   the hourly cohort job reads one pop and one hour across all hosts  -> (pop, hour, ...) first;
--   per-connection analysis takes each connection's last sample        -> (..., host, sock_id, ts_ms).
-- _topic/_partition/_offset: where the row came from (Kafka, or `file:<name>`/0/<line number> for
-- `ccab load`). The loader resumes from max(_offset) per topic-partition, which is what makes a
-- crash between insert and offset commit harmless (see pipelines/ccab/loader.py).
-- TTL: raw rows live 90 days after they were *loaded* (not after their event time, so a replay
-- of old data is not deleted on arrival); the rollups in later migrations keep the history.
-- Codecs: timestamps Delta+ZSTD (~700x on 5M rows), integer counters T64+ZSTD (platform notes).
-- non_replicated_deduplication_window makes insert_deduplication_token work on a single node;
-- the cluster variant (ReplicatedMergeTree) deduplicates natively (`ccab db cluster-ddl`).

CREATE TABLE IF NOT EXISTS tcp_samples
(
    ts_ms             Int64                  CODEC(Delta, ZSTD(1)),
    ts                DateTime64(3, 'UTC')   MATERIALIZED fromUnixTimestamp64Milli(ts_ms),
    pop               LowCardinality(String),
    host              LowCardinality(String),
    kernel            LowCardinality(String),
    arm               LowCardinality(String),
    rollout_id        LowCardinality(String),
    cc                LowCardinality(String),
    cc_version        Nullable(UInt8),
    sock_id           String                 CODEC(ZSTD(1)),
    peer_prefix       LowCardinality(String),
    local_port        UInt16,
    state             LowCardinality(String),
    rtt_us            UInt32                 CODEC(T64, ZSTD(1)),
    rttvar_us         UInt32                 CODEC(T64, ZSTD(1)),
    min_rtt_us        UInt32                 CODEC(T64, ZSTD(1)),
    rto_ms            Nullable(UInt32),
    mss               UInt32                 CODEC(T64, ZSTD(1)),
    cwnd              UInt32                 CODEC(T64, ZSTD(1)),
    ssthresh          Nullable(UInt32),
    unacked           UInt32                 CODEC(T64, ZSTD(1)),
    sacked            UInt32                 CODEC(T64, ZSTD(1)),
    lost              UInt32                 CODEC(T64, ZSTD(1)),
    retrans_out       UInt32                 CODEC(T64, ZSTD(1)),
    total_retrans     UInt32                 CODEC(T64, ZSTD(1)),
    reordering        Nullable(UInt32),
    bytes_sent        UInt64                 CODEC(T64, ZSTD(1)),
    bytes_acked       UInt64                 CODEC(T64, ZSTD(1)),
    bytes_retrans     UInt64                 CODEC(T64, ZSTD(1)),
    bytes_received    Nullable(UInt64),  -- ss hides it when 0; the 6.1 vectors leave it absent
    segs_out          UInt64                 CODEC(T64, ZSTD(1)),
    segs_in           UInt64                 CODEC(T64, ZSTD(1)),
    data_segs_out     UInt64                 CODEC(T64, ZSTD(1)),
    data_segs_in      Nullable(UInt64),  -- likewise
    delivery_rate_bps UInt64                 CODEC(T64, ZSTD(1)),
    pacing_rate_bps   UInt64                 CODEC(T64, ZSTD(1)),
    delivered         UInt64                 CODEC(T64, ZSTD(1)),
    app_limited       Bool,
    busy_ms           UInt64                 CODEC(T64, ZSTD(1)),
    rwnd_limited_ms   UInt64                 CODEC(T64, ZSTD(1)),
    sndbuf_limited_ms UInt64                 CODEC(T64, ZSTD(1)),
    notsent_bytes     UInt64                 CODEC(T64, ZSTD(1)),
    send_q_bytes      UInt64                 CODEC(T64, ZSTD(1)),
    recv_q_bytes      UInt64                 CODEC(T64, ZSTD(1)),
    snd_wnd           UInt64                 CODEC(T64, ZSTD(1)),
    rcv_space         UInt64                 CODEC(T64, ZSTD(1)),
    lastsnd_ms        Nullable(UInt32),
    lastrcv_ms        Nullable(UInt32),
    lastack_ms        Nullable(UInt32),
    bbr_bw_bps        Nullable(UInt64),
    bbr_min_rtt_us    Nullable(UInt32),
    bbr_pacing_gain   Nullable(Float32),
    bbr_cwnd_gain     Nullable(Float32),
    sample_rate       Float64,
    -- derived, never on the wire (CONTRACTS.md)
    retrans_pct       Float64 ALIAS if(bytes_sent = 0, 0, bytes_retrans / bytes_sent),
    inflight_bytes    Int64   ALIAS toInt64(send_q_bytes) - toInt64(notsent_bytes),
    rwnd_limited_pct  Float64 ALIAS if(busy_ms = 0, 0, rwnd_limited_ms / busy_ms),
    -- audit
    _topic            LowCardinality(String),
    _partition        UInt32,
    _offset           UInt64                 CODEC(Delta, ZSTD(1)),
    _loaded_at        DateTime('UTC')        DEFAULT now() CODEC(Delta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (pop, toStartOfHour(ts), rollout_id, arm, host, sock_id, ts_ms)
TTL _loaded_at + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS http_requests
(
    ts_ms             Int64                  CODEC(Delta, ZSTD(1)),
    ts                DateTime64(3, 'UTC')   MATERIALIZED fromUnixTimestamp64Milli(ts_ms),
    pop               LowCardinality(String),
    host              LowCardinality(String),
    kernel            LowCardinality(String),
    arm               LowCardinality(String),
    rollout_id        LowCardinality(String),
    cc                LowCardinality(String),
    peer_prefix       LowCardinality(String),
    conn_serial       UInt64                 CODEC(T64, ZSTD(1)),
    conn_requests     UInt32                 CODEC(T64, ZSTD(1)),
    method            LowCardinality(String),
    status            UInt16,
    bytes_sent        UInt64                 CODEC(T64, ZSTD(1)),
    body_bytes_sent   UInt64                 CODEC(T64, ZSTD(1)),
    request_time_ms   Float64                CODEC(ZSTD(1)),
    tcpinfo_rtt_us    Nullable(UInt32),
    tcpinfo_rttvar_us Nullable(UInt32),
    tcpinfo_snd_cwnd  Nullable(UInt32),
    tcpinfo_rcv_space Nullable(UInt32),
    sample_rate       Float64,
    -- derived: meaningful only for bulk bodies (>= 1 MiB by default), see sql/README.md
    goodput_bps       Float64 ALIAS if(request_time_ms <= 0, NULL, body_bytes_sent * 8 / (request_time_ms / 1000)),
    _topic            LowCardinality(String),
    _partition        UInt32,
    _offset           UInt64                 CODEC(Delta, ZSTD(1)),
    _loaded_at        DateTime('UTC')        DEFAULT now() CODEC(Delta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (pop, toStartOfHour(ts), rollout_id, arm, host, ts_ms)
TTL _loaded_at + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- What the controller asked for: small, kept for the audit trail (no TTL).
CREATE TABLE IF NOT EXISTS assignments
(
    rollout_id        LowCardinality(String),
    generation        UInt64,
    pop               LowCardinality(String),
    host              LowCardinality(String),
    arm               LowCardinality(String),
    cc                LowCardinality(String),
    qdisc             Nullable(String),
    issued_at_ms      Int64,
    signature         String,
    _topic            LowCardinality(String),
    _partition        UInt32,
    _offset           UInt64,
    _loaded_at        DateTime('UTC')        DEFAULT now()
)
ENGINE = MergeTree
ORDER BY (rollout_id, host, generation)
SETTINGS non_replicated_deduplication_window = 10000;

-- What hosts actually run (apply results and heartbeats).
CREATE TABLE IF NOT EXISTS agent_status
(
    ts_ms             Int64                  CODEC(Delta, ZSTD(1)),
    ts                DateTime64(3, 'UTC')   MATERIALIZED fromUnixTimestamp64Milli(ts_ms),
    pop               LowCardinality(String),
    host              LowCardinality(String),
    kernel            LowCardinality(String),
    rollout_id        LowCardinality(String),
    arm               LowCardinality(String),
    generation        UInt64,
    state             LowCardinality(String),
    cc_effective      LowCardinality(String),
    cc_available      Array(LowCardinality(String)),
    qdisc_effective   Nullable(String),
    reason            String,
    _topic            LowCardinality(String),
    _partition        UInt32,
    _offset           UInt64                 CODEC(Delta, ZSTD(1)),
    _loaded_at        DateTime('UTC')        DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (pop, host, ts_ms)
TTL _loaded_at + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- Records the loader could not accept, with the raw payload and the reason. One row per source
-- position: a re-delivered bad record collapses onto its earlier copy (ReplacingMergeTree; read
-- with FINAL for exact counts).
CREATE TABLE IF NOT EXISTS dead_letters
(
    ts                DateTime64(3, 'UTC')   DEFAULT now64(3),
    _topic            LowCardinality(String),
    _partition        UInt32,
    _offset           UInt64,
    schema            LowCardinality(String),
    reason            String,
    raw               String                 CODEC(ZSTD(3)),
    raw_bytes         UInt64
)
ENGINE = ReplacingMergeTree
ORDER BY (_topic, _partition, _offset)
TTL ts + INTERVAL 30 DAY;
