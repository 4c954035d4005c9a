"""bench/loader/engine_share.py: where the loader's time goes against the limit, statement by statement.

Each measurement runs in a fresh process (one engine each, like the warehouse service a loader
talks to; a process that has run many inserts drifts 30-50 % slower), on the same 60,000
``tcp_sample/1`` records as ``bench_loader.py``, interleaved rounds, medians:

  limit             the bench's limit: ``INSERT INTO tcp_samples SELECT * FROM file()``
  plain             the loader's plain-path statement (landing table: contract constraints, the
                    view's key dedupe into the raw table, source positions) on the same bytes
  no-constraints    the same, on a landing table without its CHECK constraints
  no-dedupe         the same, the view without its NOT IN / LIMIT 1 BY key dedupe
  neither           without both (what the engine costs for the rows alone)
  service-limit     the limit's statement run by a warehouse service
  service-plain     the plain statement through a warehouse service, its body streamed in
                    4,096-record chunks already made (no Kafka, no checks in the client)

Prints each variant's median seconds and its ratio to the limit. The variants without
constraints or dedupe are experiments only: the loader needs both (they are the contract).

Usage: bench/loader/run.sh --engine-share [ROUNDS]    (default 3 rounds, ~2 min)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

VARIANTS = ("limit", "plain", "no-constraints", "no-dedupe", "neither", "service-limit", "service-plain")
N = 60_000


def _one(variant: str, data_path: Path, workdir: Path) -> float:
    """Run ``variant`` once in this (fresh) process; returns the statement's seconds."""
    from ccab.base import schema as migrate
    from ccab.base.contracts import SCHEMAS
    from ccab.base.warehouse import ChdbWarehouse, ServerWarehouse
    from ccab.ingest import batch as B

    schema = SCHEMAS["tcp_sample/1"]
    data = data_path.read_bytes()
    lines = data.split(b"\n")
    limit_sql = (f"INSERT INTO tcp_samples SELECT * FROM file('{data_path}', JSONEachRow) "
                 "SETTINGS async_insert=0, input_format_skip_unknown_fields=1")
    settings = dict(B.INSERT_SETTINGS, max_threads=1, insert_deduplication_token=uuid.uuid4().hex)
    params = {"topic": "bench", "rows": len(lines), "rp": [0], "ro": [0], "rs": [0]}

    def chunks():
        for a in range(0, len(lines), B.PLAIN_CHUNK_RECORDS):
            if a:
                yield b"\n"
            yield b"\n".join(lines[a:a + B.PLAIN_CHUNK_RECORDS])

    def plain(wh, body):
        wh.command_input(B._plain_insert_sql(schema), body, "JSONEachRow", B._plain_structure(schema),
                         params=params, settings=settings)

    if variant.startswith("service-"):
        from bench_loader import warehouse_service
        with warehouse_service(workdir) as url:
            wh = ServerWarehouse(url, local_path=workdir / "warehouse")
            migrate.migrate(wh, log=lambda _m: None)
            start = time.perf_counter()
            wh.command(limit_sql) if variant == "service-limit" else plain(wh, chunks())
            took = time.perf_counter() - start
            assert wh.query("SELECT count() FROM tcp_samples").scalar() == len(lines)
            wh.close()
            return took
    wh = ChdbWarehouse(workdir)
    migrate.migrate(wh, log=lambda _m: None)
    if variant in ("no-constraints", "neither"):
        _recreate_landing_without_constraints(wh, schema.landing_table)
    if variant in ("no-dedupe", "neither"):
        _recreate_view_without_dedupe(wh, schema.landing_table + "_mv")
    start = time.perf_counter()
    wh.command(limit_sql) if variant == "limit" else plain(wh, data)
    took = time.perf_counter() - start
    assert wh.query("SELECT count() FROM tcp_samples").scalar() == len(lines)
    wh.close()
    return took


def _create_query(wh, table: str) -> str:
    return wh.query("SELECT create_table_query FROM system.tables "
                    f"WHERE database = currentDatabase() AND name = '{table}'").scalar()


def _recreate_landing_without_constraints(wh, landing: str) -> None:
    table, view = _create_query(wh, landing), _create_query(wh, landing + "_mv")
    columns, _, rest = table.partition(", CONSTRAINT ")
    engine = rest[rest.rindex(") ENGINE"):]
    wh.command(f"DROP TABLE {landing}_mv")
    wh.command(f"DROP TABLE {landing}")
    wh.command(columns + engine)
    wh.command(view)


def _recreate_view_without_dedupe(wh, view: str) -> None:
    ddl = _create_query(wh, view)
    wh.command(f"DROP TABLE {view}")
    wh.command(ddl[:ddl.index("WHERE (")])


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--one":  # a child: one variant, one number
        print(_one(args[1], Path(args[2]), Path(args[3])))
        return 0
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    rounds = int(args[0]) if args else 3
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_loader import records

    tmp = Path(tempfile.mkdtemp(prefix="ccab-bench-share-"))
    data_path = Path("/dev/shm" if Path("/dev/shm").is_dir() else tmp) / f"ccab-share-{uuid.uuid4().hex}.jsonl"
    data_path.write_bytes(b"\n".join(records(N)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("CCAB_CLICKHOUSE_URL", None)
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        print(f"bench/loader --engine-share: {N:,} tcp_sample/1 records, {rounds} interleaved rounds, "
              "each statement in a fresh process")
        for r in range(rounds):
            for v in VARIANTS:
                out = subprocess.run([sys.executable, __file__, "--one", v, str(data_path), str(tmp / f"{v}-{r}")],
                                     env=env, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{v}: {out.stderr[-2000:]}")
                times[v].append(float(out.stdout.strip().splitlines()[-1]))
            print(f"  round {r + 1}: " + "  ".join(f"{v} {times[v][-1]:.3f}" for v in VARIANTS), flush=True)
        limit = statistics.median(times["limit"])
        for v in VARIANTS:
            m = statistics.median(times[v])
            print(f"  {v:<15} {m:.3f} s median   {m / limit:.2f}x the limit")
        print(f"  load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return 0
    finally:
        data_path.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    sys.exit(main())
