"""Signed, versioned prefix sets (``prefix_set/1``, contracts/CONTRACTS.md): a segment's CIDRs that
do not fit one 16 KiB assignment record, published as signed chunks on the compacted topic
``ccab.prefix_sets.v1`` (key ``name/version/chunk``) and named by an ``assignment/3`` policy as
``{name, version, sha256}``.

- :func:`content` / :func:`digest`: the canonical content (each prefix and ``"\\n"``, in the set's
  order) and its sha256, which the agent recomputes from the assembled chunks.
- :func:`chunks`: the signed chunk records of one version, each at most ``ASSIGNMENT_MAX_BYTES``.
- :func:`assemble`: the reverse (what the agent does, in Go: rollout/prefixset), for reading a
  set back and for tests; :func:`versions`: the versions of a name on the topic.
"""

from __future__ import annotations

import hashlib
import re

from ccab.base.contracts import ASSIGNMENT_MAX_BYTES, PREFIX_SET_SCHEMA
from ccab.rollout.publish import wire
from ccab.rollout.signing import sign, verify

#: the most prefixes one set holds: the agent's policy trie (rollout/sockpolicy MaxPrefixes)
MAX_PREFIXES = 1 << 20
#: the most chunks one set has, and the most bytes of its canonical content
MAX_CHUNKS = 4096
MAX_CONTENT_BYTES = 48 << 20
NAME_RE = re.compile(r"[A-Za-z0-9:._,+-]{1,200}")


class PrefixSetError(ValueError):
    """A set that cannot be built, or chunks that do not assemble; the message says why."""


def content(prefixes: list[str]) -> bytes:
    return "".join(p + "\n" for p in prefixes).encode()


def digest(prefixes: list[str]) -> str:
    return hashlib.sha256(content(prefixes)).hexdigest()


def key(name: str, version: int, chunk: int) -> str:
    return f"{name}/{version}/{chunk}"


def chunks(name: str, version: int, prefixes: list[str], private_key, issued_at_ms: int) -> list[dict]:
    """The signed ``prefix_set/1`` records of ``name`` at ``version``: ``prefixes`` in order, cut
    into chunks that each stay within the agents' record limit."""
    if not NAME_RE.fullmatch(name):
        raise PrefixSetError(f"prefix set name {name!r}: want [A-Za-z0-9:._,+-], 1 to 200 characters")
    if not prefixes or len(prefixes) > MAX_PREFIXES:
        raise PrefixSetError(f"prefix set {name}: {len(prefixes)} prefixes, want 1 to {MAX_PREFIXES}")
    if len(content(prefixes)) > MAX_CONTENT_BYTES:
        raise PrefixSetError(f"prefix set {name}: content over {MAX_CONTENT_BYTES} bytes")
    sha = digest(prefixes)
    head = {"schema": PREFIX_SET_SCHEMA, "name": name, "version": version, "sha256": sha,
            "prefixes_total": len(prefixes), "chunk": MAX_CHUNKS - 1, "chunks": MAX_CHUNKS,
            "issued_at_ms": issued_at_ms, "prefixes": [],
            "signature": "A" * 86 + "=="}  # an Ed25519 signature in base64 is 88 characters
    room = ASSIGNMENT_MAX_BYTES - len(wire(head)) - 64  # the prefixes' room, with a margin
    parts: list[list[str]] = [[]]
    used = 0
    for p in prefixes:
        cost = len(p) + 3  # the quotes and the comma
        if parts[-1] and used + cost > room:
            parts.append([])
            used = 0
        parts[-1].append(p)
        used += cost
    if len(parts) > MAX_CHUNKS:
        raise PrefixSetError(f"prefix set {name}: {len(parts)} chunks, at most {MAX_CHUNKS}")
    out = []
    for i, part in enumerate(parts):
        rec = {**head, "chunk": i, "chunks": len(parts), "prefixes": part}
        del rec["signature"]
        signed = sign(rec, private_key)
        if len(wire(signed)) > ASSIGNMENT_MAX_BYTES:
            raise PrefixSetError(f"prefix set {name}: chunk {i} is {len(wire(signed))} bytes, over the agents' "
                                 f"{ASSIGNMENT_MAX_BYTES}-byte limit")
        out.append(signed)
    return out


def assemble(records: list[dict], name: str, version: int, public_key) -> list[str]:
    """The prefixes of ``name`` at ``version`` from chunk records (others are skipped; a later
    record of the same chunk wins), verified: every chunk signed, none missing, one sha256 that
    the assembled content has. Raises :class:`PrefixSetError`."""
    mine: dict[int, dict] = {}
    for r in records:
        if r.get("schema") == PREFIX_SET_SCHEMA and r.get("name") == name and r.get("version") == version:
            why = verify(r, public_key)
            if why:
                raise PrefixSetError(f"prefix set {name} version {version} chunk {r.get('chunk')}: {why}")
            mine[int(r["chunk"])] = r
    if not mine:
        raise PrefixSetError(f"prefix set {name} version {version}: no chunk")
    first = next(iter(mine.values()))
    n, sha = int(first["chunks"]), first["sha256"]
    if any(r["chunks"] != n or r["sha256"] != sha for r in mine.values()):
        raise PrefixSetError(f"prefix set {name} version {version}: chunks disagree on sha256 or count")
    if len(mine) != n:
        raise PrefixSetError(f"prefix set {name} version {version}: {len(mine)} of {n} chunks")
    prefixes = [p for i in range(n) for p in mine[i]["prefixes"]]
    if digest(prefixes) != sha:
        raise PrefixSetError(f"prefix set {name} version {version}: content does not match its sha256")
    return prefixes


def versions(records: list[dict], name: str, public_key) -> dict[int, str]:
    """version -> sha256 of the complete, validly signed versions of ``name`` among ``records``."""
    out = {}
    for v in {r.get("version") for r in records if r.get("schema") == PREFIX_SET_SCHEMA and r.get("name") == name}:
        if isinstance(v, int):
            try:
                out[v] = digest(assemble(records, name, v, public_key))
            except PrefixSetError:
                pass
    return out
