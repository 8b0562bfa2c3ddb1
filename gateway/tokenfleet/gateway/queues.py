"""The admission shell: per-pool queues of waiting requests, driven by the pure core.

A request either starts at once, waits on a future until a slot frees (or it expires), or is
refused. Every decision is :mod:`tokenfleet.gateway.policy.admission`'s; the counts it reads
are a :class:`~tokenfleet.gateway.policy.queue_book.QueueBook` per pool, the one the simulator
keeps. Inside a class the book shares the slots fairly among tenants by token work (a
:class:`Fair` per request says who pays how much); a request without one queues first come
first served.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Mapping
from typing import TypeAlias

from tokenfleet.gateway.catalog import Tenant
from tokenfleet.gateway.policy import admission, fairness
from tokenfleet.gateway.policy.admission import ClassPolicy
from tokenfleet.gateway.policy.queue_book import QueueBook
from tokenfleet.gateway.policy.rejections import Reason, Rejected

#: One pool's queue book here: each waiter carries the future its request awaits.
PoolQueue: TypeAlias = "QueueBook[asyncio.Future[Rejected | None]]"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fair:
    """Who a request's slot is charged to, in its class's fair queue."""

    tenant: str = ""  # "" for every request: first come first served
    share: float = 1.0  # Tenant.spec.share
    work: float = 0.0  # counter units charged at start: prompt + reserved output (fairness.work)

    @classmethod
    def of(cls, tenant: Tenant | None, *, prompt_tokens: int, max_tokens: int) -> Fair:
        """A request of ``tenant`` charged its prompt and its reserved output; first come first
        served (:data:`FIFO`) without a tenant (fair queuing turned off)."""
        if tenant is None:
            return FIFO
        work = fairness.work(prompt_tokens=prompt_tokens, output_tokens=max_tokens)
        return cls(tenant=tenant.key, share=tenant.share, work=work)

    def settle(self, produced: int, *, reserved: int) -> float:
        """The charge's correction once the output is known: a refund for what was not made."""
        if self.work == 0:
            return 0.0
        return fairness.work(prompt_tokens=0, output_tokens=produced - reserved)


FIFO = Fair()


def _granted(future: asyncio.Future[Rejected | None]) -> bool:
    return future.done() and not future.cancelled() and future.result() is None


class Admitter:
    """All pools' queues in this process."""

    def __init__(self, *, seed: int = 0) -> None:
        self.pools: dict[str, PoolQueue] = {}
        self.rng = random.Random(seed)  # graded shedding's draws: seeded, so a run replays

    def queue(self, pool: str) -> PoolQueue:
        q = self.pools.get(pool)
        if q is None:  # not setdefault: that would build a book on every call
            q = self.pools[pool] = QueueBook(now=time.monotonic())
        return q

    async def acquire(
        self,
        *,
        pool: str,
        policies: Mapping[str, ClassPolicy],
        capacity: int,
        cls: str,
        deadline: float,
        fair: Fair = FIFO,
        cost: float = 1.0,
    ) -> Rejected | None:
        """Wait for a slot; None once the request may run (then call :meth:`release` with the
        same ``fair`` and ``cost``, its token work: :func:`admission.work`)."""
        q = self.queue(pool)
        now = time.monotonic()
        if capacity <= 0:
            return Rejected(
                reason=Reason.NO_ENDPOINTS,
                retry_after=5.0,
                message="no ready replica serves this model right now",
            )
        decision = admission.admit(
            policies=policies,
            load=q.load(capacity),
            cls=cls,
            now=now,
            deadline=deadline,
            tenant=fair.tenant,
            draw=self.rng.random(),
            fair_work=fair.work,
            tenant_share=fair.share,
            cost=cost,
        )
        if isinstance(decision, Rejected):
            return decision
        if isinstance(decision, admission.Start):
            q.start(cls, tenant=fair.tenant, share=fair.share, work=fair.work, now=now)
            return None
        future: asyncio.Future[Rejected | None] = asyncio.get_running_loop().create_future()
        patience = decision.patience  # the core's, fixed now: the shell holds the waiter to it
        entry = q.enqueue(
            future,
            cls=cls,
            enqueued_at=now,
            deadline=deadline,
            tenant=fair.tenant,
            share=fair.share,
            work=fair.work,
            cost=cost,
            patience=patience,
        )
        # its tenant may be the class's fair choice at once (behind a flood's queue, in the
        # slot the flood's headroom keeps free): admission counted the queue, not the turn
        self.wake(pool=pool, policies=policies, capacity=capacity)
        self.displace(pool=pool, policies=policies, capacity=capacity, by=cls)
        limit = min(deadline, now + patience) - now
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
            if _granted(future):  # given a slot, but the client left: hand it on, unpaid
                self.release(
                    pool=pool,
                    policies=policies,
                    capacity=capacity,
                    cls=cls,
                    fair=fair,
                    correction=-fair.work,
                    completed=False,  # handed back unused: not a completion in the rate
                )
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
        fair: Fair = FIFO,
        correction: float = 0.0,
        completed: bool = True,
        cost: float | None = None,
        prefill: float | None = None,
    ) -> None:
        """A request finished after holding its slot ``held_seconds``: free the slot, settle
        its tenant's charge by ``correction`` (counter units) and start whoever is next.
        ``cost`` (its token work) and ``prefill`` (seconds from its slot to its first token)
        feed the admission estimates."""
        q = self.queue(pool)
        q.release(
            cls,
            held_seconds=held_seconds,
            tenant=fair.tenant,
            share=fair.share,
            correction=correction,
            completed=completed,
            cost=cost,
            prefill=prefill,
        )
        q.measure_at(time.monotonic())
        self.wake(pool=pool, policies=policies, capacity=capacity)

    def displace(
        self, *, pool: str, policies: Mapping[str, ClassPolicy], capacity: int, by: str
    ) -> None:
        """Refuse now the lower classes' waiters a request of class ``by`` queued ahead of
        and put out of reach (:func:`admission.displaced`), instead of at their limit."""
        q = self.queue(pool)
        now = time.monotonic()
        while True:
            fronts = [w for c in list(q.heads) for w in q.fronts(c)]
            gone = admission.displaced(
                policies=policies, load=q.load(capacity), fronts=fronts, by=by, now=now
            )
            if not gone:
                return
            for waiter, why in gone:
                future = q.remove(waiter)
                if future is not None and not future.done():
                    future.set_result(why)

    def wake(self, *, pool: str, policies: Mapping[str, ClassPolicy], capacity: int) -> None:
        """Start waiters while slots are free (after a release or when capacity grows)."""
        q = self.queue(pool)
        while True:
            chosen = admission.next_up(
                policies=policies, load=q.load(capacity), now=time.monotonic()
            )
            if chosen is None:
                return
            future = q.begin(chosen)
            if future is None:
                return  # cannot happen: heads come from the same book
            if future.done():  # its waiter is gone: give the slot back unpaid
                q.release(
                    chosen.cls,
                    completed=False,
                    tenant=chosen.tenant,
                    share=chosen.share,
                    correction=-chosen.work,
                )
                continue
            future.set_result(None)
