"""Requests waiting for their lease's next grant (the quota store's leases, policy.leases).

A lease that cannot cover a request does not send a grant per request: one grant at a time per
lease, asking for every request waiting when it leaves (``leases.ask``: the cap on what the
lease keeps is the lease's, not the grant's), its answer handed out to them oldest first
(``leases.hand_out``), and the next grant for those it fell short of and those that came
meanwhile — less those the lease covers by then, which go at once. A burst sent at once costs
one or two round trips, and is admitted as far as the shared limit reaches.

A request that leaves (its client went) stops waiting: the grant runs on in a task of the
store's, not the request's, and what it brings lands in the lease for the next request; if the
request was admitted just before it left, what it drew goes back into the lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from tokenfleet.gateway.policy import leases


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why Redis refused a grant: the lease script's reason and retry-after (ms)."""

    reason: str
    retry_ms: int


#: A waiting request's turn, with the refusal when it is REFUSED.
Told = tuple[leases.Turn, Refusal | None]
#: One grant's round trip: ask Redis for ``leases.Ask`` for a tenant's lease, add what it
#: granted to the lease, and say what it came to.
GrantFn = Callable[[str, leases.Lease, leases.Ask], Awaitable[tuple[leases.Grant, Refusal | None]]]


@dataclasses.dataclass(slots=True)
class _Waiter:
    waiting: leases.Waiting
    turn: asyncio.Future[Told]


class GrantQueue:
    """The requests waiting on each tenant's lease, and the one grant under way for it."""

    def __init__(
        self,
        *,
        grant: GrantFn,
        can_ask: Callable[[], bool],
        detach: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self._grant = grant
        self._can_ask = can_ask  # Redis is worth asking (not down, or due for a retry)
        self._detach = detach  # runs the grants in a task of the store's, which close() awaits
        self._waiters: dict[str, list[_Waiter]] = {}  # by tenant, oldest first
        self._granting: set[str] = set()  # tenants whose lease has grants under way

    async def wait(self, tenant: str, lease: leases.Lease, waiting: leases.Waiting) -> Told:
        """Wait for the grant that decides ``waiting``: its turn (never AGAIN)."""
        waiter = _Waiter(waiting, asyncio.get_running_loop().create_future())
        self._waiters.setdefault(tenant, []).append(waiter)
        if tenant not in self._granting:
            self._granting.add(tenant)
            self._detach(self._rounds(tenant, lease))
        try:
            return await waiter.turn
        except asyncio.CancelledError:  # the request left; if it was admitted meanwhile, undo
            told = waiter.turn.done() and not waiter.turn.cancelled()
            if told and waiter.turn.result()[0] is leases.Turn.ADMITTED:
                lease.put_back(waiting.tokens)
            raise

    async def _rounds(self, tenant: str, lease: leases.Lease) -> None:
        """Grants for the requests waiting on ``lease``, one at a time, each for all that wait
        when it leaves (less those the lease covers by then: they go at once), until none
        does."""
        waiters: list[_Waiter] = []
        try:
            while waiters := self._tell(lease, self._waiters.pop(tenant, []), None, None):
                asked = leases.ask(lease, [w.waiting for w in waiters])
                grant, refusal = leases.Grant.UNANSWERED, None
                if asked is not None and self._can_ask():
                    grant, refusal = await self._grant(tenant, lease, asked)
                again = self._tell(lease, waiters, grant, refusal)
                self._waiters[tenant] = again + self._waiters.get(tenant, [])
                waiters = []
        finally:
            self._granting.discard(tenant)
            for waiter in self._live(waiters + self._waiters.pop(tenant, [])):  # an error
                waiter.turn.set_result((leases.Turn.PER_REQUEST, None))

    def _tell(
        self,
        lease: leases.Lease,
        waiters: list[_Waiter],
        grant: leases.Grant | None,
        refusal: Refusal | None,
    ) -> list[_Waiter]:
        """Tell the waiters still there their turns (``leases.hand_out``); those that wait on,
        oldest first."""
        waiters = self._live(waiters)  # without those that left
        turns = leases.hand_out(
            lease, [w.waiting for w in waiters], grant=grant, now=time.monotonic()
        )
        waiting_on = []
        for waiter, turn in zip(waiters, turns, strict=True):
            if turn is leases.Turn.AGAIN:
                rounds = waiter.waiting.rounds + 1
                waiter.waiting = dataclasses.replace(waiter.waiting, rounds=rounds)
            if turn in (leases.Turn.WAIT, leases.Turn.AGAIN):
                waiting_on.append(waiter)
            else:
                waiter.turn.set_result((turn, refusal if turn is leases.Turn.REFUSED else None))
        return waiting_on

    @staticmethod
    def _live(waiters: list[_Waiter]) -> list[_Waiter]:
        return [w for w in waiters if not w.turn.done()]
