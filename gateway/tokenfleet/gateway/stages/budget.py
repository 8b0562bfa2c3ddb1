"""Step 4's budget: the tenant's ``spec.budget`` against its period's shared count.

The request reserves its worst case (:func:`tokenfleet.gateway.budget_gate.worst_case`, a
ModelRoute's remotes' prices included); the verdict is
:func:`tokenfleet.accounting.budget.decide`'s, the count
:class:`~tokenfleet.gateway.budget_store.BudgetStore`'s, shared by every replica
through Redis (with Redis down: its declared failure mode, the quotas' open or closed).

At the limit: Reject refuses (429, Retry-After until the reset), Downgrade re-places the request
on the budget's cheaper model (a response header names the model asked for), Notify serves and
says so in a header. The trace records either.
"""

from __future__ import annotations

import dataclasses
import datetime

from tokenfleet.gateway import budget_store
from tokenfleet.gateway.budget_gate import worst_case
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.policy import spill as spill_rules
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.stages import events
from tokenfleet.gateway.targets import Admitted, place

NO_HOLD = budget_store.Held(key="", amount=0, ttl=0)


class Budgets:
    """The budget check, with the shared counters and the catalog a downgrade is placed in."""

    def __init__(self, *, store: budget_store.BudgetStore, live: Live) -> None:
        self._store, self._live = store, live

    async def check(
        self, admitted: Admitted, trace: events.Trace
    ) -> tuple[Admitted, budget_store.Held] | Rejected:
        """The request as it goes on (re-placed by a Downgrade) and what it holds, or the
        refusal."""
        spec = admitted.tenant.budget
        if spec is None:
            return admitted, NO_HOLD
        entry = admitted.route  # a route's remotes may serve it: their prices count too
        also = [spill_rules.rate(r, entry.currency) for r in entry.remotes] if entry else []
        reserved = await self._store.reserve(
            tenant=admitted.tenant.key,
            spec=spec,
            amount=worst_case(spec, admitted, also),
            now=datetime.datetime.now(datetime.UTC),
        )
        if isinstance(reserved, Rejected):
            return reserved
        verdict, hold = reserved
        if not verdict.serve:
            return Rejected(
                reason=Reason.DAILY_QUOTA, retry_after=verdict.retry_after, message=verdict.message
            )
        if verdict.exceeded:
            trace.add(events.BudgetExceeded(verdict.message))
        if verdict.model is None:
            return admitted, hold
        parsed = dataclasses.replace(admitted.parsed, model=verdict.model)
        target = place(self._live.catalog, admitted.tenant, parsed)
        if isinstance(target, Rejected):
            await self._store.settle(hold, used=0)
            return target
        asked = admitted.primary.model.name
        trace.add(events.Downgraded(asked, verdict.model, target.pool.key, target.cls))
        return dataclasses.replace(admitted, parsed=parsed, primary=target, fallback=None), hold
