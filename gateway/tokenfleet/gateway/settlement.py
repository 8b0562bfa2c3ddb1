"""Settlement: the one place a request's final usage is charged.

Every request that took a quota reservation ends here exactly once — served, failed upstream,
past its deadline, refused after reserving (queue full, no replica), or cancelled by its
client midway — with one :class:`~tokenfleet.gateway.policy.usage.Record`. The rules:

- never sent to an engine, or refused by the engine before any byte reached the client: 0;
- otherwise the prompt (the engine's count when it reported usage, else the estimate) plus
  the completion tokens: the engine's own count when the answer ran to its end (the gateway
  asks for a usage report on every stream), else the tokens relayed to the client so far.

:func:`settle` counts the tokens per tenant, model and outcome and writes the record to the
durable usage ledger first (neither waits for Redis), then gives the quota back what the request
did not use (or charges what it used beyond its reservation) and settles the tenant's budget
hold the same way (priced at the pool that served it, for a currency budget): a Redis that fails
there costs neither the counters nor the ledger.
"""

from __future__ import annotations

from tokenfleet.api import budget, cost
from tokenfleet.gateway import budget_store
from tokenfleet.gateway.policy import usage
from tokenfleet.gateway.proxy import Meter
from tokenfleet.gateway.quota_store import Reservation
from tokenfleet.gateway.state import GatewayState


def record(
    meter: Meter,
    *,
    request_id: str,
    tenant: str,
    model: str,
    pool: str,
    ending: tuple[str, str],
    prompt_estimate: int,
    reserved: int,
) -> usage.Record:
    """The final usage of a request, from what its meter saw."""
    outcome, reason = ending
    prompt, completion = (
        usage.used(
            prompt_reported=meter.prompt_reported,
            completion_reported=meter.completion_reported,
            prompt_estimate=prompt_estimate,
            relayed=meter.relayed,
        )
        if meter.sent and outcome != "rejected"
        else (0, 0)
    )
    return usage.Record(
        request_id=request_id,
        tenant=tenant,
        model=model,
        pool=pool,
        outcome=outcome,
        reason=reason,
        prompt=prompt,
        completion=completion,
        reserved=reserved,
    )


#: The usage ledger's outcome for a record's: a request refused after it reserved was shed.
LEDGER_OUTCOME = {
    "served": "served",
    "failed": "failed",
    "cancelled": "cancelled",
    "rejected": "shed",
}


async def settle(
    state: GatewayState,
    record: usage.Record,
    reservation: Reservation,
    hold: budget_store.Held | None = None,
    *,
    rate: cost.Rate | None = None,
) -> None:
    """Charge ``record``: quota and budget settled, token counters counted with the outcome,
    and one entry in the usage ledger. ``rate`` prices a currency budget where no pool of the
    catalog served (a ModelRoute's remote)."""
    if record.charged:  # counted first: neither waits for Redis, and no Redis write skips them
        labels = (record.tenant, record.model, record.outcome)
        state.metrics.prompt_tokens.labels(*labels).inc(record.prompt)
        state.metrics.completion_tokens.labels(*labels).inc(record.completion)
    if state.usage is not None:
        state.usage.record(
            tenant=record.tenant,
            model=record.model,
            pool=record.pool,
            outcome=LEDGER_OUTCOME.get(record.outcome, record.outcome),
            prompt_tokens=record.prompt,
            completion_tokens=record.completion,
        )
    await state.quotas.settle(reservation, record.charged)
    if hold is not None and hold.spec is not None:
        served_on = state.catalog.pools.get(record.pool)
        used = budget.charge(
            hold.spec,
            prompt_tokens=record.prompt,
            completion_tokens=record.completion,
            rate=rate if rate is not None else served_on.rate if served_on else None,
        )
        await state.budgets.settle(hold, used=used)
