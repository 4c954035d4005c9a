"""bench/loader: records/s through `ccab loader` vs the physical limit, in one run.

The limit: ClickHouse (the same embedded engine) ingesting the very same JSONEachRow bytes with
one direct INSERT into the raw table, by its fastest path (`INSERT ... SELECT FROM file()` on a
tmpfs file; inline data is ~2x slower in chdb) — no Kafka, no validation, no dead-letter path.
Ours: the same records produced to a Kafka topic beforehand (not timed), then consumed by the
loader (validation in ClickHouse, audit columns, dedup tokens, offset commits) until all are in,
the way it is deployed: the loader process talks to the warehouse service (another process, the
one owner of the engine, over ClickHouse's HTTP interface: ``ServerWarehouse``). ``--in-process``:
the loader holds the engine itself (``ChdbWarehouse``, how it ran before the service).
Prints both rates and the ratio per round (goal, issue #19: >= 0.85 in every round) and the
``table19 loader`` line of ``make bench``'s issue-19 table.

``--bad-fraction F``: the loader on all-good records vs the loader on the same number of records
of which a fraction F is bad in ways only ClickHouse or the careful path refuses (a string where
an int belongs, a full client IP as peer_prefix, a duplicate key, NaN, an integer beyond 64 bits),
spread through every batch. Records/s counts every record consumed (loaded or dead-lettered);
prints both rates and the slowdown (goal <= 2x), and beside it the **engine floor**: ClickHouse's
own JSONEachRow reader, alone, on the same two sets of bytes (all good; the bad mix with
``input_format_allow_errors_*``, skipping the rows it cannot read), one direct INSERT each from
a tmpfs file — the least any loader that lets the engine's reader find the unreadable rows pays
for the bad mix. It does less than the loader (the wide integers wrap, NaN and full IPs go in).

Usage: bench/loader/run.sh [N_RECORDS] [--bad-fraction 0.5] [--in-process]
       (default 300000 tcp_sample/1 records, ~1.2 KB each)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ccab.base import schema as migrate
from ccab.base.config import settings
from ccab.base.contracts import SCHEMAS
from ccab.base.warehouse import ChdbWarehouse, ServerWarehouse
from ccab.ingest.batch import MAX_BATCH_ROWS
from ccab.ingest.loader import Loader
from ccab_workshop.kafka import broker
from ccab.kafka import topics as kafka_topics

ROUNDS = 3
GOAL_RATIO = 0.85  # issue #19: ours/limit in every round
VECTORS = Path(__file__).resolve().parents[2] / "contracts" / "vectors"


def records(n: int) -> list[bytes]:
    base = [json.loads(x) for x in (VECTORS / "ss_tinHOe_iproute2-6.1.expected.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        r = {"schema": "tcp_sample/1", **base[i % len(base)]}  # schema first, as the collector writes it
        r.update( ts_ms=1763769600000 + i * 7, pop="tyo1", host=f"edge-tyo1-{i % 24:02d}",
                 kernel="6.1.0-18-amd64", arm=("control", "bbr1", "bbr2")[i % 3], rollout_id="bench",
                 sock_id=f"{i:016x}", state="ESTAB", sample_rate=0.1, bytes_acked=r["bytes_acked"] + i)
        out.append(json.dumps(r, separators=(",", ":")).encode())
    return out


def spoil(good: list[bytes], fraction: float) -> tuple[list[bytes], int]:
    """Every record at a position that falls in ``fraction`` made bad, cycling through the kinds."""
    kinds = [
        lambda b: b.replace(b'"cwnd":', b'"cwnd":"lots","x":', 1),  # wrong type (ClickHouse)
        lambda b: b.replace(b'"peer_prefix":"', b'"peer_prefix":"10.1.2.3","y":"', 1),  # a host, not a /24
        lambda b: b[:-1] + b',"mss":1}',  # duplicate key
        lambda b: b.replace(b'"sample_rate":0.1', b'"sample_rate":NaN', 1),  # not finite
        lambda b: b.replace(b'"bytes_acked":', b'"bytes_acked":18446744073709551617,"z":', 1),  # would wrap
    ]
    out, bad, acc = [], 0, 0.0
    for i, b in enumerate(good):
        acc += fraction
        if acc >= 1.0:
            acc -= 1.0
            spoiled = kinds[bad % len(kinds)](b)
            assert spoiled != b
            out.append(spoiled)
            bad += 1
        else:
            out.append(b)
    return out, bad


def limit_rate(data: bytes, n: int, workdir: Path) -> float:
    seconds, got = direct_insert(data, n, workdir)
    assert got == n, (got, n)
    return n / seconds


def direct_insert(data: bytes, n_lines: int, workdir: Path, into_memory: bool = False,
                  skip_errors: bool = False) -> tuple[float, int]:
    """One direct INSERT of ``data`` by ClickHouse's JSONEachRow reader into the raw table of a
    fresh warehouse (``into_memory``: a Memory copy of it, the reader's cost alone), from a tmpfs
    file — the engine's fastest path, no Kafka, no validation; ``skip_errors``: rows the reader
    cannot read are skipped (``input_format_allow_errors_*``). Returns (seconds, rows inserted)."""
    wh = ChdbWarehouse(workdir)
    try:
        migrate.migrate(wh, log=lambda _m: None)
        table = "tcp_samples"
        if into_memory:
            table = "reader_floor"
            wh.command(f"CREATE TABLE {table} AS tcp_samples ENGINE = Memory")
        path = Path("/dev/shm" if Path("/dev/shm").is_dir() else workdir) / f"ccab-bench-{uuid.uuid4().hex}.jsonl"
        path.write_bytes(data)
        skip = (f", input_format_allow_errors_num={n_lines + 1}, input_format_allow_errors_ratio=1"
                if skip_errors else "")
        try:
            start = time.perf_counter()
            wh.command(f"INSERT INTO {table} SELECT * FROM file('{path}', JSONEachRow) "
                       f"SETTINGS async_insert=0, input_format_skip_unknown_fields=1{skip}")
            elapsed = time.perf_counter() - start
        finally:
            path.unlink()
        return elapsed, wh.query(f"SELECT count() FROM {table}").scalar()
    finally:
        wh.close()


@contextlib.contextmanager
def warehouse_service(data_dir: Path):
    """A warehouse service process owning the engine at ``data_dir/warehouse``; yields its URL."""
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CCAB_CLICKHOUSE_URL"}
    env.update(CCAB_DATA_DIR=str(data_dir), CCAB_WAREHOUSE_PORT=str(port))
    with open(data_dir / "service.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ccab.warehouse_service", "serve", "--port", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(f"the warehouse service exited: {(data_dir / 'service.log').read_text()[-2000:]}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/ccab"
    finally:
        proc.terminate()
        proc.wait(60)


def loader_rate(lines: list[bytes], bootstrap: str, workdir: Path, n_bad: int = 0,
                in_process: bool = False) -> tuple[float, float, float]:
    """Records/s through the loader, and of its timed seconds those inside warehouse statements
    (the engine's, plus the HTTP exchange with the service; the rest: Kafka messages to a batch,
    the byte checks, the join, the commit)."""
    if in_process:
        return _loader_rate(lines, bootstrap, workdir, n_bad, ChdbWarehouse(workdir / "ours"))
    with warehouse_service(workdir / "ours-data") as url:
        return _loader_rate(lines, bootstrap, workdir, n_bad,
                            ServerWarehouse(url, local_path=workdir / "ours-data" / "warehouse"))


def _loader_rate(lines: list[bytes], bootstrap: str, workdir: Path, n_bad: int, wh) -> tuple[float, float, float]:
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
    migrate.migrate(wh, log=lambda _m: None)
    loader = Loader(wh, bootstrap, {topic: SCHEMAS["tcp_sample/1"]}, group=f"bench-{topic}",
                    batch_rows=MAX_BATCH_ROWS, batch_wait_s=0.5)
    # time from the first batch to the last row, not the consumer-group join
    first_batch = {}
    orig_submit = loader._submit
    # every statement goes through one of the Warehouse methods: timing them splits ours (bench only)
    in_engine = [0.0]

    def timed(orig):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                if "t" in first_batch and "end" not in first_batch:
                    in_engine[0] += time.perf_counter() - start
        return run

    for name in ("query", "command", "insert_raw", "query_input", "command_input"):
        setattr(wh, name, timed(getattr(wh, name)))

    def timed_submit(msgs):
        first_batch.setdefault("t", time.perf_counter())
        orig_submit(msgs)

    loader._submit = timed_submit
    orig_finish = loader._finish_inflight

    def timed_finish():  # the end: the last batch in and its offsets committed (not the group's leave)
        had_batch = loader._inflight is not None
        orig_finish()
        if had_batch:
            first_batch["end"] = time.perf_counter()

    loader._finish_inflight = timed_finish
    loader.run(max_idle_s=3, max_records=len(lines))  # returns once the last batch is in and committed
    first_batch.setdefault("end", time.perf_counter())  # (a run that never had a batch in flight)
    got = wh.query(f"SELECT count() FROM tcp_samples WHERE _topic = '{topic}'").scalar()
    dead = wh.query(f"SELECT count() FROM dead_letters FINAL WHERE _topic = '{topic}'").scalar()
    wh.close()
    assert (got, dead) == (len(lines) - n_bad, n_bad), (got, dead, len(lines), n_bad)
    total = first_batch["end"] - first_batch["t"]
    return len(lines) / total, in_engine[0], total


def bad_mix(lines: list[bytes], fraction: float, bootstrap: str, workdir: Path, in_process: bool = False) -> int:
    mixed, n_bad = spoil(lines, fraction)
    print(f"bench/loader --bad-fraction {fraction}: {len(lines):,} tcp_sample/1 records, {n_bad:,} of them bad, "
          f"{ROUNDS} alternating rounds (median)")
    good_data, mixed_data = b"\n".join(lines), b"\n".join(mixed)
    good, bad, ratios, floors = [], [], [], []
    for r in range(ROUNDS):
        good.append(loader_rate(lines, bootstrap, workdir / f"g{r}", in_process=in_process)[0])
        bad.append(loader_rate(mixed, bootstrap, workdir / f"b{r}", n_bad, in_process=in_process)[0])
        ratios.append(good[-1] / bad[-1])
        t_good, _ = direct_insert(good_data, len(lines), workdir / f"fg{r}", into_memory=True)
        t_mixed, read = direct_insert(mixed_data, len(mixed), workdir / f"fb{r}", into_memory=True, skip_errors=True)
        floors.append(t_mixed / t_good)
        print(f"  round {r + 1}: all good {good[-1]:>10,.0f}/s  {fraction:.0%} bad {bad[-1]:>10,.0f}/s  "
              f"slowdown {ratios[-1]:.2f}x   engine floor {floors[-1]:.2f}x "
              f"(reader alone {t_good:.2f} s all good, {t_mixed:.2f} s bad mix, {len(mixed) - read:,} rows skipped)")
    print(f"  all good        (Kafka -> ccab loader -> ClickHouse)  {statistics.median(good):>12,.0f} records/s")
    print(f"  {fraction:>4.0%} bad        (same, bad rows dead-lettered)      {statistics.median(bad):>12,.0f} records/s")
    ratio = statistics.median(ratios)
    print(f"  slowdown all-good/bad-mix = {ratio:.2f}x   (goal <= 2.00x) {'OK' if ratio <= 2 else 'ABOVE GOAL'}")
    floor = statistics.median(floors)
    print(f"  engine floor: ClickHouse's own reader, skipping the rows it cannot read, on the same bytes "
          f"= {floor:.2f}x its all-good read (median); ours / floor = {ratio / floor:.2f}")
    print(f"  load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


USAGE = """usage: bench/loader/run.sh [N] [--in-process] [--bad-fraction F]
  N                  records (default 300000)
  --in-process       the loader holds the engine itself instead of talking to the warehouse service
  --bad-fraction F   all-good records vs the same number with a fraction F bad (prints the slowdown)
  (bench/loader/run.sh --engine-share [ROUNDS]: the loader's statement vs the limit's, part by part)
Uses CCAB_KAFKA_BROKERS, or starts the data dir's broker (CCAB_KAFKA_PORT)."""


def main() -> int:
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(USAGE)
        return 0
    unknown = [a for a in args if a.startswith("-") and a not in ("--in-process", "--bad-fraction")]
    if unknown or len([a for a in args if not a.startswith("-")]) > 1 + ("--bad-fraction" in args):
        print(f"bench/loader: unexpected arguments {args}\n{USAGE}", file=sys.stderr)
        return 2
    in_process = "--in-process" in args
    if in_process:
        args.remove("--in-process")
    fraction = None
    if "--bad-fraction" in args:
        i = args.index("--bad-fraction")
        fraction = float(args[i + 1])
        del args[i:i + 2]
    n = int(args[0]) if args else 300_000
    workdir = Path(tempfile.mkdtemp(prefix="ccab-bench-loader-"))
    started_broker = False
    try:
        bootstrap = settings().kafka_brokers
        if not bootstrap:
            started_broker = not broker.is_running()
            bootstrap = broker.up(timeout_s=120)
        lines = records(n)
        if fraction is not None:
            return bad_mix(lines, fraction, bootstrap, workdir, in_process)
        data = b"\n".join(lines)
        print(f"bench/loader: {n:,} tcp_sample/1 records, {len(data) / 1e6:.0f} MB of JSONEachRow, "
              f"{ROUNDS} alternating rounds (median); the loader "
              + ("holds the engine in-process (--in-process)" if in_process else
                 "talks to the warehouse service (its own process, ClickHouse's HTTP interface)"))
        limits, ours, ratios = [], [], []
        for r in range(ROUNDS):
            limits.append(limit_rate(data, n, workdir / f"l{r}"))
            rate, engine_s, total_s = loader_rate(lines, bootstrap, workdir / f"r{r}", in_process=in_process)
            ours.append(rate)
            ratios.append(ours[-1] / limits[-1])
            print(f"  round {r + 1}: limit {limits[-1]:>10,.0f}/s  ours {ours[-1]:>10,.0f}/s  ratio {ratios[-1]:.2f}   "
                  f"(ours {total_s:.2f} s, of which {engine_s:.2f} s in warehouse statements, overlapping the "
                  f"next batch's Kafka + Python; ClickHouse's share alone would be "
                  f"{n / engine_s / limits[-1]:.2f} of the limit)")
        print(f"  limit  (one direct INSERT of the same bytes)  {statistics.median(limits):>12,.0f} records/s")
        print(f"  ours   (Kafka -> ccab loader -> ClickHouse)   {statistics.median(ours):>12,.0f} records/s")
        ratio = statistics.median(ratios)
        met = min(ratios) >= GOAL_RATIO
        print(f"  ratio  ours/limit = {ratio:.2f} median, {min(ratios):.2f}-{max(ratios):.2f} over the rounds   "
              f"(goal >= {GOAL_RATIO:.2f} in every round) {'OK' if met else 'BELOW GOAL'}")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"table19 loader | {' / '.join(f'{r:.2f}' for r in ratios)} per round, median {ratio:.2f} "
              f"({n:,} records; load avg {load}) | {'met' if met else 'NOT met'}")
        return 0
    finally:
        if started_broker:
            broker.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
