"""assignment/2 and /3 (a segment's socket policy) land in the assignments table beside assignment/1, from
the Kafka topic's batches and from replay files; an unknown version is still a dead letter (real
chdb)."""

from __future__ import annotations

import json

from ccab.base.contracts import ASSIGNMENT, validate
from ccab.ingest.batch import Batch, BatchWriter, Record
from ccab.ingest.loader import load_files


def _asg(gen: int, schema: str = "assignment/1", **extra) -> dict:
    rec = {"schema": schema, "rollout_id": "seg", "generation": gen, "pop": "p1", "host": f"h{gen}", "arm": "bbr",
           "cc": "cubic", "qdisc": None, "issued_at_ms": 1763769600000, "signature": "c2ln"}
    rec.update(extra)
    return rec


POLICY = {"segment": "access:mobile", "cc": "bbr", "prefixes": ["10.201.0.0/16"]}
SET_POLICY = {"segment": "access:mobile", "cc": "bbr", "prefix_set": {"name": "access:mobile", "version": 1, "sha256": "0" * 64}}


def _line(rec: dict) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode()


def test_both_versions_land_from_the_topic(warehouse):
    recs = [_asg(1), _asg(2, "assignment/2", policy=POLICY), _asg(3, "assignment/2", policy=None),
            _asg(4, "assignment/9", policy=POLICY), _asg(5, "assignment/3", policy=SET_POLICY)]
    assert [bool(validate(r, ASSIGNMENT)) for r in recs] == [False, False, False, True, False]
    batch = Batch.of([Record(_line(r), "ccab.assignments.v1", 0, i) for i, r in enumerate(recs)])
    res = BatchWriter(warehouse).write(ASSIGNMENT, batch)
    assert res.inserted == 4 and res.dead_total == 1
    rows = warehouse.query("SELECT generation, arm, cc FROM assignments ORDER BY generation").rows
    assert [tuple(r) for r in rows] == [(1, "bbr", "cubic"), (2, "bbr", "cubic"), (3, "bbr", "cubic"), (5, "bbr", "cubic")]
    dead = warehouse.query("SELECT reason FROM dead_letters").rows
    assert len(dead) == 1 and "assignment/9" in dead[0][0]


def test_both_versions_land_from_files(warehouse, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(_line(r) for r in (_asg(1), _asg(2, "assignment/2", policy=POLICY))) + b"\n")
    report = load_files(warehouse, [path])
    assert report.inserted == {"assignments": 2}
