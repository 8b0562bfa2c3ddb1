"""Step 4's token quota: the tenant's requests and tokens per minute, tokens per day and
concurrency, reserved for the request's worst case (prompt plus every sequence's
``max_tokens``; a cache hit reserves no tokens) in the quota store shared through Redis
(:mod:`..quota_store`, with its declared failure mode when Redis is down)."""

from __future__ import annotations

from collections.abc import Awaitable

from tokenfleet.gateway.policy import usage
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.quota_store import QuotaStore, Reservation
from tokenfleet.gateway.targets import Admitted


class Quota:
    """Reservations against the tenants' shared quotas."""

    def __init__(self, *, store: QuotaStore) -> None:
        self._store = store

    def reserve(self, admitted: Admitted, *, hit: bool) -> Awaitable[Reservation | Rejected]:
        """The request's reservation, or the quota's refusal; ``hit``: a cached answer (it
        takes no tokens). (The store's own coroutine, awaited by the caller: no frame between.)"""
        tenant, parsed = admitted.tenant, admitted.parsed
        tokens = usage.reservation(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=admitted.max_tokens,
            sequences=parsed.sequences,
        )
        return self._store.reserve(tenant.key, tenant.limits, 0 if hit else tokens)
