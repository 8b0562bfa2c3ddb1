"""Step 4's last resort, on a local refusal: a ModelRoute's request the local side refused
(before it started, or every endpoint failed before answering) goes to the route's remotes
(the rules: :mod:`tokenfleet.gateway.policy.spill`; docs/routes.md "Spill").

Each remote is tried once, in the route's order, skipped while it is ejected after a failure
(:mod:`..remotes`), when its key is not mounted, when this process already has
``maxConcurrency`` requests there, or when the tenant's spend budget there cannot hold the
request's most expensive outcome (prompt + ``max_tokens`` at the remote's price). A try after
another try (or after a local attempt reached an engine) is a retry: it takes a token of the
retry budget the endpoints' retries take (:mod:`..router`), and it is relayed by
:func:`tokenfleet.gateway.proxy.forward`, the relay every engine request uses: the stream is
relayed as it arrives, the usage counted as it passes, and a client that leaves closes the
remote connection (another gateway then cancels its engine request in turn). A remote that
fails before any byte reached the client is left for the next; if none answers, the client gets
the local refusal, which says the remotes were tried.

Every try is counted (``tokenfleet_gateway_spills_total`` by remote, trigger and outcome) and
the response names where it went: ``X-TokenFleet-Target: remote/<name>``, the local refusal's
code in ``X-TokenFleet-Spill-Reason``, and ``X-TokenFleet-Model`` the model that answered (the
remote gateway's own header, or the provider model asked for) — never a silent change.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.api.route import Remote
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import budget_store, engine_http, proxy
from tokenfleet.gateway.catalog import Tenant
from tokenfleet.gateway.metrics import SpillMetrics
from tokenfleet.gateway.policy import bodies, deadlines
from tokenfleet.gateway.policy import spill as rules
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.remotes import Remotes
from tokenfleet.gateway.route_catalog import RouteEntry
from tokenfleet.gateway.router import Router
from tokenfleet.gateway.stages import context, events, timeline
from tokenfleet.gateway.stages.events import Spilled
from tokenfleet.gateway.targets import Admitted

logger = logging.getLogger("tokenfleet.gateway.spill")

MODEL_HEADER = "X-TokenFleet-Model"


def spend_budget(remote: Remote, currency: str) -> Budget | None:
    """The remote's per-tenant spend limit as a Reject budget of the shared budget store."""
    if remote.budget is None:
        return None
    return Budget(
        period=remote.budget.period,
        amount=remote.budget.amount,
        currency=currency,
        action="Reject",
    )


def spend_key(tenant: Tenant, entry: RouteEntry, remote: Remote) -> str:
    return f"{tenant.key}|spill|{entry.key}|{remote.name}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """What every try at a remote sends, and for whom."""

    entry: RouteEntry
    tenant: Tenant
    parsed: bodies.Parsed
    engine_body: Mapping[str, Any]  # as the local engine would have had it
    salt: str  # the tenant's cache salt
    due: float
    local: Rejected  # what the local side said
    trigger: str
    sent_locally: bool  # a local attempt reached an engine (a spill is then a retry)


class Spill:
    """The remotes of ModelRoutes, with their keys, spend budgets and the shared retry budget."""

    def __init__(
        self,
        *,
        remotes: Remotes,
        budgets: budget_store.BudgetStore,
        router: Router,
        engines: engine_http.Client,
        metrics: SpillMetrics,
    ) -> None:
        self._remotes, self._budgets, self._router = remotes, budgets, router
        self._engines, self._metrics = engines, metrics

    def spills_instead(self, entry: RouteEntry) -> bool:
        """Whether a request of the route with no ready replica goes to a remote at once (the
        route spills when Unavailable and some remote could be tried now)."""
        return entry.spills_on("Unavailable") and self.usable(entry)

    def usable(self, entry: RouteEntry) -> bool:
        """Some remote of the route could be tried now (its key is there, it is not ejected)."""
        now = time.monotonic()
        return any(self._unusable(entry, r, now=now) is None for r in entry.remotes)

    async def run(
        self,
        admitted: Admitted,
        answered: context.Answered | Rejected,
        *,
        request: web.Request,
        passage: context.Passage,
    ) -> context.Answered | Rejected:
        """The first remote of the route's that answers a request the local side refused;
        ``answered`` as it was when its route has no remote for this refusal."""
        local = answered if isinstance(answered, Rejected) else answered.outcome
        assert isinstance(local, Rejected)
        entry = admitted.route
        trigger = (
            rules.trigger(local.reason, spill_on=entry.spill_on)
            if entry is not None and entry.remotes
            else None
        )
        if entry is None or trigger is None:
            return answered
        ask = Ask(
            entry=entry,
            tenant=admitted.tenant,
            parsed=admitted.parsed,
            engine_body=bodies.upstream(
                admitted.parsed,
                model=entry.name,
                salt=admitted.salt,
                max_tokens=admitted.max_tokens,
            ),
            salt=admitted.salt,
            due=admitted.due,
            local=local,
            trigger=trigger,
            sent_locally=passage.meter.sent,
        )
        spilled = await self._spill(ask, request=request, passage=passage)
        if isinstance(spilled, Rejected):
            return spilled
        return context.Answered(
            target=admitted.primary, outcome=spilled.outcome, remote=spilled.label
        )

    async def _spill(
        self, ask: Ask, *, request: web.Request, passage: context.Passage
    ) -> Spilled | Rejected:
        """The first remote that answers, or the local refusal (saying what was tried)."""
        tried: list[str] = []  # what happened at each remote, for the refusal's message
        attempts = 0  # remotes actually sent the request (a skipped one is no retry)
        for remote in ask.entry.remotes:
            answered = await self._at(
                ask, remote, attempts=attempts, request=request, passage=passage
            )
            if isinstance(answered, Spilled):
                self._count(ask, remote, rules.SERVED)
                passage.trace.add(
                    events.SpilledTo(answered.label, ask.local.reason.value, answered.pool)
                )
                return answered
            outcome, sent = answered
            attempts += sent
            self._count(ask, remote, rules.FAILED if sent else outcome)
            tried.append(f"{remote.name}: {outcome}")
        summary = "; ".join(tried)
        passage.trace.add(events.SpillTried(summary))
        return dataclasses.replace(
            ask.local, message=f"{ask.local.message} (spill tried: {summary})"
        )

    def _unusable(self, entry: RouteEntry, remote: Remote, *, now: float) -> str | None:
        """Why ``remote`` cannot be tried for the route at all now (None: it can)."""
        if self._remotes.key(remote, namespace=entry.namespace) is None:
            return rules.SKIPPED_KEY
        if self._remotes.ejected(entry.key, remote, now=now):
            return rules.SKIPPED_EJECTED
        return None

    def _skip_reason(self, ask: Ask, remote: Remote) -> str | None:
        """Why ``remote`` is not tried for this request before its budget is asked (None: ask)."""
        unusable = self._unusable(ask.entry, remote, now=time.monotonic())
        if unusable is not None:
            return unusable
        if self._remotes.in_flight(ask.entry.key, remote) >= remote.max_concurrency:
            return rules.SKIPPED_BUSY
        return None

    @staticmethod
    def _costs(ask: Ask, remote: Remote) -> int:
        body = ask.engine_body
        return rules.estimate(
            remote,
            currency=ask.entry.currency,
            prompt_tokens=ask.parsed.prompt_tokens,
            max_tokens=int(body.get("max_tokens", body.get("max_output_tokens", 0))),
            sequences=ask.parsed.sequences,
        )

    async def _hold(self, ask: Ask, remote: Remote) -> budget_store.Held | None:
        """The tenant's spend budget there, holding the request's most expensive outcome; None
        without a budget (a held amount of 0 means refused, or its count unavailable)."""
        spec = spend_budget(remote, ask.entry.currency)
        if spec is None:
            return None
        reserved = await self._budgets.reserve(
            tenant=spend_key(ask.tenant, ask.entry, remote),
            spec=spec,
            amount=self._costs(ask, remote),
            now=datetime.datetime.now(datetime.UTC),
        )
        if isinstance(reserved, Rejected):  # the count is down and fails closed: not spent
            return budget_store.Held(key="", amount=0, ttl=0, spec=spec)
        verdict, held = reserved
        return held if verdict.serve else dataclasses.replace(held, amount=0)

    async def _release(self, hold: budget_store.Held | None) -> None:
        if hold is not None:
            await self._budgets.settle(hold, used=0)

    async def _at(
        self,
        ask: Ask,
        remote: Remote,
        *,
        attempts: int,
        request: web.Request,
        passage: context.Passage,
    ) -> Spilled | tuple[str, bool]:
        """One remote's answer, or (why not, whether the request was sent there). The retry
        budget is asked last, so a request skipped for its own budget takes no retry token."""
        skipped = self._skip_reason(ask, remote)
        if skipped is not None:
            return skipped, False
        hold = await self._hold(ask, remote)
        if hold is not None and hold.amount == 0 and self._costs(ask, remote) > 0:
            return rules.SKIPPED_BUDGET, False
        if rules.takes_retry(tried_remotes=attempts, sent_locally=ask.sent_locally) and (
            not self._router.try_retry(ask.parsed.model)
        ):
            await self._release(hold)
            return rules.SKIPPED_RETRIES, False
        if not self._remotes.take(ask.entry.key, remote):  # filled up while the budget was asked
            await self._release(hold)
            return rules.SKIPPED_BUSY, False
        try:
            return await self._sent(ask, remote, hold, request=request, passage=passage)
        finally:
            self._remotes.release(ask.entry.key, remote)

    async def _sent(
        self,
        ask: Ask,
        remote: Remote,
        hold: budget_store.Held | None,
        *,
        request: web.Request,
        passage: context.Passage,
    ) -> Spilled | tuple[str, bool]:
        """The request at ``remote``: its answer relayed, or why it failed before any byte."""
        key, route = self._remotes.key(remote, namespace=ask.entry.namespace), ask.entry.key
        assert key is not None
        due = min(ask.due, time.monotonic() + remote.timeout_seconds)
        body = rules.remote_body(
            ask.engine_body, remote=remote, route_name=ask.entry.name, salt=ask.salt
        )
        label, reason = f"remote/{remote.name}", ask.local.reason.value
        headers = passage.trace.headers()  # as a spilled answer's: the local attempt's left out
        for local in events.LOCAL_ONLY:
            headers.pop(local, None)
        headers[events.TARGET_HEADER], headers[events.SPILL_REASON_HEADER] = label, reason
        upstream_headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {key}",
            "X-Request-Id": passage.identity.id,
        }
        if remote.kind == "Gateway":  # the deadline goes on: the remote queues and sheds by it
            upstream_headers[deadlines.HEADER] = str(max(1, int((due - time.monotonic()) * 1000)))
        call = proxy.Call(
            url=rules.url(remote, bodies.PATHS[ask.parsed.kind]),
            body=orjson.dumps(body),
            stream=ask.parsed.stream,
            strip_usage=ask.parsed.stream and not ask.parsed.include_usage,
            deadline=due,
            headers=headers,
            upstream_headers=upstream_headers,
            served_by=str(body["model"]),
            served_by_header=MODEL_HEADER if remote.kind == "Gateway" else "",
            write_stall=self._router.settings.write_stall_seconds,
        )
        spilled = Spilled(entry=ask.entry, remote=remote, hold=hold, asked=call.served_by)
        passage.trace.add(events.AtRemote(spilled))  # from here on it is settled as the remote's
        timeline.propagate(passage.trace, call.upstream_headers)  # a remote gateway joins it
        gauge = self._metrics.in_flight.labels(ask.entry.namespace, ask.entry.name, remote.name)
        gauge.inc()
        try:
            spilled.outcome = await proxy.forward(
                call, client=self._engines, request=request, meter=passage.meter
            )
        except proxy.UpstreamFailed as failed:
            passage.trace.add(events.AtRemote(None))
            await self._release(hold)
            # down or failing, or its own timeout (not the request's deadline) fired: ejected
            if failed.retryable or (
                failed.cause == "deadline" and time.monotonic() < ask.due - 0.05
            ):
                span = self._remotes.failed(route, remote, now=time.monotonic())
                logger.warning(
                    "route %s: remote %s failed (%s); skipped for %.0f s",
                    ask.entry.key,
                    remote.name,
                    failed.cause,
                    span,
                )
            return failed.cause, True
        finally:
            gauge.dec()
        self._remotes.succeeded(route, remote)
        return spilled

    def _count(self, ask: Ask, remote: Remote, outcome: str) -> None:
        self._metrics.spills.labels(
            ask.entry.namespace, ask.entry.name, remote.name, ask.trigger, outcome
        ).inc()
