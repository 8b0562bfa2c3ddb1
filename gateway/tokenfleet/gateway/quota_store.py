"""Tenant quota reservations, shared by every gateway replica through Redis.

When Redis is unreachable the configured policy holds: fail-open serves with local limits (each
replica enforces its share, quota / expected replicas, in memory), fail-closed refuses with 503.
Either way the state is visible: :attr:`healthy` feeds /readyz and the
``tokenfleet_gateway_quota_backend_up`` gauge.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Literal

from tokenfleet.gateway import redis_client
from tokenfleet.gateway.policy import quotas
from tokenfleet.gateway.policy.rejections import Reason, Rejected

log = logging.getLogger("tokenfleet.gateway.quotas")

REDIS_TIMEOUT_SECONDS = 0.5  # a quota check must never hold a request longer than this
RETRY_REDIS_SECONDS = 2.0


@dataclasses.dataclass(slots=True)
class Reservation:
    """What a request took; settle it exactly once."""

    tenant: str
    limits: quotas.Limits
    tokens: int
    local: bool  # taken from the local fallback, not Redis
    settled: bool = False


class QuotaStore:
    def __init__(
        self, *, url: str | None, failure: Literal["open", "closed"], replicas: int
    ) -> None:
        self._redis = redis_client.RespClient(url, timeout=REDIS_TIMEOUT_SECONDS) if url else None
        self._script = redis_client.Script(self._redis, quotas.LUA) if self._redis else None
        self._failure = failure
        self._share = 1.0 / max(1, replicas)
        self._local: dict[str, quotas.Buckets] = {}
        self.healthy = True
        self._down_since = 0.0

    @property
    def shared(self) -> bool:
        return self._redis is not None

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.close()

    def _use_redis(self) -> bool:
        if self._redis is None:
            return False
        return self.healthy or time.monotonic() - self._down_since >= RETRY_REDIS_SECONDS

    def _mark(self, up: bool, error: Exception | None = None) -> None:
        if up and not self.healthy:
            log.info("quota backend is back: quotas are shared again")
        if not up and self.healthy:
            log.error("quota backend unreachable (%s): failing %s", error, self._failure)
        if not up:
            self._down_since = time.monotonic()
        self.healthy = up

    async def reserve(
        self, tenant: str, limits: quotas.Limits, tokens: int
    ) -> Reservation | Rejected:
        if limits == quotas.Limits():
            return Reservation(tenant=tenant, limits=limits, tokens=tokens, local=True)
        if self._use_redis():
            try:
                answer = await self._call("reserve", tenant, limits, tokens, 0)
            except (redis_client.RespError, OSError, TimeoutError) as exc:
                self._mark(False, exc)
            else:
                self._mark(True)
                ok, retry_ms, reason = int(answer[0]), int(answer[1]), answer[2]
                if ok:
                    return Reservation(tenant=tenant, limits=limits, tokens=tokens, local=False)
                return quotas.refusal(
                    reason.decode() if isinstance(reason, bytes) else str(reason),
                    retry_ms,
                    limits,
                    tokens,
                )
        if self._redis is not None and self._failure == "closed":
            return Rejected(
                reason=Reason.QUOTA_BACKEND_DOWN,
                retry_after=RETRY_REDIS_SECONDS,
                message="quota service unavailable; try again shortly",
            )
        local_limits = limits.scaled(self._share) if self._redis is not None else limits
        refused = self._local.setdefault(tenant, quotas.Buckets()).reserve(
            local_limits, tokens, time.time()
        )
        return refused or Reservation(tenant=tenant, limits=local_limits, tokens=tokens, local=True)

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """Refund the unused part of the reservation (or charge the excess); free the slot."""
        if reservation.settled:
            return
        reservation.settled = True
        if reservation.limits == quotas.Limits():
            return
        refund = reservation.tokens - used_tokens
        if reservation.local:
            self._local.setdefault(reservation.tenant, quotas.Buckets()).settle(
                reservation.limits, refund, time.time()
            )
            return
        try:
            await self._call("settle", reservation.tenant, reservation.limits, 0, refund)
        except (redis_client.RespError, OSError, TimeoutError) as exc:
            # The concurrency slot expires by TTL; token counts refill by themselves.
            self._mark(False, exc)

    async def _call(
        self, op: str, tenant: str, limits: quotas.Limits, tokens: int, refund: int
    ) -> Any:
        day, left = quotas.day_of(time.time())
        assert self._script is not None
        return await self._script(
            keys=quotas.keys(tenant, day), args=[op, tokens, refund, *limits.as_args(), left]
        )
