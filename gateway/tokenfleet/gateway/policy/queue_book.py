"""One pool's queue book: who runs, who waits in what order, how fast the pool serves.

The gateway's queues (``tokenfleet.gateway.queues``) and the fleet simulator
(``tokenfleet.sim.pool``) keep this same book, so the simulator replays the gateway's
bookkeeping instead of a copy of it. The book is the state the admission core reads
(:meth:`QueueBook.load`); what to do with it stays in :mod:`tokenfleet.gateway.policy.admission`.
How fast the pool serves is its :class:`~tokenfleet.gateway.policy.service_meter.ServiceMeter`
half.

It is counting only: no I/O, no clock (``now`` is passed in), no randomness, no logging. Unlike
the decision cores it is updated in place, like :class:`~tokenfleet.gateway.policy.prefix.
PrefixIndex`: a request changes it three or four times, and copying it each time would cost
the simulator, which replays millions of requests, more than the rest of its bookkeeping.

Inside a class the tenants share fairly (:mod:`tokenfleet.gateway.policy.fairness`, a virtual
token counter): each tenant of a class has its own line in ticket order, and the class's head —
the waiter :func:`admission.next_up` starts next — is the front of the line whose tenant has the
lowest counter. Waiters that carry no tenant (``""``) share one line: plain first come first
served, which is what a shell gets when it turns fair queuing off. The live waiters sit in a dict
by ticket, so a waiter that leaves from the middle (its age or deadline passed, its client left)
costs O(1): its line drops it once it reaches the front. Finding a class's head looks at each of
its tenants' fronts once: O(active tenants).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from tokenfleet.gateway.policy import fairness
from tokenfleet.gateway.policy.admission import PoolLoad, Waiting
from tokenfleet.gateway.policy.service_meter import ServiceMeter

T = TypeVar("T")

#: Idle tenants' counters kept per class beyond the active ones before they are dropped
#: (:func:`fairness.forget`): bounded memory when many tenants come and go.
IDLE_COUNTERS = 64


class QueueBook(ServiceMeter, Generic[T]):
    """In-flight and queued requests per class, each class's head; and, as a
    :class:`ServiceMeter`, the service rate, hold time, mean work and prefill.

    Token work (:func:`admission.work`, a waiter's ``cost``) is counted beside requests: the
    work waiting per class here, the average work of a completed request in the meter, so
    admission counts a queue in average requests of work.

    ``T`` is what a waiter carries for its shell: a future in the gateway, the request in the
    simulator. ``classes`` may be given up front (the simulator: every lookup then finds its
    key); unknown classes start at zero.
    """

    def __init__(self, classes: Iterable[str] = (), *, now: float = 0.0) -> None:
        super().__init__(now=now)
        names = list(classes)
        self.in_flight: dict[str, int] = dict.fromkeys(names, 0)
        """Class → requests running."""
        self.queued: dict[str, int] = dict.fromkeys(names, 0)
        """Class → requests waiting (keys stay once a class has queued: gauges go back to 0)."""
        self.heads: dict[str, Waiting] = {}
        """Class → the waiter it starts next (the fair choice); absent while the class has none."""
        self.waiting: dict[str, dict[str, int]] = {}
        """Class → tenant → requests waiting (admission's estimate of a tenant's position)."""
        self.holding: dict[str, dict[str, int]] = {}
        """Class → tenant → requests running (for :func:`fairness.headroom`)."""
        self.seen: dict[str, dict[str, tuple[float, float]]] = {}
        """Class → tenant → (its last arrival, its share), for :func:`fairness.headroom`."""
        self.counters: dict[str, dict[str, float]] = {}
        """Class → tenant → virtual token counter (:mod:`~tokenfleet.gateway.policy.fairness`)."""
        self.waiting_work: dict[str, dict[str, float]] = {}  # class → tenant → counter units
        self.waiting_cost: dict[str, dict[str, float]] = {}  # … and token work, of its waiters
        self.queued_cost: dict[str, float] = dict.fromkeys(names, 0.0)
        """Class → token work waiting."""
        self._lines: dict[str, dict[str, collections.deque[Waiting]]] = {}
        self._active: dict[str, dict[str, int]] = {}  # class → tenant → waiting + running
        self._items: dict[int, T] = {}
        self._ticket = 0

    def load(self, capacity: int) -> PoolLoad:
        """The pool as the admission core sees it, for a pool of ``capacity`` slots.

        A view, not a copy: its counts follow the book. Read it before awaiting anything."""
        return PoolLoad(
            capacity=capacity,
            in_flight=self.in_flight,
            queued=self.queued,
            heads=self.heads,
            waiting=self.waiting,
            holding=self.holding,
            seen=self.seen,
            service_rate=self.rate_for(capacity),
            queued_cost=self.queued_cost,
            mean_cost=self.mean_cost,
            prefill=self.prefill,
            counters=self.counters,
            waiting_work=self.waiting_work,
            waiting_cost=self.waiting_cost,
        )

    def depth(self, cls: str) -> int:
        return self.queued.get(cls, 0)

    def oldest_age(self, cls: str, now: float) -> float:
        """Seconds the class's oldest waiter has waited (0 with nobody waiting)."""
        fronts = self.fronts(cls)
        return now - min(w.enqueued_at for w in fronts) if fronts else 0.0

    def fronts(self, cls: str) -> list[Waiting]:
        """The oldest live waiter of each tenant of ``cls`` (the class's head is one of them)."""
        return [line[0] for line in self._lines.get(cls, {}).values()]

    def start(
        self,
        cls: str,
        *,
        tenant: str = "",
        share: float = 1.0,
        work: float = 0.0,
        now: float | None = None,
    ) -> None:
        """An arriving request of ``cls`` takes a slot at once; ``tenant`` is charged ``work``
        (counter units, :func:`fairness.work`) divided by its ``share``; ``now`` (its arrival)
        marks the tenant present for headroom."""
        if now is not None:
            self._see(cls, tenant, share, now)
        self._arrive(cls, tenant)
        self._run(cls, tenant=tenant, share=share, work=work)

    def begin(self, entry: Waiting) -> T | None:
        """``entry`` leaves its line and takes a slot, charged as it was enqueued; its item, or
        None if it already left (nothing changes then)."""
        item = self._take(entry)
        if item is not None:
            self._run(entry.cls, tenant=entry.tenant, share=entry.share, work=entry.work)
        return item

    def _run(self, cls: str, *, tenant: str, share: float, work: float) -> None:
        self.in_flight[cls] = self.in_flight.get(cls, 0) + 1
        _count(self.holding.setdefault(cls, {}), tenant, 1)
        if work:
            self.counters[cls] = fairness.charge(
                self.counters.get(cls, {}), tenant=tenant, amount=work, share=share
            )
        if cls in self._lines:  # others wait: the charge may change who is next
            self._choose(cls)

    def release(
        self,
        cls: str,
        *,
        completed: bool = True,
        held_seconds: float | None = None,
        tenant: str = "",
        share: float = 1.0,
        correction: float = 0.0,
        cost: float | None = None,
        prefill: float | None = None,
    ) -> None:
        """A request of ``cls`` gives its slot back. ``correction`` (counter units, negative for
        a refund) settles ``tenant``'s charge to the work actually done; ``completed``,
        ``held_seconds``, ``cost`` and ``prefill`` go to the meter (:meth:`ServiceMeter.served`)."""
        self.in_flight[cls] = max(0, self.in_flight.get(cls, 0) - 1)
        holding = self.holding.get(cls)
        if holding and tenant in holding:
            _count(holding, tenant, -1)
        if correction:
            self.counters[cls] = fairness.charge(
                self.counters.get(cls, {}), tenant=tenant, amount=correction, share=share
            )
        self._leave(cls, tenant)
        self.served(completed=completed, held_seconds=held_seconds, cost=cost, prefill=prefill)

    def enqueue(
        self,
        item: T,
        *,
        cls: str,
        enqueued_at: float,
        deadline: float,
        tenant: str = "",
        share: float = 1.0,
        work: float = 0.0,
        cost: float = 1.0,
        patience: float = -1.0,
    ) -> Waiting:
        """``item`` waits at the back of its tenant's line in its class; its entry, for
        :meth:`begin` and :meth:`remove`. ``work`` and ``share`` are charged when it starts;
        ``cost`` (token work) counts in the class's queued work while it waits; ``patience``
        (seconds, :meth:`ClassPolicy.patience` as it queued) is how long it may."""
        self._ticket += 1
        entry = Waiting(
            ticket=self._ticket,
            cls=cls,
            enqueued_at=enqueued_at,
            deadline=deadline,
            tenant=tenant,
            share=share,
            work=work,
            cost=cost,
            patience=patience,
        )
        self.queued_cost[cls] = self.queued_cost.get(cls, 0.0) + cost
        self._see(cls, tenant, share, enqueued_at)
        self._arrive(cls, tenant)
        lines = self._lines.setdefault(cls, {})
        line = lines.get(tenant)
        if line is None:
            line = lines[tenant] = collections.deque()
        line.append(entry)
        self._items[entry.ticket] = item
        self.queued[cls] = self.queued.get(cls, 0) + 1
        _count(self.waiting.setdefault(cls, {}), tenant, 1)
        _add(self.waiting_work.setdefault(cls, {}), tenant, work)
        _add(self.waiting_cost.setdefault(cls, {}), tenant, cost)
        self._choose(cls)
        return entry

    def remove(self, entry: Waiting) -> T | None:
        """Take ``entry`` out of its line without starting it (expired or gone); None if it
        already left."""
        item = self._take(entry)
        if item is not None:
            self._leave(entry.cls, entry.tenant)
        return item

    def _take(self, entry: Waiting) -> T | None:
        """Out of the line; the tenant stays active (a start or :meth:`_leave` follows)."""
        ticket = entry.ticket
        if ticket not in self._items:
            return None
        item = self._items.pop(ticket)
        cls, tenant = entry.cls, entry.tenant
        self.queued[cls] -= 1
        # never below zero from float sums; exactly zero once the class has nobody waiting
        self.queued_cost[cls] = (
            max(0.0, self.queued_cost[cls] - entry.cost) if self.queued[cls] else 0.0
        )
        gone = _count(self.waiting[cls], tenant, -1)
        _add(self.waiting_work[cls], tenant, -entry.work, gone=gone)
        _add(self.waiting_cost[cls], tenant, -entry.cost, gone=gone)
        lines = self._lines[cls]
        if lines[tenant][0].ticket == ticket:
            _pop_front(lines, tenant, self._items)
        return item

    def _see(self, cls: str, tenant: str, share: float, now: float) -> None:
        seen = self.seen.setdefault(cls, {})
        seen[tenant] = (now, share)
        if len(seen) > len(self._active.get(cls, ())) + IDLE_COUNTERS:  # bounded memory
            for t in [t for t, (at, _) in seen.items() if now - at >= fairness.RECENT_SECONDS]:
                del seen[t]

    def _arrive(self, cls: str, tenant: str) -> None:
        """One more request of ``tenant`` waits or runs in ``cls``; a tenant idle there is lifted
        to the lowest active counter first (no banked credit)."""
        active = self._active.setdefault(cls, {})
        if tenant not in active:
            counters = self.counters.get(cls, {})
            self.counters[cls] = fairness.lift(counters, tenant=tenant, active=active)
        active[tenant] = active.get(tenant, 0) + 1

    def _leave(self, cls: str, tenant: str) -> None:
        """One of ``tenant``'s requests waits or runs no more; then pick the class's head."""
        active = self._active.get(cls)
        if not active or tenant not in active:  # a release without a start: nothing to undo
            self._choose(cls)
            return
        active[tenant] -= 1
        if active[tenant] <= 0:
            del active[tenant]
            counters = self.counters.get(cls, {})
            if not active:
                self.counters[cls] = {}  # everyone idle: nobody's history matters any more
            elif len(counters) > len(active) + IDLE_COUNTERS:
                self.counters[cls] = fairness.forget(counters, active=active)
        self._choose(cls)

    def _choose(self, cls: str) -> None:
        """The class's head: the front of the line whose tenant has the lowest counter."""
        lines = self._lines.get(cls)
        if not lines:
            if lines is not None:
                del self._lines[cls]
            self.heads.pop(cls, None)
            return
        fronts = [line[0] for line in lines.values()]
        head = fronts[0] if len(fronts) == 1 else fairness.pick(fronts, self.counters.get(cls, {}))
        assert head is not None  # fronts is not empty
        self.heads[cls] = head


def _pop_front(
    lines: dict[str, collections.deque[Waiting]], tenant: str, live: dict[int, Any]
) -> None:
    """Drop the front of ``tenant``'s line, then the waiters behind it that left from the middle
    earlier (no longer ``live``); a line left empty goes."""
    line = lines[tenant]
    line.popleft()
    while line and line[0].ticket not in live:
        line.popleft()
    if not line:
        del lines[tenant]


def _add(sums: dict[str, float], tenant: str, amount: float, *, gone: bool = False) -> None:
    """``tenant``'s waiting sum moves by ``amount``; never below zero from float sums, and
    exactly gone (no remainder) once it has nobody waiting."""
    if gone:
        sums.pop(tenant, None)
    else:
        sums[tenant] = max(0.0, sums.get(tenant, 0.0) + amount)


def _count(counts: dict[str, int], tenant: str, step: int) -> bool:
    """``tenant``'s count moves by ``step``; at zero it goes (True)."""
    n = counts.get(tenant, 0) + step
    if n:
        counts[tenant] = n
        return False
    counts.pop(tenant, None)
    return True
