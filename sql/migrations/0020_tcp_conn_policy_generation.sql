-- tcp_conn/1 gains policy_generation (optional): the generation of the assignment/2 socket policy
-- whose prefix matched the connection and set its congestion control (rollout/sockpolicy); NULL
-- when no policy decided it (no segment rollout, a peer outside the segment, a collector without
-- the policy's records, or the policy's algorithm could not be set). The judge's segment gate
-- tells "targeted and applied" from "targeted but not applied" with it.
-- The landing layer (0002, generated from the contracts) is re-created by `ccab db migrate`.
ALTER TABLE tcp_conns
    ADD COLUMN IF NOT EXISTS policy_generation Nullable(UInt64) AFTER sample_rate;
