-- tcp_conn/1 gains cc_impl (optional): which implementation of the connection's congestion
-- control ran, "ccab-bpf" for ccab's BPF algorithms (bbr2, bbr3, vivace: rollout/bpfcc, loaded by
-- the agent where the kernel lacks them) and "kernel" otherwise; NULL from collectors that do not
-- tell (records written before it existed). A bbr2 arm on a stock kernel is then told from a
-- kernel's own bbr2.
-- The landing layer (0002, generated from the contracts) is re-created by `ccab db migrate`.
ALTER TABLE tcp_conns
    ADD COLUMN IF NOT EXISTS cc_impl LowCardinality(Nullable(String)) AFTER cc_source;
