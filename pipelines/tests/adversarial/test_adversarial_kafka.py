"""One hostile record of each issue-29 class among 10,000 good ones, through a real Kafka broker
and ``ccab loader``'s Loader (issue 29, "Must show"): every good record loaded, every bad one a
dead letter, the loader never stuck (it consumed every record and committed past them; a watchdog
stops it after 10 failed inserts, which is how the loader of main behaved on the first deeply
nested record: retrying the same batch every 2 s for ever)."""

from __future__ import annotations

import random
import threading

from ccab.base.contracts import HTTP_REQUEST, TCP_CONN, TCP_SAMPLE
from ccab.ingest.loader import Loader, LoaderMetrics
from hostile_cases import DATA_SCHEMAS, FACTORY, dump, one_of_each_class

GOOD = {TCP_SAMPLE.name: 4000, TCP_CONN.name: 3000, HTTP_REQUEST.name: 3000}  # 10,000


def test_one_record_of_each_class_among_10000_good_through_kafka(kafka_broker, fresh_topic, warehouse, summary_line):
    from confluent_kafka import Producer

    rng = random.Random(29)
    topics = {s.name: fresh_topic("hostile3." + s.name.split("/")[0], partitions=2) for s in DATA_SCHEMAS}
    plan: dict[str, list[tuple[str | None, bytes]]] = {}
    for s in DATA_SCHEMAS:
        recs: list[tuple[str | None, bytes]] = [(None, dump(FACTORY[s.name](i))) for i in range(GOOD[s.name])]
        for cls, body in one_of_each_class(s, 50_000):
            recs.insert(rng.randrange(len(recs) + 1), (cls, body))
        plan[s.name] = recs
    where: dict[tuple[str, int, int], str | None] = {}
    producer = Producer({"bootstrap.servers": kafka_broker, "linger.ms": 5, "message.max.bytes": 4 << 20})
    for name, recs in plan.items():
        for i, (cls, body) in enumerate(recs):
            def cb(err, msg, cls=cls):
                assert err is None, err
                where[(msg.topic(), msg.partition(), msg.offset())] = cls
            producer.produce(topics[name], value=body, key=b"h%d" % (i % 7), on_delivery=cb)
            producer.poll(0)
    assert producer.flush(60) == 0
    total = sum(len(r) for r in plan.values())
    bad = {k: c for k, c in where.items() if c is not None}

    metrics = LoaderMetrics()
    loader = Loader(warehouse, kafka_broker, {topics[s.name]: s for s in DATA_SCHEMAS}, group=f"g-{topics[TCP_CONN.name]}",
                    batch_rows=2000, batch_wait_s=0.2, metrics=metrics)
    stuck = threading.Event()

    def watchdog():  # the loader of main: the same batch failing every 2 s for ever
        while not stuck.wait(0.5):
            if (metrics.registry.get_sample_value("ccab_loader_insert_errors_total") or 0) >= 10:
                stuck.set()
                loader.stop()

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        totals = loader.run(max_idle_s=5, max_records=total)
    finally:
        stopped_by_watchdog = stuck.is_set()
        stuck.set()
    assert not stopped_by_watchdog, "the loader retried a batch 10 times: stuck"

    loaded = {}
    for s in DATA_SCHEMAS:
        rows = warehouse.query(f"SELECT _partition, _offset FROM {s.table} WHERE _topic = {{t:String}}",
                               params={"t": topics[s.name]}).rows
        loaded.update({(topics[s.name], int(p), int(o)): s.name for p, o in rows})
    dead = {(t, int(p), int(o)): r for t, p, o, r in warehouse.query(
        "SELECT _topic, _partition, _offset, reason FROM dead_letters FINAL WHERE _topic IN {t:Array(String)}",
        params={"t": list(topics.values())}).rows}
    good_positions = {k for k, c in where.items() if c is None}
    assert set(loaded) == good_positions, (len(loaded), len(good_positions))
    assert set(dead) == set(bad), sorted((bad.get(k), dead.get(k)) for k in set(dead) ^ set(bad))[:5]
    assert totals.inserted == len(good_positions) and totals.dead_total == len(bad)
    assert (metrics.registry.get_sample_value("ccab_loader_insert_errors_total") or 0) == 0
    # committed past every record: a second loader of the group finds nothing
    again = Loader(warehouse, kafka_broker, {topics[s.name]: s for s in DATA_SCHEMAS},
                   group=f"g-{topics[TCP_CONN.name]}", batch_wait_s=0.2)
    assert again.run(max_idle_s=2).inserted == 0

    per_class = sorted({c for c in bad.values()})
    for cls in per_class:
        print(f"  {cls:<34} " + "; ".join(f"{k[0].split('.')[1]}: {dead[k][:70]}" for k, c in sorted(bad.items()) if c == cls))
    summary_line(f"adversarial kafka: tried {total}, loaded {len(loaded)}, dead-lettered {len(dead)}, lost "
                 f"{total - len(loaded) - len(dead)} ({len(bad)} hostile records of {len(per_class)} classes among "
                 f"{len(good_positions)} good ones on 3 topics; 0 failed inserts, loader never stuck)")
