"""vLLM's ``cache_salt``, derived server-side: prefix-cache isolation between tenants.

Requests share prefix-cache blocks only when prefix and salt match. A client that could choose
its salt could choose a victim's, so the gateway always overwrites it with an HMAC of the
tenant's identity (or of its shared group's name) under a secret only the gateways hold.

A salt the caller sent is mixed in, never used as is: it can only split its own tenant's cache
further (vLLM's intended use, one salt per end user), never reach another tenant's. That is
also what keeps tenants apart at another TokenFleet gateway a route spills to: the spilling
gateway is one tenant there and sends each of its tenants' salts (policy.spill).
"""

from __future__ import annotations

import functools
import hashlib
import hmac


@functools.lru_cache(maxsize=4096)  # per request otherwise: two HMAC constructions each
def cache_salt(*, secret: bytes, tenant: str, group: str = "", caller: str = "") -> str:
    """The salt for a tenant; tenants of one named group share one; a caller's salt splits it."""
    identity = f"group:{group}" if group else f"tenant:{tenant}"
    if caller:
        identity += f"\x00caller:{caller}"
    return hmac.new(secret, identity.encode(), hashlib.sha256).hexdigest()[:32]
