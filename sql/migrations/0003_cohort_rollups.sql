-- Cohort rollups: the per-host, per-hour sufficient statistics that analysts' views and the
-- statistical judge read (docs/cohorts/README.md). Written only by the hourly cohort job
-- (pipelines/ccab/cohorts/job.py: Airflow DAG `ccab_cohorts_hourly`, or `ccab analyze`).
--
-- Cohort = pop x rollout_id x arm x kernel x cc x cc_version x host x hour; coarser cohorts
-- (per arm, per day, per PoP) are sums over these rows: every column below merges exactly.
-- `segment` slices a cohort by a pre-treatment attribute ('all', 'bulk', 'rtt:20-50ms',
-- 'size:4-16MiB', ...): segments of one family partition the cohort, and 'all' is the whole
-- cohort, so NEVER sum over segments — always filter `segment = ...`.
--
-- Idempotent hourly rewrite: each table is PARTITIONED BY its hour. The job computes an hour into
-- the `*_stage` twin (same structure) and swaps it in with
-- `ALTER TABLE t REPLACE PARTITION ID '<hour>' FROM t_stage` (never delete + reinsert: the insert
-- dedup checksum survives a DELETE and the reinsert can silently insert nothing). Re-running an
-- hour replaces it; it can neither double nor drop rows. Hourly partitions: ~8.8k per year, each
-- one small part; merges never cross hours, which is what makes the swap exact.
--
-- Reading: columns are SimpleAggregateFunction, so rows with the same key may not have merged
-- yet — always aggregate (sum(n), sumMap(hist), ...), never read a row as if it were final.
-- No TTL: the rollups keep the history after the raw rows expire (90 days).

-- One row per hour x cohort x segment x metric (metric list and grains: docs/cohorts/README.md).
--   hist:        fixed log2 bins, 128 per octave: bin = floor(log2(value) * 128), bin b covers
--                [2^(b/128), 2^((b+1)/128)) — 0.54% wide; only values > 0 are binned.
--   n:           values counted (finite, >= 0), zeros included;  n_zero: how many were 0
--   n_missing:   rows without a value (NULL, negative, non-finite: e.g. retrans_pct of a
--                connection that sent nothing, bbr_min_rtt_us of a Cubic socket)
--   n_above_50pct: values > 50 (percent metrics: the "share of connections above 50% retransmits")
--   value_sum, value_sum_sq: moments of the value (for means and variances)
--   ratio_num, ratio_den: sums of the ratio's parts in raw units (retrans_pct: bytes_retrans,
--                bytes_sent; rwnd/sndbuf_limited_pct: *_limited_ms, busy_ms; goodput_bps: body
--                bits, request seconds); 0 for metrics that are not ratios
--   weight_sum:  sum of 1/sample_rate (the sampled rows' estimate of the population count)
CREATE TABLE IF NOT EXISTS cohort_hourly
(
    hour          DateTime('UTC'),
    pop           LowCardinality(String),
    rollout_id    LowCardinality(String),
    arm           LowCardinality(String),
    kernel        LowCardinality(String),
    cc            LowCardinality(String),
    cc_version    UInt8,                      -- 0 = not told (null on the wire, e.g. cubic)
    host          LowCardinality(String),
    segment       LowCardinality(String),
    metric        LowCardinality(String),
    n             SimpleAggregateFunction(sum, UInt64),
    n_zero        SimpleAggregateFunction(sum, UInt64),
    n_missing     SimpleAggregateFunction(sum, UInt64),
    n_above_50pct SimpleAggregateFunction(sum, UInt64),
    value_sum     SimpleAggregateFunction(sum, Float64),
    value_sum_sq  SimpleAggregateFunction(sum, Float64),
    ratio_num     SimpleAggregateFunction(sum, Float64),
    ratio_den     SimpleAggregateFunction(sum, Float64),
    weight_sum    SimpleAggregateFunction(sum, Float64),
    hist          SimpleAggregateFunction(sumMap, Map(Int32, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY hour
ORDER BY (pop, rollout_id, metric, segment, arm, kernel, cc, cc_version, host, hour);

CREATE TABLE IF NOT EXISTS cohort_hourly_stage AS cohort_hourly;

-- Joint distributions for heatmaps: one row per hour x cohort x segment x pair x (x_bin, y_bin),
-- counting connections (per-connection grain). Coarse log2 bins, 8 per octave:
-- bin = floor(log2(value) * 8) (= the fine bin of cohort_hourly divided by 16, floored), bin b
-- covers [2^(b/8), 2^((b+1)/8)) — 9% wide; value 0 has the sentinel bin -2147483648.
-- Pairs: 'rtt_us:retrans_pct', 'rtt_us:inflight_bytes' (x:y); segments 'all' and 'bulk'.
CREATE TABLE IF NOT EXISTS cohort_heatmap_hourly
(
    hour          DateTime('UTC'),
    pop           LowCardinality(String),
    rollout_id    LowCardinality(String),
    arm           LowCardinality(String),
    kernel        LowCardinality(String),
    cc            LowCardinality(String),
    cc_version    UInt8,
    host          LowCardinality(String),
    segment       LowCardinality(String),
    pair          LowCardinality(String),
    x_bin         Int32,
    y_bin         Int32,
    connections   UInt64
)
ENGINE = SummingMergeTree(connections)
PARTITION BY hour
ORDER BY (pop, rollout_id, pair, segment, arm, kernel, cc, cc_version, host, hour, x_bin, y_bin);

CREATE TABLE IF NOT EXISTS cohort_heatmap_hourly_stage AS cohort_heatmap_hourly;

-- Client prefixes' RTT class per hour: the pre-treatment segment key of the hour's rows.
-- One row per hour x pop x peer_prefix. The class comes from the median of `min_rtt_us` over
-- all of the prefix's tcp samples in that hour, pooled over every arm (min RTT is a property of
-- the path, not of the sender's algorithm; pooling keeps the class the same for both arms).
-- Prefixes with no tcp sample in the hour are 'rtt:unknown' in the other tables.
CREATE TABLE IF NOT EXISTS cohort_prefix_hourly
(
    hour                  DateTime('UTC'),
    pop                   LowCardinality(String),
    peer_prefix           String,
    samples               UInt64,
    min_rtt_us_median     UInt32,             -- lower median (quantileExactLow(0.5))
    rtt_class             LowCardinality(String)
)
ENGINE = MergeTree
PARTITION BY hour
ORDER BY (pop, hour, peer_prefix);

CREATE TABLE IF NOT EXISTS cohort_prefix_hourly_stage AS cohort_prefix_hourly;

-- Scratch: one row per connection whose last sample falls in the hour being computed (the
-- per-connection grain, built once and read by the metric and heatmap queries). The job drops
-- its partition when the hour is done.
CREATE TABLE IF NOT EXISTS cohort_connections_stage
(
    hour                DateTime('UTC'),
    pop                 LowCardinality(String),
    rollout_id          LowCardinality(String),
    arm                 LowCardinality(String),
    kernel              LowCardinality(String),
    cc                  LowCardinality(String),
    cc_version          UInt8,
    host                LowCardinality(String),
    sock_id             String,
    peer_prefix         String,
    rtt_class           LowCardinality(String),
    is_bulk             Bool,
    weight              Float64,
    last_ts_ms          Int64,
    bytes_sent          UInt64,
    bytes_retrans       UInt64,
    busy_ms             UInt64,
    rwnd_limited_ms     UInt64,
    sndbuf_limited_ms   UInt64,
    retrans_pct         Nullable(Float64),
    inflight_bytes      Float64,              -- mean over the samples with data in flight
    rtt_us              UInt32,
    min_rtt_us          UInt32,
    bbr_min_rtt_us      Nullable(UInt32),
    delivery_rate_bps   UInt64,
    rwnd_limited_pct    Nullable(Float64),
    sndbuf_limited_pct  Nullable(Float64)
)
ENGINE = MergeTree
PARTITION BY hour
ORDER BY (pop, rollout_id, arm, host, sock_id);

-- What each hour was computed from (the late-data watermark). One row per computation; read the
-- newest per hour (FINAL or argMax by computed_seq). An hour is recomputed when the raw rows it
-- depends on no longer match this fingerprint: tcp_samples in [hour, hour + 2 h) (a connection
-- belongs to the hour of its last sample, so the next hour's samples move connections out) and
-- http_requests in [hour, hour + 1 h); or when the job's SQL or the bulk filter changed.
CREATE TABLE IF NOT EXISTS cohort_watermarks
(
    hour                DateTime('UTC'),
    computed_seq        UInt64,               -- unix ns of the computation (version)
    tcp_rows            UInt64,
    tcp_max_loaded_at   DateTime('UTC'),
    http_rows           UInt64,
    http_max_loaded_at  DateTime('UTC'),
    bulk_min_bytes      UInt64,
    code_version        String,               -- hash of the job's SQL files
    rollup_rows         UInt64,
    heatmap_rows        UInt64,
    connections         UInt64
)
ENGINE = ReplacingMergeTree(computed_seq)
ORDER BY hour;

-- Per-arm summaries of a window, read from the rollups (written by `ccab_compare` and
-- `ccab analyze` until the statistical judge exists; then alongside it). One row per
-- window x pop x rollout_id x arm x metric x segment; a re-run of the same window replaces it.
-- Quantiles are read from the merged histograms (geometric bin midpoints; zeros included).
CREATE TABLE IF NOT EXISTS cohort_arm_summaries
(
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    pop                 LowCardinality(String),
    rollout_id          LowCardinality(String),
    arm                 LowCardinality(String),
    cc                  LowCardinality(String),
    metric              LowCardinality(String),
    segment             LowCardinality(String),
    hosts               UInt32,
    n                   UInt64,
    n_zero              UInt64,
    mean                Float64,
    ratio               Nullable(Float64),
    share_above_50pct   Float64,
    p10                 Float64,
    p50                 Float64,
    p90                 Float64,
    p99                 Float64,
    p50_nonzero         Float64,              -- median of the values > 0
    computed_seq        UInt64
)
ENGINE = ReplacingMergeTree(computed_seq)
ORDER BY (rollout_id, pop, window_start, window_end, metric, segment, arm);
