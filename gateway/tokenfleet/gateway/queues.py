"""The admission shell: per-pool queues of waiting requests, driven by the pure core.

A request either starts at once, waits on a future until a slot frees (or it expires), or is
refused. Every state change goes through :mod:`tokenfleet.gateway.policy.admission`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Mapping

from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.policy.admission import ClassPolicy, PoolLoad, Waiting
from tokenfleet.gateway.policy.rejections import Reason, Rejected


@dataclasses.dataclass(slots=True)
class _Waiter:
    entry: Waiting
    future: asyncio.Future[Rejected | None]


class PoolQueue:
    """In-flight counts and waiters of one pool in this gateway process."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.in_flight: dict[str, int] = {}
        # class → its waiters by ticket, oldest first: the load view stays O(classes).
        self.waiting: dict[str, dict[int, _Waiter]] = {}
        self.service_rate = 0.0
        self._completions = 0
        self._rate_at = time.monotonic()

    def load(self, capacity: int) -> PoolLoad:
        return PoolLoad(
            capacity=capacity,
            in_flight=dict(self.in_flight),
            queued={c: len(ws) for c, ws in self.waiting.items() if ws},
            heads={c: next(iter(ws.values())).entry for c, ws in self.waiting.items() if ws},
            service_rate=self.service_rate,
        )

    def depth(self, cls: str) -> int:
        return len(self.waiting.get(cls, ()))

    def oldest_age(self, cls: str, now: float) -> float:
        waiters = self.waiting.get(cls)
        return now - next(iter(waiters.values())).entry.enqueued_at if waiters else 0.0

    def add(self, waiter: _Waiter) -> None:
        self.waiting.setdefault(waiter.entry.cls, {})[waiter.entry.ticket] = waiter

    def remove(self, entry: Waiting) -> _Waiter | None:
        return self.waiting.get(entry.cls, {}).pop(entry.ticket, None)

    def record_completion(self) -> None:
        self._completions += 1
        now = time.monotonic()
        if now - self._rate_at >= 1.0:
            self.service_rate = admission.ewma_rate(
                self.service_rate, self._completions, now - self._rate_at
            )
            self._completions, self._rate_at = 0, now


def _granted(future: asyncio.Future[Rejected | None]) -> bool:
    return future.done() and not future.cancelled() and future.result() is None


class Admitter:
    """All pools' queues in this process."""

    def __init__(self) -> None:
        self.pools: dict[str, PoolQueue] = {}
        self._tickets = itertools.count(1)

    def queue(self, pool: str) -> PoolQueue:
        q = self.pools.get(pool)
        if q is None:  # not setdefault: that would build a PoolQueue on every call
            q = self.pools[pool] = PoolQueue(pool)
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
            q.in_flight[cls] = q.in_flight.get(cls, 0) + 1
            return None
        entry = Waiting(ticket=next(self._tickets), cls=cls, enqueued_at=now, deadline=deadline)
        waiter = _Waiter(entry=entry, future=asyncio.get_running_loop().create_future())
        q.add(waiter)
        limit = min(deadline, now + policies[cls].max_queue_age) - now
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout=max(0.0, limit))
        except TimeoutError:
            if _granted(waiter.future):
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
            if _granted(waiter.future):  # given a slot, but the client left: hand it on
                self.release(pool=pool, policies=policies, capacity=capacity, cls=cls)
            raise
        finally:
            q.remove(entry)
            if not waiter.future.done():
                waiter.future.cancel()

    def release(
        self, *, pool: str, policies: Mapping[str, ClassPolicy], capacity: int, cls: str
    ) -> None:
        """A request finished: free its slot and start whoever is next."""
        q = self.queue(pool)
        q.in_flight[cls] = max(0, q.in_flight.get(cls, 0) - 1)
        q.record_completion()
        self.wake(pool=pool, policies=policies, capacity=capacity)

    def wake(self, *, pool: str, policies: Mapping[str, ClassPolicy], capacity: int) -> None:
        """Start waiters while slots are free (after a release or when capacity grows)."""
        q = self.queue(pool)
        while True:
            chosen = admission.next_up(policies=policies, load=q.load(capacity))
            if chosen is None:
                return
            waiter = q.remove(chosen)
            if waiter is None:
                return  # cannot happen: heads come from the same dicts
            if waiter.future.done():
                continue
            q.in_flight[chosen.cls] = q.in_flight.get(chosen.cls, 0) + 1
            waiter.future.set_result(None)
