-- tcp_samples.retrans_pct and rwnd_limited_pct are percentages, like the metrics of the same names
-- in the rollups, the judge, the views and the dashboards (100 x bytes_retrans / bytes_sent):
-- 0001 declared them as fractions (0.084 for 8.4 %), so `SELECT avg(retrans_pct) FROM tcp_samples`
-- read 100 times too small next to every other retrans_pct. Nothing in ccab reads these aliases;
-- an ALIAS stores nothing, so the change needs no rewrite. (ALTER ... MODIFY COLUMN is idempotent.)
ALTER TABLE tcp_samples
    MODIFY COLUMN retrans_pct Float64 ALIAS if(bytes_sent = 0, 0, 100 * bytes_retrans / bytes_sent);
ALTER TABLE tcp_samples
    MODIFY COLUMN rwnd_limited_pct Float64 ALIAS if(busy_ms = 0, 0, 100 * rwnd_limited_ms / busy_ms);
