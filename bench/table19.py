"""The table of issue #19 ("Scale") from one `make bench` run: every row with its goal.

Each bench prints its row as one line ``table19 <key> | <what was measured now> | <met|NOT met>``;
this script reads the saved output of the run (the file given as the only argument) and prints
every row of the issue's table in its order, with "not measured: owner issue #19 item N" for a
row no bench printed. Rows proven by tests rather than timed (Kafka cluster, ClickHouse
cluster, Airflow) name the test that shows them. Stdlib only.
"""

from __future__ import annotations

import sys

# key, row of the table, goal, issue item (owner), what shows it when it is not timed
ROWS = [
    ("cohorts", "hourly cohort job vs pandas, 10.3M samples, same cells", "≥ 10× pandas, linear to 100M", "1", None),
    ("loader", "loader vs one direct INSERT of the same bytes", "≥ 0.85 in every round", "2 (loader half)", None),
    ("collector", "collector `run` path (tailer → parser → sink)", "≥ 1M lines/s/core", "2 (collector half)", None),
    ("kafka", "Kafka", "a real 3-broker cluster survives a broker loss", "3",
     "test: pipelines/tests/kafka/test_kafka_cluster.py (make test-slow, which .ci/run runs after make test; kill the partition leader under "
     "collector+loader load → 0 lost, 0 duplicated; agents+controller through a broker loss)"),
    ("clickhouse", "ClickHouse cluster", "built and tested", "4",
     "tests: pipelines/tests/ingest/test_shards.py (loader on 3 shard databases of one chdb engine, "
     "real broker, SIGKILLs mid-batch → every record once on its host's shard), "
     "pipelines/tests/cohorts/test_cohorts_shards.py (per-shard job: union of shards = single node), "
     "pipelines/tests/base/test_cluster_ddl.py (cluster DDL parsed by the engine); NOT tested: "
     "Replicated engines, Keeper, Distributed reads/inserts, one server per shard"),
    ("airflow", "Airflow", "a real scheduler runs the DAGs unattended", "5", None),
    ("dashboards", "analyst queries: every panel and view, 90 days × 500 hosts", "every panel < 1 s", "6", None),
]


def parse(text: str) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        if not line.startswith("table19 "):
            continue
        key, _, rest = line[len("table19 "):].partition("|")
        now, _, verdict = rest.partition("|")
        found[key.strip()] = (now.strip(), verdict.strip())
    return found


def render(found: dict[str, tuple[str, str]]) -> str:
    out = ["", "== issue #19 (Scale): every row with its goal", "",
           "| benchmark | now | goal | met? |", "|---|---|---|---|"]
    for key, row, goal, item, shown_by in ROWS:
        if key in found:
            now, verdict = found[key]
        elif shown_by:
            now, verdict = shown_by, "see the test"
        else:
            now, verdict = f"not measured: owner issue #19 item {item}", "—"
        out.append(f"| {row} | {now} | {goal} | {verdict} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: table19.py <saved output of the bench run>", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        print(render(parse(f.read())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
