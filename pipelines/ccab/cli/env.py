"""``ccab env``: which engines this environment selects, and where their state lives."""

from __future__ import annotations

from ccab.base.config import settings


def _cmd_env(args) -> int:
    s = settings()
    print(f"data dir      {s.data_dir}   (CCAB_DATA_DIR)")
    print(f"jar cache     {s.cache_dir}   (CCAB_CACHE_DIR)")
    if s.embedded_clickhouse:
        print(f"clickhouse    embedded chdb at {s.warehouse_path}   (set CCAB_CLICKHOUSE_URL for a server)")
    else:
        print(f"clickhouse    server {s.clickhouse_url.split('@')[-1]}   (CCAB_CLICKHOUSE_URL)")
    if isinstance(s.clickhouse_shards, int):
        print(f"shards        {s.clickhouse_shards} shard databases on that engine   (CCAB_CLICKHOUSE_SHARDS)")
    elif s.clickhouse_shards:
        hosts = ", ".join(u.split("@")[-1] for u in s.clickhouse_shards)
        print(f"shards        {len(s.clickhouse_shards)} servers: {hosts}   (CCAB_CLICKHOUSE_SHARDS)")
    if s.embedded_kafka:
        print(f"kafka         local broker 127.0.0.1:{s.kafka_port}, `ccab kafka up` starts it   (CCAB_KAFKA_PORT)")
    else:
        print(f"kafka         cluster {s.kafka_brokers}   (CCAB_KAFKA_BROKERS)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("env", help="show which engines (embedded or server) this environment selects",
                       description="Show the data dir, the jar cache and which ClickHouse and Kafka this "
                                   "environment selects (README.md lists the CCAB_* variables). No options.")
    p.set_defaults(func=_cmd_env)
