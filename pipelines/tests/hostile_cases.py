"""Hostile records of issue 29, derived from the contracts: shared by the ingest tests, the
adversarial suite and its Kafka run (one record of each class among good ones)."""

from __future__ import annotations

import json

from ccab.base.contracts import HTTP_REQUEST, TCP_CONN, TCP_SAMPLE, TS_MS_MIN, Field, Schema
from factories import http_request, tcp_sample

CONN_FIELDS = {f.name for f in TCP_CONN.fields}
DATA_SCHEMAS = (TCP_SAMPLE, TCP_CONN, HTTP_REQUEST)
DEEP = b"[" * 5000 + b"]" * 5000


def tcp_conn(i: int, **over) -> dict:
    """A valid tcp_conn/1 record (the tcp_sample vector's fields that tcp_conn/1 has)."""
    rec = {k: v for k, v in tcp_sample(i).items() if k in CONN_FIELDS}
    rec.update(schema="tcp_conn/1", cc_source="sockopt", duration_ms=1000 + i)
    rec.update(over)
    return rec


FACTORY = {TCP_SAMPLE.name: tcp_sample, TCP_CONN.name: tcp_conn, HTTP_REQUEST.name: http_request}


def dump(rec: dict) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode()


def raw(rec: dict, field: str, text: bytes) -> bytes:
    """``rec`` with ``field``'s value replaced by the raw JSON text ``text``."""
    return dump({**rec, field: "@@RAW@@"}).replace(b'"@@RAW@@"', text)


def wrong_values(f: Field) -> list[bytes]:
    """Values of another JSON type than ``f``'s kind, and values outside its bounds, from the
    contract's description of the field alone."""
    other = {
        "string": [b'{"a":1}', b"[1]", b"5", b"true"],
        "int": [b'"5"', b"true", b"5.5", b'{"a":1}', b"[5]"],
        "uint": [b'"5"', b"true", b"5.5", b'{"a":1}', b"[5]", b"-5"],
        "float": [b'"0.5"', b"true", b'{"a":1}', b"[0.5]"],
        "bool": [b"1", b"0", b'"true"', b"[true]"],
    }[f.kind]
    if f.bounds == "time":
        other += [str(v).encode() for v in (0, -1, TS_MS_MIN - 1, 7_258_118_400_000,  # before 2000, year 2200
                                            1_763_769_600_000_000)]  # microseconds
    elif f.bounds:
        lo, hi, lo_open = f.bounds
        other += [repr(lo if lo_open else lo - 1).encode(), repr(hi * 2).encode(), b"1e308", b"-1e308"]
    return other


def confusion_cases(schema: Schema, first: int = 0) -> list[tuple[str, bytes]]:
    """(field, record) for every field of ``schema`` and every wrong value of it."""
    make = FACTORY[schema.name]
    out = []
    for f in schema.fields:
        if f.name == "schema":
            continue
        for text in wrong_values(f):
            out.append((f.name, raw(make(first + len(out)), f.name, text)))
    return out


def duplicate_cases(schema: Schema, i: int = 1) -> list[bytes]:
    body = dump(FACTORY[schema.name](i))
    required_int = next(f.name for f in schema.fields if f.kind in ("int", "uint") and f.required and f.name != "ts_ms")
    return [
        body[:-1] + b',"%s":7}' % required_int.encode(),
        body[:-1] + b',"pop":"x"}',
        body[:-1] + b',"schema":"%s"}' % schema.name.encode(),
        body[:-1] + b',"meta":{"a":1,"a":2}}',
        body[:-1] + b',"meta":[{"b":{"c":1,"c":1}}]}',
    ]


def one_of_each_class(schema: Schema, i: int) -> list[tuple[str, bytes]]:
    """(class, record): one hostile record of each issue-29 class for ``schema``."""
    make = FACTORY[schema.name]
    dups = duplicate_cases(schema, i)
    return [
        ("deeply nested member", raw(make(i), "pop", DEEP)),
        ("deeply nested extra field", raw(make(i + 1), "extra", DEEP)),
        ("duplicate contract field", dups[0]),
        ("duplicate key in a nested object", dups[3]),
        ("object where a string belongs", raw(make(i + 2), "pop", b'{"a":1}')),
        ("array where a string belongs", raw(make(i + 3), "host", b"[1]")),
        ("quoted integer", raw(make(i + 4), "ts_ms", b'"%d"' % make(i)["ts_ms"])),
        ("sample_rate 1e308", raw(make(i + 5), "sample_rate", b"1e308")),
        ("negative sample_rate", raw(make(i + 6), "sample_rate", b"-1.0")),
        ("ts_ms in the year 2200", raw(make(i + 7), "ts_ms", b"7258118400000")),
        ("ts_ms before 2000", raw(make(i + 8), "ts_ms", b"946684799999")),
    ] + ([("negative request_time_ms", raw(make(i + 9), "request_time_ms", b"-3.5"))]
         if schema is HTTP_REQUEST else [("number where a bool belongs", raw(make(i + 9), "app_limited", b"1"))])
