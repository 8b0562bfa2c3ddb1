"""API keys: generated strong, shown once, stored only as hashes, never logged."""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "tfk-"


def new_key() -> str:
    """A fresh key: 'tfk-' and 256 bits of randomness (URL-safe)."""
    return PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """What is stored and compared: sha256 of the key. Keys are random, so no salt is needed."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def redact(key: str) -> str:
    """For logs and errors: never the key, at most its first characters."""
    return key[:6] + "…" if key.startswith(PREFIX) else "…"
