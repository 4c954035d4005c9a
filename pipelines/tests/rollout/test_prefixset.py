"""prefix_set/1 as the controller writes it: byte-identical to the contract vector the Go agent's
tests verify (contracts/vectors/prefix_set_chunks.jsonl), every chunk within the agents' record limit
on the wire, and the bounds refused with a message."""

from __future__ import annotations

import json

import pytest
from ccab.rollout import prefixset
from ccab.rollout.publish import wire
from ccab.rollout.signing import load_private_key, load_public_key
from paths import VECTORS


def _vector_set() -> list[str]:
    return [f"10.{i // 256}.{i % 256}.0/24" for i in range(1200)] + [f"2001:db8:{i:x}::/48" for i in range(100)]


def test_chunks_are_the_contract_vector():
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    recs = prefixset.chunks("access:mobile", 3, _vector_set(), key, 1763769600000)
    lines = (VECTORS / "prefix_set_chunks.jsonl").read_bytes().splitlines()
    assert [wire(r) for r in recs] == lines
    assert prefixset.digest(_vector_set()) == "46d0a557984b64e0f32606f7aa6e30c62b4fc4f10bc69e39e32f11971147975b"
    pub = load_public_key(VECTORS / "test_ed25519_public.b64")
    assert prefixset.assemble([json.loads(x) for x in lines], "access:mobile", 3, pub) == _vector_set()


def test_every_chunk_fits_the_record_limit_and_bounds_are_refused():
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    longest = [f"2001:db8:{i >> 16:x}:{i & 0xffff:x}:ffff:ffff:ffff:ffff/128" for i in range(3000)]
    recs = prefixset.chunks("country:JP", 1, longest, key, 0)
    assert len(recs) > 1 and all(len(wire(r)) <= 16384 for r in recs)
    assert [p for r in recs for p in r["prefixes"]] == longest
    with pytest.raises(prefixset.PrefixSetError, match="name 'a/b'"):
        prefixset.chunks("a/b", 1, ["10.0.0.0/8"], key, 0)  # '/' would break the key name/version/chunk
    with pytest.raises(prefixset.PrefixSetError, match="0 prefixes"):
        prefixset.chunks("x", 1, [], key, 0)


def test_a_prefix_set_refusal_is_not_read_as_a_bad_assignment_signature():
    from ccab.rollout.bus import refusal_cause

    # the agent's text for a tampered chunk (rollout/agent: resolveSet)
    reason = ("prefix set access:mobile version 3 refused: prefix set chunk forged or tampered: chunk 5: "
              "signature does not verify: record forged or tampered")
    assert refusal_cause(reason)[0] == "prefix set"
    assert refusal_cause("signature does not verify: record forged or tampered")[0] == "bad signature"
