"""Step 8, settle: the one place a request's final usage is charged.

Every request that took a quota reservation ends here exactly once — served, failed upstream,
past its deadline, refused after reserving (queue full, no replica), or cancelled by its
client midway — with one :class:`~tokenfleet.gateway.policy.usage.Record`. The rules:

- never sent to an engine, or refused by the engine before any byte reached the client: 0;
- otherwise the prompt (the engine's count when it reported usage, else the estimate) plus
  the completion tokens: the engine's own count when the answer ran to its end (the gateway
  asks for a usage report on every stream), else the tokens relayed to the client so far.

The record is counted first — the token counters per tenant, model and outcome, and the
durable usage ledger, neither of which waits for Redis — then the quota gets back what the
request did not use (or is charged what it used beyond its reservation), and the tenant's
budget hold is corrected the same way (priced where it ran, for a currency budget). The Redis
writes come last and each stands alone: with Redis down, the counters and the ledger still
have the request (each store does what its declared failure mode says).

Settlement runs shielded: a client that closes its connection just after the last byte cancels
the handler, and a settlement cut off between its Redis calls would leak quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tokenfleet.accounting import budget, cost
from tokenfleet.gateway import budget_store
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import Metrics, SpillMetrics
from tokenfleet.gateway.policy import usage
from tokenfleet.gateway.proxy import Meter
from tokenfleet.gateway.quota_store import QuotaStore, Reservation
from tokenfleet.gateway.stages import context, events
from tokenfleet.gateway.targets import Admitted
from tokenfleet.gateway.usage_ledger import UsageLedger

log = logging.getLogger("tokenfleet.gateway.settle")

#: The usage ledger's outcome for a record's: a request refused after it reserved was shed.
LEDGER_OUTCOME = {
    "served": "served",
    "failed": "failed",
    "cancelled": "cancelled",
    "rejected": "shed",
}


#: Endings that cut a request off while its engine worked: the client left, or the deadline it
#: chose passed (a refusal when no byte had reached the client yet). Either way the engine spent
#: GPU time the tenant asked for, so it is charged (issue 35: both once cost the prompt or
#: nothing, which made GPU time almost free to a client that leaves early).
CUT_OFF = frozenset({"client_disconnected", "deadline_exceeded"})


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
    uncounted: int | None = None,
) -> usage.Record:
    """The final usage of a request, from what its meter saw. ``uncounted``: for an answer
    whose tokens nobody counts as they come (not streamed), what the engine may generate — the
    charge when it is cut off before its usage report."""
    outcome, reason = ending
    cut_off = reason in CUT_OFF
    prompt, completion = (
        usage.used(
            prompt_reported=meter.prompt_reported,
            completion_reported=meter.completion_reported,
            prompt_estimate=prompt_estimate,
            relayed=meter.relayed,
            ceiling=uncounted if cut_off else None,
        )
        if (meter.sent and outcome != "rejected") or (meter.dispatched and cut_off)
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


class Settle:
    """Counters, the usage ledger, the quota and the budget, settled per request."""

    def __init__(
        self,
        *,
        quotas: QuotaStore,
        budgets: budget_store.BudgetStore,
        ledger: UsageLedger | None,
        live: Live,
        metrics: Metrics,
    ) -> None:
        self._quotas, self._budgets, self._ledger = quotas, budgets, ledger
        self._live, self._metrics = live, metrics

    async def settle(
        self,
        passage: context.Passage,
        admitted: Admitted,
        reservation: Reservation,
        hold: budget_store.Held | None,
    ) -> None:
        """Charge what the request has used now: a request still running when this is read
        (the client left) was cancelled, unless the answer's end had reached the client.
        Shielded: a cancellation leaves it running (:meth:`wait_out`)."""
        meter = passage.meter
        served, spilled, ended, _ = passage.trace.where()
        if ended is not None:
            ending = (ended.outcome, ended.reason)
        else:
            ending = ("served", "") if meter.complete else ("cancelled", "client_disconnected")
        where = served or admitted.primary
        charged = record(
            meter,
            request_id=passage.identity.id,
            tenant=admitted.tenant.key,
            model=spilled.model if spilled else where.model.name,
            pool=spilled.pool if spilled else where.pool.key,
            ending=ending,
            prompt_estimate=admitted.parsed.prompt_tokens,
            reserved=reservation.tokens,
            uncounted=None if admitted.parsed.stream else admitted.output_tokens,
        )
        settling = asyncio.ensure_future(self._settle(passage, charged, reservation, hold, spilled))
        passage.settling = settling
        await asyncio.shield(settling)

    async def _settle(
        self,
        passage: context.Passage,
        charged: usage.Record,
        reservation: Reservation,
        hold: budget_store.Held | None,
        spilled: events.Spilled | None,
    ) -> None:
        self._count(charged)
        if spilled is not None:
            _count_spilled(self._metrics.spill, spilled, charged)
        await self._quotas.settle(reservation, charged.charged)
        if hold is not None and hold.spec is not None:
            rate: cost.Rate | None
            if spilled is not None:
                rate = spilled.rate  # priced where no pool of the catalog served
            else:
                served_on = self._live.catalog.pools.get(charged.pool)
                rate = served_on.rate if served_on else None
            used = budget.charge(
                hold.spec,
                prompt_tokens=charged.prompt,
                completion_tokens=charged.completion,
                rate=rate,
            )
            await self._budgets.settle(hold, used=used)
        if spilled is not None and spilled.hold is not None:  # the remote's spend budget
            await self._budgets.settle(spilled.hold, used=_spent(spilled, charged))
        passage.trace.add(
            events.Settled(
                charged.prompt,
                charged.completion,
                charged.reserved,
                model=spilled.model if spilled else "",
            )
        )

    def _count(self, charged: usage.Record) -> None:
        """The token counters and the usage ledger: never waits, never fails."""
        if charged.charged:
            labels = (charged.tenant, charged.model, charged.outcome)
            self._metrics.prompt_tokens.labels(*labels).inc(charged.prompt)
            self._metrics.completion_tokens.labels(*labels).inc(charged.completion)
        if self._ledger is not None:
            self._ledger.record(
                tenant=charged.tenant,
                model=charged.model,
                pool=charged.pool,
                outcome=LEDGER_OUTCOME.get(charged.outcome, charged.outcome),
                prompt_tokens=charged.prompt,
                completion_tokens=charged.completion,
            )

    @staticmethod
    async def wait_out(passage: context.Passage) -> None:
        """Wait out a settlement a cancellation interrupted, through further cancellations (a
        shutdown cancels twice); its failure is logged, as the request that ran it is gone."""
        settling = passage.settling
        if settling is None:
            return
        while not settling.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(settling)
        if not settling.cancelled() and settling.exception() is not None:
            log.error(
                "settling request %s failed", passage.identity.id, exc_info=settling.exception()
            )


def _spent(spilled: events.Spilled, charged: usage.Record) -> int:
    """What a spilled request cost at its remote's price, in micro-units."""
    return cost.micro(
        prompt_tokens=charged.prompt, completion_tokens=charged.completion, rate=spilled.rate
    )


def _count_spilled(m: SpillMetrics, spilled: events.Spilled, charged: usage.Record) -> None:
    """A spilled request's tokens and spend, counted by remote."""
    entry, remote = spilled.entry, spilled.remote
    m.tokens.labels(entry.namespace, entry.name, remote.name, "prompt").inc(charged.prompt)
    m.tokens.labels(entry.namespace, entry.name, remote.name, "completion").inc(charged.completion)
    spent = _spent(spilled, charged)
    if spent:
        m.spend.labels(entry.namespace, entry.name, remote.name, entry.currency).inc(
            spent / 1_000_000
        )
