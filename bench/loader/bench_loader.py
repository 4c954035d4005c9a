"""bench/loader: records/s through `ccab loader` vs the physical limit, in one run.

The limit: ClickHouse (the same embedded engine) ingesting the very same JSONEachRow bytes with
one direct INSERT into the raw table, by its fastest path (`INSERT ... SELECT FROM file()` on a
tmpfs file; inline data is ~2x slower in chdb) — no Kafka, no validation, no dead-letter path.
Ours: the same records produced to a Kafka topic beforehand (not timed), then consumed by the
loader (validation in ClickHouse, audit columns, dedup tokens, offset commits) until all are in.
Prints both rates and the ratio (goal >= 0.7).

Usage: bench/loader/run.sh [N_RECORDS]   (default 300000 tcp_sample/1 records, ~1.2 KB each)
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ccab.base import schema as migrate
from ccab.base.config import settings
from ccab.base.contracts import SCHEMAS
from ccab.base.warehouse import ChdbWarehouse
from ccab.ingest.batch import MAX_BATCH_ROWS
from ccab.ingest.loader import Loader
from ccab.kafka import broker
from ccab.kafka import topics as kafka_topics

ROUNDS = 3
VECTORS = Path(__file__).resolve().parents[3] / "shared" / "contracts" / "vectors"


def records(n: int) -> list[bytes]:
    base = [json.loads(x) for x in (VECTORS / "ss_tinHOe_iproute2-6.1.expected.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        r = dict(base[i % len(base)])
        r.update(schema="tcp_sample/1", ts_ms=1763769600000 + i * 7, pop="tyo1", host=f"edge-tyo1-{i % 24:02d}",
                 kernel="6.1.0-18-amd64", arm=("control", "bbr1", "bbr2")[i % 3], rollout_id="bench",
                 sock_id=f"{i:016x}", state="ESTAB", sample_rate=0.1, bytes_acked=r["bytes_acked"] + i)
        out.append(json.dumps(r, separators=(",", ":")).encode())
    return out


def limit_rate(data: bytes, n: int, workdir: Path) -> float:
    wh = ChdbWarehouse(workdir / "limit")
    migrate.migrate(wh, log=lambda _m: None)
    path = Path("/dev/shm" if Path("/dev/shm").is_dir() else workdir) / f"ccab-bench-{uuid.uuid4().hex}.jsonl"
    path.write_bytes(data)
    try:
        start = time.perf_counter()
        wh.command(f"INSERT INTO tcp_samples SELECT * FROM file('{path}', JSONEachRow) "
                   "SETTINGS async_insert=0, input_format_skip_unknown_fields=1")
        elapsed = time.perf_counter() - start
    finally:
        path.unlink()
    got = wh.query("SELECT count() FROM tcp_samples").scalar()
    wh.close()
    assert got == n, (got, n)
    return n / elapsed


def loader_rate(lines: list[bytes], bootstrap: str, workdir: Path) -> float:
    from confluent_kafka import Producer

    topic = f"bench.tcp.{uuid.uuid4().hex[:8]}"
    kafka_topics.ensure_topics(bootstrap, {topic: kafka_topics.TopicSpec(partitions=6, config={})})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "zstd",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000})
    for i, v in enumerate(lines):
        while True:
            try:
                p.produce(topic, value=v, key=b"edge-tyo1-%02d" % (i % 24))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    wh = ChdbWarehouse(workdir / "ours")
    migrate.migrate(wh, log=lambda _m: None)
    loader = Loader(wh, bootstrap, {topic: SCHEMAS["tcp_sample/1"]}, group=f"bench-{topic}",
                    batch_rows=MAX_BATCH_ROWS, batch_wait_s=0.5)
    # time from the first batch to the last row, not the consumer-group join
    first_batch = {}
    orig_write = loader._write

    def timed_write(msgs):
        first_batch.setdefault("t", time.perf_counter())
        orig_write(msgs)
        first_batch["end"] = time.perf_counter()

    loader._write = timed_write
    loader.run(max_idle_s=3, max_records=len(lines))
    got = wh.query(f"SELECT count() FROM tcp_samples WHERE _topic = '{topic}'").scalar()
    wh.close()
    assert got == len(lines), (got, len(lines))
    return len(lines) / (first_batch["end"] - first_batch["t"])


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    workdir = Path(tempfile.mkdtemp(prefix="ccab-bench-loader-"))
    started_broker = False
    try:
        bootstrap = settings().kafka_brokers
        if not bootstrap:
            started_broker = not broker.is_running()
            bootstrap = broker.up(timeout_s=120)
        lines = records(n)
        data = b"\n".join(lines)
        print(f"bench/loader: {n:,} tcp_sample/1 records, {len(data) / 1e6:.0f} MB of JSONEachRow, "
              f"{ROUNDS} alternating rounds (median)")
        limits, ours, ratios = [], [], []
        for r in range(ROUNDS):
            limits.append(limit_rate(data, n, workdir / f"r{r}"))
            ours.append(loader_rate(lines, bootstrap, workdir / f"r{r}"))
            ratios.append(ours[-1] / limits[-1])
            print(f"  round {r + 1}: limit {limits[-1]:>10,.0f}/s  ours {ours[-1]:>10,.0f}/s  ratio {ratios[-1]:.2f}")
        print(f"  limit  (one direct INSERT of the same bytes)  {statistics.median(limits):>12,.0f} records/s")
        print(f"  ours   (Kafka -> ccab loader -> ClickHouse)   {statistics.median(ours):>12,.0f} records/s")
        ratio = statistics.median(ratios)
        print(f"  ratio  ours/limit = {ratio:.2f}   (goal >= 0.70) {'OK' if ratio >= 0.7 else 'BELOW GOAL'}")
        return 0
    finally:
        if started_broker:
            broker.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
