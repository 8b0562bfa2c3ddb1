"""What a gateway process gives back of its quota leases (:mod:`.quota_store`).

Idle leases go back whole — their unspent requests and tokens and their free slots, never the
slots of requests still running there — and busy ones give back their free slots beyond the
cap. Each give-back is one ``return`` round trip of the lease script, run in a task of the
process (a cancelled request must not cut short a round trip that changes the shared counters),
stopping at the first Redis did not answer. What certainly did not reach Redis (connecting
failed, or Redis answered an error) is kept and tried again at the next housekeeping beat: in its
lease if that lease still has the same limits, else owed. A lost answer counts as done: giving
back twice would drop the shared counter below what runs (:mod:`.policy.leases`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from tokenfleet.gateway import redis_backend, redis_client
from tokenfleet.gateway.policy import leases, quotas

APPLIED = leases.Outcome.APPLIED
_T = TypeVar("_T")
#: A give-back no lease can hold again (its limits changed): (tenant, limits, requests, tokens,
#: slots), tried again at the next housekeeping beat.
Owed = tuple[str, quotas.Limits, int, int, int]


def outcome_of(exc: BaseException) -> leases.Outcome:
    """What a failed lease round trip did: nothing if it never left or Redis refused it; else
    (a timeout or a lost connection after the write) it may have run."""
    if isinstance(exc, redis_client.NotSent | redis_client.RespError):
        return leases.Outcome.NOT_APPLIED
    return leases.Outcome.UNKNOWN


class LeaseReturns:
    """The give-backs of one process's leases, and what it still owes Redis."""

    def __init__(
        self,
        *,
        held: Mapping[str, leases.Lease],
        script: Callable[[], Callable[..., Awaitable[Any]] | None],
        detached: Callable[[Coroutine[Any, Any, leases.Outcome]], asyncio.Task[leases.Outcome]],
        counted: Callable[[], None],
        failed: Callable[[Exception], None],
    ) -> None:
        """``held``: the store's leases by tenant; ``script``: the lease script as the store
        has it now; ``detached``: runs a round trip in a task of the store's; ``counted`` and
        ``failed``: a round trip was made, and Redis did not answer one."""
        self._held, self._script, self._detached = held, script, detached
        self._counted, self._failed = counted, failed
        self.owed: list[Owed] = []

    async def give_back(self, due: Callable[[leases.Lease], bool]) -> None:
        """Return what every lease ``due(lease)`` picks holds unspent — its free slots, not the
        slots of its requests still running — and of the others their free slots beyond the
        cap; what certainly did not reach Redis is kept and tried again (:meth:`give`). Stops
        at the first give-back Redis did not answer."""
        if self._script() is None:
            return
        for tenant, lease in list(self._held.items()):
            if due(lease):
                requests, tokens, slots = lease.hand_back()
            else:
                requests, tokens, slots = 0, 0, lease.surplus_slots()
            if not (requests or tokens or slots):
                continue
            held = (requests, tokens, slots)
            if await self.give(tenant, lease.limits, *held, into=lease) is not APPLIED:
                return

    async def pay_owed(self) -> None:
        """Try again the give-backs no lease could hold; stops where Redis did not answer."""
        while self.owed:
            if await self.give(*self.owed.pop(0)) is not APPLIED:
                return

    async def give(
        self,
        tenant: str,
        limits: quotas.Limits,
        requests: int,
        tokens: int,
        slots: int,
        *,
        into: leases.Lease | None = None,
    ) -> leases.Outcome:
        """Give back (already out of any lease) what was taken under ``limits``: one ``return``
        round trip, run to its end even if the caller is cancelled. What certainly did not reach
        Redis is kept (``leases.give_back_again``): in ``into`` if its limits are still
        ``limits``, else owed; a lost answer counts as done."""
        return await asyncio.shield(
            self._detached(self._give(tenant, limits, requests, tokens, slots, into=into))
        )

    async def _give(
        self,
        tenant: str,
        limits: quotas.Limits,
        requests: int,
        tokens: int,
        slots: int,
        *,
        into: leases.Lease | None,
    ) -> leases.Outcome:
        script = self._script()
        assert script is not None
        day, left = quotas.day_of(time.time())
        self._counted()
        try:
            await script(
                keys=quotas.keys(tenant, day),
                args=["return", requests, tokens, slots, 0, 0, 0, *limits.as_args(), left],
            )
        except redis_backend.ERRORS as exc:
            self._failed(exc)
            outcome = outcome_of(exc)
            if leases.give_back_again(outcome):
                if into is not None and into.limits == limits:
                    into.keep(requests, tokens, slots)
                else:
                    self.owed.append((tenant, limits, requests, tokens, slots))
            return outcome
        return APPLIED
