"""Ed25519 signatures of ``assignment/1`` records (CONTRACTS.md): base64 of the signature over
``ccab.base.contracts.canonical_json(record)`` (the record without ``signature``, keys sorted, no
spaces, UTF-8).

Key files (``load_private_key`` / ``load_public_key`` accept each of these):
- private: 64 hex characters (the 32-byte seed, like ``vectors/test_ed25519_seed.hex``), or a PEM
  PKCS#8 private key;
- public: base64 of the raw 32 bytes (``vectors/test_ed25519_public.b64``), or a PEM public key.
``ccab rollout keygen`` writes a pair in the first form (seed file mode 0600).
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from ccab.base.contracts import canonical_json
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class KeyError_(ValueError):
    """A key file is missing or not in a format we read; the message names the file."""


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyError_(f"signing key {path}: cannot read: {exc.strerror or exc}") from None
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except ValueError as exc:
            raise KeyError_(f"signing key {path}: not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyError_(f"signing key {path}: not an Ed25519 key")
        return key
    try:
        seed = binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        raise KeyError_(f"signing key {path}: expected 64 hex characters (a 32-byte Ed25519 seed) or PEM") from None
    if len(seed) != 32:
        raise KeyError_(f"signing key {path}: seed is {len(seed)} bytes, expected 32")
    return Ed25519PrivateKey.from_private_bytes(seed)


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    path = Path(path)
    try:
        text = path.read_bytes().strip()
    except OSError as exc:
        raise KeyError_(f"public key {path}: cannot read: {exc.strerror or exc}") from None
    if text.startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(text)
        if not isinstance(key, Ed25519PublicKey):
            raise KeyError_(f"public key {path}: not an Ed25519 key")
        return key
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise KeyError_(f"public key {path}: expected base64 of 32 raw bytes or PEM") from None
    if len(raw) != 32:
        raise KeyError_(f"public key {path}: {len(raw)} bytes, expected 32")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_b64(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def sign(record: dict, key: Ed25519PrivateKey) -> dict:
    """A copy of ``record`` with ``signature`` set (any previous signature is replaced)."""
    out = {k: v for k, v in record.items() if k != "signature"}
    out["signature"] = base64.b64encode(key.sign(canonical_json(out))).decode()
    return out


def verify(record: dict, key: Ed25519PublicKey) -> str | None:
    """None when the signature is valid, else the reason it is not."""
    sig = record.get("signature")
    if not isinstance(sig, str) or not sig:
        return "unsigned"
    try:
        raw = base64.b64decode(sig, validate=True)
    except binascii.Error:
        return "signature is not base64"
    try:
        key.verify(raw, canonical_json(record))
    except InvalidSignature:
        return "bad signature"
    return None


def keygen(out_dir: str | Path, name: str = "rollout") -> tuple[Path, Path]:
    """Write ``<name>_ed25519_seed.hex`` (0600) and ``<name>_ed25519_public.b64`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())
    priv, pub = out / f"{name}_ed25519_seed.hex", out / f"{name}_ed25519_public.b64"
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(seed.hex() + "\n")
    pub.write_text(public_b64(key) + "\n")
    return priv, pub
