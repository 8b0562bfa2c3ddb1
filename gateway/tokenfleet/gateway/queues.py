"""The admission shell: per-pool queues of waiting requests, driven by the pure core.

A request either starts at once, waits on a future until a slot frees (or it expires), or is
refused. Every decision is :mod:`tokenfleet.gateway.policy.admission`'s; the counts it reads
are a :class:`~tokenfleet.gateway.policy.ledger.Ledger` per pool, the one the simulator keeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TypeAlias

from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.policy.admission import ClassPolicy
from tokenfleet.gateway.policy.ledger import Ledger
from tokenfleet.gateway.policy.rejections import Reason, Rejected

#: One pool's ledger here: each waiter carries the future its request awaits.
PoolQueue: TypeAlias = "Ledger[asyncio.Future[Rejected | None]]"


def _granted(future: asyncio.Future[Rejected | None]) -> bool:
    return future.done() and not future.cancelled() and future.result() is None


class Admitter:
    """All pools' queues in this process."""

    def __init__(self) -> None:
        self.pools: dict[str, PoolQueue] = {}

    def queue(self, pool: str) -> PoolQueue:
        q = self.pools.get(pool)
        if q is None:  # not setdefault: that would build a ledger on every call
            q = self.pools[pool] = Ledger(now=time.monotonic())
        return q

    async def acquire(
        self,
        *,
        pool: str,
        policies: Mapping[str, ClassPolicy],
        capacity: int,
        cls: str,
        deadline: float,
    ) -> Rejected | None:
        """Wait for a slot; None once the request may run (then call :meth:`release`)."""
        q = self.queue(pool)
        now = time.monotonic()
        if capacity <= 0:
            return Rejected(
                reason=Reason.NO_ENDPOINTS,
                retry_after=5.0,
                message="no ready replica serves this model right now",
            )
        decision = admission.admit(
            policies=policies, load=q.load(capacity), cls=cls, now=now, deadline=deadline
        )
        if isinstance(decision, Rejected):
            return decision
        if isinstance(decision, admission.Start):
            q.start(cls)
            return None
        future: asyncio.Future[Rejected | None] = asyncio.get_running_loop().create_future()
        entry = q.enqueue(future, cls=cls, enqueued_at=now, deadline=deadline)
        limit = min(deadline, now + policies[cls].max_queue_age) - now
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(0.0, limit))
        except TimeoutError:
            if _granted(future):
                return None  # a slot came at the last moment: it is ours
            if time.monotonic() >= deadline:
                return Rejected(
                    reason=Reason.DEADLINE_EXCEEDED,
                    message="the request's deadline passed while it waited",
                )
            return Rejected(
                reason=Reason.QUEUE_TIMEOUT,
                retry_after=1.0,
                message=f"waited {limit:.1f} s in the {cls} queue without a free replica; shed",
            )
        except asyncio.CancelledError:
            if _granted(future):  # given a slot, but the client left: hand it on
                self.release(pool=pool, policies=policies, capacity=capacity, cls=cls)
            raise
        finally:
            q.remove(entry)
            if not future.done():
                future.cancel()

    def release(
        self,
        *,
        pool: str,
        policies: Mapping[str, ClassPolicy],
        capacity: int,
        cls: str,
        held_seconds: float | None = None,
    ) -> None:
        """A request finished after holding its slot ``held_seconds``: free the slot and start
        whoever is next."""
        q = self.queue(pool)
        q.release(cls, held_seconds=held_seconds)
        q.measure_at(time.monotonic())
        self.wake(pool=pool, policies=policies, capacity=capacity)

    def wake(self, *, pool: str, policies: Mapping[str, ClassPolicy], capacity: int) -> None:
        """Start waiters while slots are free (after a release or when capacity grows)."""
        q = self.queue(pool)
        while True:
            chosen = admission.next_up(policies=policies, load=q.load(capacity))
            if chosen is None:
                return
            future = q.remove(chosen)
            if future is None:
                return  # cannot happen: heads come from the same ledger
            if future.done():
                continue
            q.start(chosen.cls)
            future.set_result(None)
