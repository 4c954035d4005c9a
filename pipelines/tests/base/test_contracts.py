"""Contract tests against contracts/vectors (the same files the Go side tests against)."""

from __future__ import annotations

import base64
import json

import pytest
from ccab.base import contracts
from ccab.base.schema import LANDING_FILE
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from paths import VECTORS

# What a sampler adds to the fields the ss text carries (the vectors leave these out).
SAMPLER_FIELDS = dict(schema="tcp_sample/1", ts_ms=1763769600000, pop="tyo1", host="edge-tyo1-03",
                      kernel="6.1.0-18-amd64", arm="control", rollout_id="", sock_id="9f2c1a",
                      state="ESTAB", sample_rate=0.25)
TAILER_FIELDS = dict(pop="tyo1", host="edge-tyo1-03", kernel="6.1.0-18-amd64", arm="", rollout_id="",
                     cc="cubic", sample_rate=1.0)


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (VECTORS / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["ss_tinHOe_iproute2-6.1.expected.jsonl", "ss_tin_iproute2-6.1.expected.jsonl"])
def test_ss_vectors_are_valid_tcp_samples_once_the_sampler_adds_host_fields(name):
    for rec in _jsonl(name):
        assert contracts.validate({**rec, **SAMPLER_FIELDS}) == []


def test_tcp_sample_optional_cc_impl_and_policy_generation():
    """The poller writes cc_impl and policy_generation where it can tell (collectors/ccmodel); the
    ss text never carries them, and a record without them stays valid (optional fields)."""
    rec = {**_jsonl("ss_tinHOe_iproute2-6.1.expected.jsonl")[0], **SAMPLER_FIELDS}
    assert "cc_impl" not in rec and "policy_generation" not in rec
    assert contracts.validate(rec) == []
    assert contracts.validate({**rec, "cc_impl": "ccab-bpf", "policy_generation": 7}) == []
    assert contracts.validate({**rec, "cc_impl": 2}) != []
    assert contracts.validate({**rec, "policy_generation": -1}) != []
    assert contracts.validate({**rec, "policy_generation": "7"}) != []


def test_ss_vectors_alone_lack_exactly_the_sampler_fields():
    rec = _jsonl("ss_tinHOe_iproute2-6.1.expected.jsonl")[0]
    missing = {e.removeprefix("missing required field ") for e in contracts.validate({**rec, "schema": "tcp_sample/1"})}
    assert missing == set(SAMPLER_FIELDS) - {"schema"}


def test_nginx_vectors_are_valid_http_requests_once_the_tailer_adds_host_fields():
    recs = _jsonl("nginx_ccab_json.expected.jsonl")
    assert len(recs) == 3
    for rec in recs:
        assert contracts.validate({**rec, **TAILER_FIELDS}) == []
    assert recs[1]["tcpinfo_rtt_us"] is None  # nullable fields stay null, never 0


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda r: r.update(schema="tcp_sample/9"), "unknown schema 'tcp_sample/9'"),
        (lambda r: r.update(cwnd="18"), "field cwnd: expected uint"),
        (lambda r: r.update(cwnd=-1), "field cwnd: expected uint"),
        (lambda r: r.update(cwnd=1.5), "field cwnd: expected uint"),
        (lambda r: r.update(app_limited=0), "field app_limited: expected bool"),
        (lambda r: r.update(host=5), "field host: expected string"),
        (lambda r: r.pop("mss"), "missing required field mss"),
        (lambda r: r.update(rtt_us=None), "missing required field rtt_us"),
    ],
)
def test_validate_names_what_is_wrong(mutate, reason):
    rec = {**_jsonl("ss_tinHOe_iproute2-6.1.expected.jsonl")[0], **SAMPLER_FIELDS}
    mutate(rec)
    errors = contracts.validate(rec)
    assert len(errors) == 1 and errors[0].startswith(reason), errors


def test_optional_fields_may_be_null_or_absent_and_extra_fields_are_allowed():
    rec = {**_jsonl("ss_tinHOe_iproute2-6.1.expected.jsonl")[2], **SAMPLER_FIELDS}
    rec["ssthresh"] = None
    rec.pop("lastack_ms", None)
    rec["some_future_field"] = 1
    assert contracts.validate(rec) == []


def test_not_an_object():
    assert contracts.validate([1, 2]) == ["not a JSON object (got list)"]


def _signed_vector() -> dict:
    return json.loads((VECTORS / "assignment_signed.json").read_text())


def test_assignment_canonical_bytes_match_the_vector_exactly():
    assert contracts.canonical_json(_signed_vector()) == (VECTORS / "assignment_canonical.txt").read_bytes().rstrip(b"\n")


def test_assignment_signature_verifies_with_the_test_key_and_tampering_is_detected():
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode((VECTORS / "test_ed25519_public.b64").read_text()))
    signed = _signed_vector()
    public.verify(base64.b64decode(signed["signature"]), contracts.canonical_json(signed))
    tampered = json.loads((VECTORS / "assignment_tampered.json").read_text())
    with pytest.raises(InvalidSignature):
        public.verify(base64.b64decode(tampered["signature"]), contracts.canonical_json(tampered))
    assert contracts.validate(signed) == [] and contracts.validate(tampered) == []  # shape is fine; the signature is not


def test_signing_with_the_test_seed_reproduces_the_vector_signature():
    seed = bytes.fromhex((VECTORS / "test_ed25519_seed.hex").read_text().strip())
    signed = _signed_vector()
    sig = Ed25519PrivateKey.from_private_bytes(seed).sign(contracts.canonical_json(signed))
    assert base64.b64encode(sig).decode() == signed["signature"]


def test_committed_landing_ddl_is_generated_from_the_contracts():
    assert LANDING_FILE.read_text() == contracts.landing_ddl(), "run `ccab db gen-landing`"


def test_every_schema_has_a_topic_and_table():
    assert {s.topic for s in contracts.SCHEMAS.values()} == {
        "ccab.tcp.v1", "ccab.tcp_conn.v1", "ccab.http.v1", "ccab.assignments.v1", "ccab.agent_status.v1"}
    assert {s.table for s in contracts.SCHEMAS.values()} == {"tcp_samples", "tcp_conns", "http_requests", "assignments",
                                                             "agent_status"}


def test_tcp_conn_vector_is_valid_and_its_fields_are_the_contracts():
    """The Go collector's tcp_conn/1 output for two real destroy events (kernel 6.18) is valid for
    the Python contract and carries exactly its fields (policy_generation is written only for a
    connection a socket policy decided: none of these)."""
    recs = _jsonl("tcp_conn_linux-6.18.expected.jsonl")
    assert recs
    for rec in recs:
        assert contracts.validate(rec) == [], rec
        # cc_impl and policy_generation are written only where the collector can tell (close
        # capture): not in this vector
        assert set(rec) == {f.name for f in contracts.TCP_CONN.fields} - {"cc_impl", "policy_generation"}
        assert contracts.validate({**rec, "cc_impl": "ccab-bpf"}) == []
        assert contracts.validate({**rec, "cc_impl": 2}) != []
        assert contracts.validate({**rec, "policy_generation": 7}) == []
        assert contracts.validate({**rec, "policy_generation": -1}) != []


def test_every_integer_fields_width_is_its_raw_columns(warehouse):
    """A value the raw column cannot hold would wrap in the landing view: the contract's width of
    each integer field (``uint32`` ...) must be the stored type's, so the landing refuses it."""
    from ccab.base.contracts import SCHEMAS

    for s in SCHEMAS.values():
        if s.name == "assignment/1":
            continue  # not stored by the loader's landing views
        types = dict(warehouse.query("SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                                     "AND table = {t:String}", params={"t": s.table}).rows)
        for f in s.fields:
            if f.kind in ("int", "uint") and f.name in types:
                stored = types[f.name].removeprefix("Nullable(").rstrip(")")
                assert stored == f"{'U' if f.kind == 'uint' else ''}Int{f.bits}", (s.name, f.name, stored)
