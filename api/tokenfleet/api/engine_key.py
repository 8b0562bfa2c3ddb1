"""One engine key per namespace, derived from the installation's (pure).

Engines serve behind vLLM's ``--api-key`` (docs/security.md). Were every pool's Secret a copy
of the installation's key, a namespace admin who reads their pool's copy could call every
namespace's engines wherever NetworkPolicy is not enforced. So each namespace gets its own:
the operator writes :func:`derive` of the pool's namespace into the pool's Secret, and the
gateway, which holds the installation's key, sends the key derived for the namespace of the
endpoint it calls. Knowing one namespace's key tells nothing about another's, nor about the
installation's key (HMAC-SHA256 is a pseudo-random function of the key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

#: Domain separation: a derived engine key is never equal to another MAC TokenFleet may compute
#: with the same installation key; the version lets a future scheme coexist during a rollover.
CONTEXT = b"tokenfleet.io/engine-key/v1\x00"


def derive(installation_key: str, namespace: str) -> str:
    """The key ``namespace``'s engines and adapter sidecars serve behind: HMAC-SHA256 of the
    namespace under the installation's key, URL-safe base64 without padding — 43 characters of
    ``[A-Za-z0-9_-]``, a valid RFC 6750 bearer token and environment value. "" when there is no
    installation key (engines without ``--api-key``)."""
    if not installation_key:
        return ""
    mac = hmac.new(installation_key.encode(), CONTEXT + namespace.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode("ascii")


def fingerprint(key: str) -> str:
    """A key's fingerprint for a pod template (labels.ENGINE_KEY_FINGERPRINT): the first 16
    hex digits of its SHA-256 — a new key changes it, and it tells nothing of a random key."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]
