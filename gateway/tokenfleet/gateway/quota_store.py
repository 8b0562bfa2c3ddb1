"""Tenant quota reservations, shared by every gateway replica through Redis.

Most requests do not wait for Redis: they are admitted from a lease, a small share of the
tenant's budget this replica took earlier (:mod:`~tokenfleet.gateway.policy.leases`, which
states the bound), and settle into it; a background task gives idle shares back. Requests the
lease cannot cover wait for its next grant: one at a time per lease, each asking for every
request waiting when it leaves, so a burst costs a round trip or two, not one per request.
Tenants whose concurrency limit is too small to lease (``leases.leasable``) reserve and settle
in Redis per request.

When Redis is unreachable the configured policy holds (the store's declared
:class:`~tokenfleet.gateway.redis_backend.Failure`): fail-open serves with local limits (each
gateway process enforces its share, quota / processes, in memory), fail-closed refuses with 503
— both once the lease in hand is spent. Either way the state is visible: the process's one
:class:`~tokenfleet.gateway.redis_backend.Backend` (shared with the budget, the response cache
and the usage ledger) feeds /readyz and the ``tokenfleet_gateway_quota_backend_up`` gauge, and
keeps its health current even when no request needs Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from tokenfleet.gateway import lease_grants, lease_returns, redis_backend, redis_client
from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.gateway.policy.rejections import Reason, Rejected

log = logging.getLogger("tokenfleet.gateway.quotas")

REDIS_TIMEOUT_SECONDS = redis_backend.TIMEOUT_SECONDS  # a quota check never holds longer
RETRY_REDIS_SECONDS = redis_backend.RETRY_SECONDS
HOUSEKEEPING_SECONDS = 0.5  # how often idle leases are given back

_T = TypeVar("_T")


@dataclasses.dataclass(slots=True)
class Reservation:
    """What a request took; settle it exactly once."""

    tenant: str
    limits: quotas.Limits
    tokens: int
    local: bool  # taken from the local fallback, not Redis
    settled: bool = False
    leased: bool = False  # admitted from this replica's lease: settles into it (and so does
    # its concurrency slot, if its limits count them: a leased request always drew one)


def failure_mode(failure: Literal["open", "closed"]) -> redis_backend.Failure:
    """The quota's (and the budget's) declared behaviour while Redis is down."""
    if failure == "closed":
        return redis_backend.Failure(
            store="quota", mode=redis_backend.Mode.CLOSED, effect="503 once the lease is spent"
        )
    return redis_backend.Failure(
        store="quota",
        mode=redis_backend.Mode.OPEN,
        effect="local limits, each process its share, once the lease is spent",
    )


class QuotaStore:
    def __init__(
        self,
        *,
        url: str | None = None,
        backend: redis_backend.Backend | None = None,
        failure: Literal["open", "closed"],
        replicas: int,
    ) -> None:
        """``backend``: the process's shared Redis (else one of its own on ``url``);
        ``replicas``: the gateway processes sharing the quotas (replicas × workers); each
        leases, and fails open, within 1 / ``replicas`` of every limit."""
        self._owns_backend = backend is None
        self._backend = backend or redis_backend.Backend(url)
        self.failure = self._backend.declare(failure_mode(failure))
        shared = self._backend.configured
        self._script = self._backend.script(quotas.LUA) if shared else None
        self._failure = failure
        self._share = 1.0 / max(1, replicas)
        self._lease_script = self._backend.script(quotas.LEASE_LUA) if shared else None
        self._local: dict[str, quotas.Buckets] = {}
        self._leases: dict[str, leases.Lease] = {}
        self._grants = lease_grants.GrantQueue(
            grant=self._grant, can_ask=self._use_redis, detach=self._detached
        )
        self._round_trips: set[asyncio.Task[Any]] = set()  # grants and give-backs under way
        self._returns = lease_returns.LeaseReturns(
            held=self._leases,
            script=lambda: self._lease_script,
            detached=self._detached,
            counted=self._count_call,
            failed=lambda exc: self._mark(False, exc),
        )
        self._housekeeping: asyncio.Task[None] | None = None
        self.calls = 0  # Redis round trips for quotas (the benchmark reads it)

    @property
    def shared(self) -> bool:
        return self._backend.configured

    @property
    def healthy(self) -> bool:
        """Whether Redis answered last (the process's one health state)."""
        return self._backend.healthy

    @property
    def _redis(self) -> redis_client.RespClient | None:
        """The backend's connection (tests cut it to see what a lost connection does)."""
        return self._backend.client

    def set_processes(self, processes: int) -> None:
        """The fleet's registry counted ``processes``: new grants and fail-open local limits
        are sized by the new share (what leases hold already stays theirs until given back)."""
        self._share = 1.0 / max(1, processes)
        for lease in self._leases.values():
            lease.share = self._share

    @property
    def share(self) -> float:
        """This process's part of every limit, for its leases and fail-open local limits."""
        return self._share

    async def close(self) -> None:
        """Give every lease back, then disconnect."""
        if self._round_trips:  # grants under way land first, so that they go back too
            await asyncio.wait(set(self._round_trips))
        if self._housekeeping is not None:  # after: a grant that lands starts it again
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        if self._round_trips:  # and the give-back it had under way ends
            await asyncio.wait(set(self._round_trips))
        await self._returns.pay_owed()
        await self._give_back(lambda _lease: True)
        if self._owns_backend:
            await self._backend.close()

    def _use_redis(self) -> bool:
        return self._backend.usable()

    def _mark(self, up: bool, error: Exception | None = None) -> None:
        if up:
            self._backend.answered()
        else:
            self._backend.failed(error or ConnectionError("redis failed"))

    async def reserve(
        self, tenant: str, limits: quotas.Limits, tokens: int
    ) -> Reservation | Rejected:
        if limits == quotas.Limits():
            return Reservation(tenant=tenant, limits=limits, tokens=tokens, local=True)
        if self._lease_script is not None and leases.leasable(limits, share=self._share):
            leased = await self._from_lease(tenant, limits, tokens)
            if leased is not None:
                return leased
        if self._use_redis():
            try:
                answer = await self._call("reserve", tenant, limits, tokens, 0)
            except redis_backend.ERRORS as exc:
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
        if self.shared and self._failure == "closed":
            return Rejected(
                reason=Reason.QUOTA_BACKEND_DOWN,
                retry_after=RETRY_REDIS_SECONDS,
                message="quota service unavailable; try again shortly",
            )
        local_limits = limits.scaled(self._share) if self.shared else limits
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
        if reservation.leased:
            # into the tenant's lease as it is now; its slot, still counted in Redis, becomes a
            # free slot of the lease
            lease = self._lease_of(reservation.tenant, reservation.limits)
            slot_of = reservation.limits if reservation.limits.max_concurrent is not None else None
            if lease.settle(refund, time.monotonic(), slot_of=slot_of):
                await self._returns.give(reservation.tenant, lease.limits, 0, 0, 1)
            return
        if reservation.local:
            self._local.setdefault(reservation.tenant, quotas.Buckets()).settle(
                reservation.limits, refund, time.time()
            )
            return
        try:
            await self._call("settle", reservation.tenant, reservation.limits, 0, refund)
        except redis_backend.ERRORS as exc:
            # The concurrency slot expires by TTL; token counts refill by themselves.
            self._mark(False, exc)

    async def _call(
        self, op: str, tenant: str, limits: quotas.Limits, tokens: int, refund: int
    ) -> Any:
        day, left = quotas.day_of(time.time())
        assert self._script is not None
        self._count_call()
        return await self._script(
            keys=quotas.keys(tenant, day), args=[op, tokens, refund, *limits.as_args(), left]
        )

    def _count_call(self) -> None:
        self.calls += 1

    def _lease_of(self, tenant: str, limits: quotas.Limits) -> leases.Lease:
        """The tenant's lease; one lease object per tenant for the replica's life (emptied, not
        dropped, when given back), so a grant or settlement that lands after a give-back still
        lands in the lease requests draw on."""
        return self._leases.setdefault(tenant, leases.Lease(limits=limits, share=self._share))

    async def _from_lease(
        self, tenant: str, limits: quotas.Limits, tokens: int
    ) -> Reservation | Rejected | None:
        """Admitted from the lease, or after waiting for its next grant; None when Redis cannot
        be asked (the caller's fallback decides) or the per-request path must."""
        if limits.tokens_per_minute is not None and tokens > limits.tokens_per_minute:
            return quotas.refusal("tokens_per_minute_too_small", -1, limits, tokens)
        lease = self._lease_of(tenant, limits)
        if lease.limits != limits:  # the tenant's limits changed: what it holds goes back first
            await self._give_back(lambda held: held is lease)
            if lease.holds():
                return None  # could not be given back: Redis is down
            lease.limits = limits
        if lease.take(tokens, time.monotonic()):
            return _leased(tenant, limits, tokens)
        if not self._use_redis():
            return None
        waiting = leases.Waiting(tokens=tokens, limits=limits)
        turn, refusal = await self._grants.wait(tenant, lease, waiting)
        if turn is leases.Turn.ADMITTED:
            return _leased(tenant, limits, tokens)
        if turn is leases.Turn.REFUSED and refusal is not None:
            return quotas.refusal(refusal.reason, refusal.retry_ms, limits, tokens)
        return None

    def _detached(self, round_trip: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """``round_trip`` in a task the store holds (not the request's: a cancelled request must
        not cut short a round trip that changes the shared counters)."""
        task = asyncio.get_running_loop().create_task(round_trip)
        self._round_trips.add(task)
        task.add_done_callback(self._round_trips.discard)
        return task

    async def _grant(
        self, tenant: str, lease: leases.Lease, asked: leases.Ask
    ) -> tuple[leases.Grant, lease_grants.Refusal | None]:
        """Ask Redis for ``asked`` and add what it granted to the lease; the refusal's reason
        if refused. Unanswered if Redis could not be reached or its answer was lost (not
        credited: see policy.leases), or the lease's limits changed meanwhile (the grant goes
        back)."""
        limits = lease.limits
        day, left = quotas.day_of(time.time())
        assert self._lease_script is not None
        self._count_call()
        try:
            answer = await self._lease_script(
                keys=quotas.keys(tenant, day),
                args=["lease", *asked.args(), *limits.as_args(), left],
            )
        except redis_backend.ERRORS as exc:
            self._mark(False, exc)
            return leases.Grant.UNANSWERED, None  # not credited, even if it may have run
        self._mark(True)
        self._start_housekeeping()
        if not int(answer[0]):
            reason = answer[2].decode() if isinstance(answer[2], bytes) else str(answer[2])
            return leases.Grant.REFUSED, lease_grants.Refusal(reason, int(answer[1]))
        got = int(answer[1]), int(answer[2]), int(answer[3])
        if lease.limits != limits:  # they changed while we asked: the grant goes back
            await self._returns.give(tenant, limits, *got)
            return leases.Grant.UNANSWERED, None
        lease.add(*got[:2], time.monotonic(), slots=got[2])
        return leases.Grant.GRANTED, None

    def _start_housekeeping(self) -> None:
        if self._housekeeping is None or self._housekeeping.done():
            self._housekeeping = asyncio.create_task(self._keep_house())

    async def _keep_house(self) -> None:
        """Give idle leases back, and free slots beyond a lease's cap (the backend keeps
        Redis's health current by itself)."""
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            now = time.monotonic()
            await self._returns.pay_owed()
            await self._give_back(functools.partial(leases.Lease.due, now=now))

    async def _give_back(self, due: Callable[[leases.Lease], bool]) -> None:
        """Give back what the leases ``due`` picks hold unspent (:mod:`.lease_returns`)."""
        await self._returns.give_back(due)


def _leased(tenant: str, limits: quotas.Limits, tokens: int) -> Reservation:
    reservation = Reservation(tenant=tenant, limits=limits, tokens=tokens, local=False)
    reservation.leased = True
    return reservation
