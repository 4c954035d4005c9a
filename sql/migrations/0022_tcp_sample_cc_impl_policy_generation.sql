-- tcp_sample/1 gains the two optional fields tcp_conn/1 has (0020, 0021), so a connection's
-- samples say what ran while it ran, not only at its close:
--   cc_impl: "ccab-bpf" for ccab's BPF algorithms (bbr2, bbr3, vivace: rollout/bpfcc), "kernel"
--     otherwise; NULL from collectors that do not tell;
--   policy_generation: the generation of the assignment/2 socket policy that set the connection's
--     congestion control (rollout/sockpolicy); NULL when no policy decided it.
-- For ccab's BPF bbr2/bbr3 the poller also fills bbr_bw_bps / bbr_min_rtt_us / cc_version from the
-- model they export (collectors/ccmodel); no column changes for that.
-- The landing layer (0002, generated from the contracts) is re-created by `ccab db migrate`.
ALTER TABLE tcp_samples
    ADD COLUMN IF NOT EXISTS cc_impl LowCardinality(Nullable(String)) AFTER cc_version;
ALTER TABLE tcp_samples
    ADD COLUMN IF NOT EXISTS policy_generation Nullable(UInt64) AFTER sample_rate;
