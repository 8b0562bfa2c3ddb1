"""Settlement: the one place a request's final usage is charged.

Every request that took a quota reservation ends here exactly once — served, failed upstream,
past its deadline, refused after reserving (queue full, no replica), or cancelled by its
client midway — with one :class:`~tokenfleet.gateway.policy.usage.Record`. The rules:

- never sent to an engine, or refused by the engine before any byte reached the client: 0;
- otherwise the prompt (the engine's count when it reported usage, else the estimate) plus
  the completion tokens: the engine's own count when the answer ran to its end (the gateway
  asks for a usage report on every stream), else the tokens relayed to the client so far.

:func:`settle` gives the quota back what the request did not use (or charges what it used
beyond its reservation) and counts the tokens per tenant, model and outcome. A durable usage
ledger belongs here too: it receives the same record.
"""

from __future__ import annotations

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
        outcome=outcome,
        reason=reason,
        prompt=prompt,
        completion=completion,
        reserved=reserved,
    )


async def settle(state: GatewayState, record: usage.Record, reservation: Reservation) -> None:
    """Charge ``record``: the quota settled, the token counters counted with the outcome."""
    await state.quotas.settle(reservation, record.charged)
    if record.charged:
        labels = (record.tenant, record.model, record.outcome)
        state.metrics.prompt_tokens.labels(*labels).inc(record.prompt)
        state.metrics.completion_tokens.labels(*labels).inc(record.completion)
