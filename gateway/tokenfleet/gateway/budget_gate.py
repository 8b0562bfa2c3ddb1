"""Step 4's budget check: the tenant's ``spec.budget`` against its period's shared count.

The arithmetic is the quotas': the request reserves its worst case — the prompt plus
``max_tokens``, for a currency budget priced at the dearest pool it may run on (its model's or
its fallback's, :func:`tokenfleet.api.cost.rate_of`) — and settlement
(:mod:`tokenfleet.gateway.settlement`) corrects the hold to what it really used, priced where it
really ran. The verdict is :func:`tokenfleet.api.budget.decide`'s; the count is
:class:`~tokenfleet.gateway.budget_store.BudgetStore`'s, shared by every replica through Redis.

At the limit: Reject refuses (429, Retry-After until the reset), Downgrade re-places the request
on the budget's cheaper model (a response header names the model asked for), Notify serves and
says so in a header.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import MutableMapping, Sequence
from typing import Any

from tokenfleet.api import budget, cost
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import budget_store
from tokenfleet.gateway.placement import Admitted, place
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.state import GatewayState

#: Set when the tenant's budget is spent and its action served the request anyway.
BUDGET_HEADER = "X-TokenFleet-Budget"
#: The model the request asked for, when a spent Downgrade budget served another.
DOWNGRADE_HEADER = "X-TokenFleet-Downgraded-From"
NO_HOLD = budget_store.Held(key="", amount=0, ttl=0)


def worst_case(spec: Budget, admitted: Admitted, also: Sequence[cost.Rate] = ()) -> int:
    """The most the request can cost ``spec``: all of ``max_tokens`` generated, on the dearest
    pool it may be served by, or the dearest of ``also`` (a ModelRoute's remotes' prices)."""
    rates = [t.pool.rate for t in (admitted.primary, admitted.fallback) if t is not None]
    return max(
        budget.charge(
            spec,
            prompt_tokens=admitted.parsed.prompt_tokens,
            completion_tokens=admitted.max_tokens,
            rate=rate,
        )
        for rate in [*rates, *also]
    )


async def check(
    state: GatewayState,
    admitted: Admitted,
    *,
    headers: MutableMapping[str, str],
    log: MutableMapping[str, Any],
    also: Sequence[cost.Rate] = (),
) -> tuple[Admitted, budget_store.Held] | Rejected:
    """The request as it goes on (re-placed by a Downgrade) and what it holds, or the refusal;
    ``headers`` and ``log`` are the response's and the access log's."""
    spec = admitted.tenant.budget
    if spec is None:
        return admitted, NO_HOLD
    verdict, hold = await state.budgets.reserve(
        tenant=admitted.tenant.key,
        spec=spec,
        amount=worst_case(spec, admitted, also),
        now=datetime.datetime.now(datetime.UTC),
    )
    if not verdict.serve:
        return Rejected(
            reason=Reason.DAILY_QUOTA, retry_after=verdict.retry_after, message=verdict.message
        )
    if verdict.exceeded:
        headers[BUDGET_HEADER] = "exceeded"
        log["budget"] = verdict.message
    if verdict.model is None:
        return admitted, hold
    parsed = dataclasses.replace(admitted.parsed, model=verdict.model)
    target = place(state.catalog, admitted.tenant, parsed)
    if isinstance(target, Rejected):
        await state.budgets.settle(hold, used=0)
        return target
    headers[DOWNGRADE_HEADER] = admitted.primary.model.name
    log.update(downgraded_from=admitted.primary.model.name, model=verdict.model)
    return dataclasses.replace(admitted, parsed=parsed, primary=target, fallback=None), hold
