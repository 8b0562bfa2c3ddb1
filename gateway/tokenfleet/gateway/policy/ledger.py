"""One pool's admission bookkeeping: who runs, who waits in what order, how fast the pool serves.

The gateway's queues (``tokenfleet.gateway.queues``) and the fleet simulator
(``tokenfleet.sim.pool``) keep this same ledger, so the simulator replays the gateway's
bookkeeping instead of a copy of it. The ledger is the state the admission core reads
(:meth:`Ledger.load`); what to do with it stays in :mod:`tokenfleet.gateway.policy.admission`.

It is counting only: no I/O, no clock (``now`` is passed in), no randomness, no logging. Unlike
the decision cores it is updated in place, like :class:`~tokenfleet.gateway.policy.prefix.
PrefixIndex`: a request changes it three or four times, and copying it each time would cost
the simulator, which replays millions of requests, more than the rest of its bookkeeping.

Each class is first come first served. Its waiters sit in a line in ticket order, and the live
ones in a dict by ticket, so a waiter that leaves from the middle (its age or deadline passed,
its client left) costs O(1): the line drops it once it reaches the front.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Generic, TypeVar

from tokenfleet.gateway.policy.admission import PoolLoad, Waiting, ewma_rate

T = TypeVar("T")

#: Seconds between service-rate measurements when they are taken at completions (the gateway):
#: shorter windows make the average jump with every burst of completions.
RATE_WINDOW = 1.0
#: Weight of the newest request in the average time a request holds its slot.
HOLD_WEIGHT = 0.2


class Ledger(Generic[T]):
    """In-flight and queued requests per class, each class's head, and the service rate.

    ``T`` is what a waiter carries for its shell: a future in the gateway, the request in the
    simulator. ``classes`` may be given up front (the simulator: every lookup then finds its
    key); unknown classes start at zero.
    """

    def __init__(self, classes: Iterable[str] = (), *, now: float = 0.0) -> None:
        names = list(classes)
        self.in_flight: dict[str, int] = dict.fromkeys(names, 0)
        """Class → requests running."""
        self.queued: dict[str, int] = dict.fromkeys(names, 0)
        """Class → requests waiting (keys stay once a class has queued: gauges go back to 0)."""
        self.heads: dict[str, Waiting] = {}
        """Class → its oldest live waiter; absent while the class has none."""
        self.service_rate = 0.0
        """Completions per second, exponentially weighted (:func:`admission.ewma_rate`)."""
        self.hold_seconds = 0.0
        """Seconds a completed request held its slot, exponentially weighted (0 until one did)."""
        self.completions = 0
        """Completions since the last measurement."""
        self.rate_at = now
        """When the rate was last measured (seconds on the caller's clock)."""
        self._lines: dict[str, collections.deque[Waiting]] = {}
        self._items: dict[int, T] = {}
        self._ticket = 0

    def load(self, capacity: int) -> PoolLoad:
        """The pool as the admission core sees it, for a pool of ``capacity`` slots.

        A view, not a copy: its counts follow the ledger. Read it before awaiting anything."""
        return PoolLoad(
            capacity=capacity,
            in_flight=self.in_flight,
            queued=self.queued,
            heads=self.heads,
            service_rate=self.rate_for(capacity),
        )

    def rate_for(self, capacity: int) -> float:
        """Requests per second ``capacity`` slots serve: the measured completion rate, or the
        rate the slots sustain by Little's law (capacity / hold time), whichever is higher.

        Completions per second measure demand while the pool is not saturated: after a quiet
        minute one completion reads as one request a minute, and a burst would be refused as
        unmeetable though every slot frees in a second. Hold time does not decay with idleness."""
        sustained = capacity / self.hold_seconds if self.hold_seconds > 0 else 0.0
        return max(self.service_rate, sustained)

    def depth(self, cls: str) -> int:
        return self.queued.get(cls, 0)

    def oldest_age(self, cls: str, now: float) -> float:
        """Seconds the class's oldest waiter has waited (0 with nobody waiting)."""
        head = self.heads.get(cls)
        return now - head.enqueued_at if head is not None else 0.0

    def start(self, cls: str) -> None:
        """A request of ``cls`` takes a slot."""
        self.in_flight[cls] = self.in_flight.get(cls, 0) + 1

    def release(
        self, cls: str, *, completed: bool = True, held_seconds: float | None = None
    ) -> None:
        """A request of ``cls`` gives its slot back; ``completed`` counts it in the rate and its
        ``held_seconds`` (how long it held the slot) in the hold time."""
        self.in_flight[cls] = max(0, self.in_flight.get(cls, 0) - 1)
        if completed:
            self.completions += 1
            if held_seconds is not None and held_seconds > 0:
                previous = self.hold_seconds
                self.hold_seconds = (
                    held_seconds
                    if previous <= 0
                    else previous + HOLD_WEIGHT * (held_seconds - previous)
                )

    def enqueue(self, item: T, *, cls: str, enqueued_at: float, deadline: float) -> Waiting:
        """``item`` waits at the back of its class's line; its entry, for :meth:`remove`."""
        self._ticket += 1
        entry = Waiting(ticket=self._ticket, cls=cls, enqueued_at=enqueued_at, deadline=deadline)
        line = self._lines.get(cls)
        if line is None:
            line = self._lines[cls] = collections.deque()
        line.append(entry)
        self._items[entry.ticket] = item
        self.queued[cls] = self.queued.get(cls, 0) + 1
        if cls not in self.heads:
            self.heads[cls] = entry
        return entry

    def remove(self, entry: Waiting) -> T | None:
        """Take ``entry`` out of its line (started, expired or gone); None if it already left."""
        ticket = entry.ticket
        if ticket not in self._items:
            return None
        item = self._items.pop(ticket)
        cls = entry.cls
        self.queued[cls] -= 1
        head = self.heads.get(cls)
        if head is not None and head.ticket == ticket:
            line = self._lines[cls]
            line.popleft()
            items = self._items
            while line and line[0].ticket not in items:  # those left from the middle earlier
                line.popleft()
            if line:
                self.heads[cls] = line[0]
            else:
                del self.heads[cls]
        return item

    def measure(self, seconds: float) -> None:
        """Fold the completions of the last ``seconds`` into the service rate."""
        self.service_rate = ewma_rate(self.service_rate, self.completions, seconds)
        self.completions = 0

    def measure_at(self, now: float, *, every: float = RATE_WINDOW) -> None:
        """Measure the rate over the time since the last measurement, once ``every`` passed."""
        if now - self.rate_at >= every:
            self.measure(now - self.rate_at)
            self.rate_at = now
