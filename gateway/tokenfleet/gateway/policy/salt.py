"""vLLM's ``cache_salt``, derived server-side: prefix-cache isolation between tenants.

Requests share prefix-cache blocks only when prefix and salt match. A client that could choose
its salt could choose a victim's, so the gateway always overwrites it with an HMAC of the
tenant's identity (or of its shared group's name) under a secret only the gateways hold.
"""

from __future__ import annotations

import hashlib
import hmac


def cache_salt(*, secret: bytes, tenant: str, group: str = "") -> str:
    """The salt for a tenant; tenants of one named group share one."""
    identity = f"group:{group}" if group else f"tenant:{tenant}"
    return hmac.new(secret, identity.encode(), hashlib.sha256).hexdigest()[:32]
