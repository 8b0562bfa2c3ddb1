"""Spill a ModelRoute's request to the route's remotes when the local side refused it (the
rules: :mod:`tokenfleet.gateway.policy.spill`; docs/routes.md "Spill").

Each remote is tried once, in the route's order, skipped while it is ejected after a failure
(:mod:`.remotes`), when its key is not mounted, when this
process already has ``maxConcurrency`` requests there, or when the tenant's spend budget there
cannot hold the request's most expensive outcome (prompt + ``max_tokens`` at the remote's
price). A try is :func:`tokenfleet.gateway.proxy.forward`, the relay every engine request uses:
the stream is relayed as it arrives, the usage counted as it passes, and a client that leaves
closes the remote connection (another gateway then cancels its engine request in turn). A
remote that fails before any byte reached the client is left for the next; if none answers,
the client gets the local refusal, which says the remotes were tried.

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
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.api import cost
from tokenfleet.api.route import Remote
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import budget_store, proxy
from tokenfleet.gateway.catalog import Tenant
from tokenfleet.gateway.policy import bodies, deadlines, usage
from tokenfleet.gateway.policy import spill as rules
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.route_catalog import RouteEntry
from tokenfleet.gateway.state import GatewayState

logger = logging.getLogger("tokenfleet.gateway.spill")

TARGET_HEADER = "X-TokenFleet-Target"
REASON_HEADER = "X-TokenFleet-Spill-Reason"
MODEL_HEADER = "X-TokenFleet-Model"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Request:
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


@dataclasses.dataclass(slots=True, kw_only=True)
class Spilled:
    """A request sent to a remote: what the answer, the metrics and settlement need. It exists
    from the moment the request goes out, so a client that leaves mid-way is settled as the
    remote's (its spend hold included), not as the local pool's."""

    entry: RouteEntry
    remote: Remote
    hold: budget_store.Held | None
    asked: str  # the model name sent to the remote
    outcome: proxy.Outcome = dataclasses.field(default_factory=proxy.Outcome)

    @property
    def label(self) -> str:
        """Names the remote as a target: X-TokenFleet-Target, the access log, metrics."""
        return f"remote/{self.remote.name}"

    @property
    def model(self) -> str:
        """The model that answered (another gateway says which), else the one asked for."""
        return self.outcome.served_by or self.asked

    @property
    def pool(self) -> str:
        """The usage ledger's pool key of what it served: by target."""
        prefix = f"{self.entry.namespace}/" if self.entry.namespace else ""
        return f"{prefix}remote:{self.remote.name}"

    @property
    def rate(self) -> cost.Rate:
        return rules.rate(self.remote, self.entry.currency)


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


#: Response headers of the local attempt that do not describe a spilled answer.
_LOCAL_ONLY = ("X-TokenFleet-Revision", "X-TokenFleet-Fallback-From")


async def spill(
    state: GatewayState,
    ask: Request,
    *,
    request: web.Request,
    headers: dict[str, str],
    meter: proxy.Meter,
    log: dict[str, Any],
    begin: Callable[[Spilled | None], None],
) -> Spilled | Rejected:
    """The first remote that answers, or the local refusal (saying what was tried).
    ``begin`` hears of a request as it goes to a remote (None: that try failed before any
    byte), so its caller settles a request whose client leaves mid-way as the remote's."""
    tried: list[str] = []  # what happened at each remote, for the refusal's message
    attempts = 0  # remotes actually sent the request (a skipped one is no retry)
    for remote in ask.entry.remotes:
        answered = await _at(
            state,
            ask,
            remote,
            attempts=attempts,
            request=request,
            headers=headers,
            meter=meter,
            begin=begin,
        )
        if isinstance(answered, Spilled):
            _count(state, ask, remote, rules.SERVED)
            log.update(target=answered.label, spill_reason=ask.local.reason.value)
            return answered
        outcome, sent = answered
        attempts += sent
        _count(state, ask, remote, rules.FAILED if sent else outcome)
        tried.append(f"{remote.name}: {outcome}")
    log["spill_tried"] = "; ".join(tried)
    return dataclasses.replace(
        ask.local, message=f"{ask.local.message} (spill tried: {log['spill_tried']})"
    )


def usable(state: GatewayState, entry: RouteEntry) -> bool:
    """Some remote of the route could be tried now (its key is there, it is not ejected)."""
    now = time.monotonic()
    return any(_unusable(state, entry, r, now=now) is None for r in entry.remotes)


def _unusable(state: GatewayState, entry: RouteEntry, remote: Remote, *, now: float) -> str | None:
    """Why ``remote`` cannot be tried for the route at all now (None: it can)."""
    if state.remotes.key(remote, namespace=entry.namespace) is None:
        return rules.SKIPPED_KEY
    if state.remotes.ejected(entry.key, remote, now=now):
        return rules.SKIPPED_EJECTED
    return None


def _skip_reason(state: GatewayState, ask: Request, remote: Remote) -> str | None:
    """Why ``remote`` is not tried for this request before its budget is asked (None: ask)."""
    unusable = _unusable(state, ask.entry, remote, now=time.monotonic())
    if unusable is not None:
        return unusable
    if state.remotes.in_flight(ask.entry.key, remote) >= remote.max_concurrency:
        return rules.SKIPPED_BUSY
    return None


def _costs(ask: Request, remote: Remote) -> int:
    return rules.estimate(
        remote,
        currency=ask.entry.currency,
        prompt_tokens=ask.parsed.prompt_tokens,
        max_tokens=int(
            ask.engine_body.get("max_tokens", ask.engine_body.get("max_output_tokens", 0))
        ),
        sequences=ask.parsed.sequences,
    )


async def _hold(state: GatewayState, ask: Request, remote: Remote) -> budget_store.Held | None:
    """The tenant's spend budget there, holding the request's most expensive outcome; None
    without a budget (a held amount of 0 means refused)."""
    spec = spend_budget(remote, ask.entry.currency)
    if spec is None:
        return None
    reserved = await state.budgets.reserve(
        tenant=spend_key(ask.tenant, ask.entry, remote),
        spec=spec,
        amount=_costs(ask, remote),
        now=datetime.datetime.now(datetime.UTC),
    )
    if isinstance(reserved, Rejected):  # the count is down and fails closed: not spent
        return budget_store.Held(key="", amount=0, ttl=0, spec=spec)
    verdict, held = reserved
    return held if verdict.serve else dataclasses.replace(held, amount=0)


async def _release(state: GatewayState, hold: budget_store.Held | None) -> None:
    if hold is not None:
        await state.budgets.settle(hold, used=0)


async def _at(
    state: GatewayState,
    ask: Request,
    remote: Remote,
    *,
    attempts: int,
    request: web.Request,
    headers: dict[str, str],
    meter: proxy.Meter,
    begin: Callable[[Spilled | None], None],
) -> Spilled | tuple[str, bool]:
    """One remote's answer, or (why not, whether the request was sent there). The retry
    budget is asked last, so a request skipped for its own budget takes no retry token."""
    skipped = _skip_reason(state, ask, remote)
    if skipped is not None:
        return skipped, False
    hold = await _hold(state, ask, remote)
    if hold is not None and hold.amount == 0 and _costs(ask, remote) > 0:
        return rules.SKIPPED_BUDGET, False
    if rules.takes_retry(tried_remotes=attempts, sent_locally=ask.sent_locally) and (
        not state.router.try_retry(ask.parsed.model)
    ):
        await _release(state, hold)
        return rules.SKIPPED_RETRIES, False
    if not state.remotes.take(ask.entry.key, remote):  # filled up while the budget was asked
        await _release(state, hold)
        return rules.SKIPPED_BUSY, False
    try:
        return await _sent(
            state, ask, remote, hold, request=request, headers=headers, meter=meter, begin=begin
        )
    finally:
        state.remotes.release(ask.entry.key, remote)


async def _sent(
    state: GatewayState,
    ask: Request,
    remote: Remote,
    hold: budget_store.Held | None,
    *,
    request: web.Request,
    headers: dict[str, str],
    meter: proxy.Meter,
    begin: Callable[[Spilled | None], None],
) -> Spilled | tuple[str, bool]:
    """The request at ``remote``: its answer relayed, or why it failed before any byte."""
    key, route = state.remotes.key(remote, namespace=ask.entry.namespace), ask.entry.key
    assert key is not None and state.engines is not None
    due = min(ask.due, time.monotonic() + remote.timeout_seconds)
    body = rules.remote_body(
        ask.engine_body, remote=remote, route_name=ask.entry.name, salt=ask.salt
    )
    sent = {k: v for k, v in headers.items() if k not in _LOCAL_ONLY}
    sent.update({TARGET_HEADER: f"remote/{remote.name}", REASON_HEADER: ask.local.reason.value})
    upstream_headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "X-Request-Id": headers.get("X-Request-Id", ""),
    }
    if remote.kind == "Gateway":  # the deadline goes on: the remote queues and sheds by it
        upstream_headers[deadlines.HEADER] = str(max(1, int((due - time.monotonic()) * 1000)))
    call = proxy.Call(
        url=rules.url(remote, bodies.PATHS[ask.parsed.kind]),
        body=orjson.dumps(body),
        stream=ask.parsed.stream,
        strip_usage=ask.parsed.stream and not ask.parsed.include_usage,
        deadline=due,
        headers=sent,
        upstream_headers=upstream_headers,
        served_by=str(body["model"]),
        served_by_header=MODEL_HEADER if remote.kind == "Gateway" else "",
    )
    spilled = Spilled(entry=ask.entry, remote=remote, hold=hold, asked=call.served_by)
    begin(spilled)  # from here on the caller settles it, whatever happens
    gauge = state.metrics.spill.in_flight.labels(ask.entry.namespace, ask.entry.name, remote.name)
    gauge.inc()
    try:
        spilled.outcome = await proxy.forward(
            call, client=state.engines, request=request, meter=meter
        )
    except proxy.UpstreamFailed as failed:
        begin(None)
        await _release(state, hold)
        # down or failing, or its own timeout (not the request's deadline) fired: ejected
        if failed.retryable or (failed.cause == "deadline" and time.monotonic() < ask.due - 0.05):
            span = state.remotes.failed(route, remote, now=time.monotonic())
            log_failure(ask, remote, failed.cause, span)
        return failed.cause, True
    finally:
        gauge.dec()
    state.remotes.succeeded(route, remote)
    for local in _LOCAL_ONLY:
        headers.pop(local, None)
    headers.update({TARGET_HEADER: sent[TARGET_HEADER], REASON_HEADER: sent[REASON_HEADER]})
    return spilled


def log_failure(ask: Request, remote: Remote, cause: str, span: float) -> None:
    logger.warning(
        "route %s: remote %s failed (%s); skipped for %.0f s",
        ask.entry.key,
        remote.name,
        cause,
        span,
    )


def _count(state: GatewayState, ask: Request, remote: Remote, outcome: str) -> None:
    state.metrics.spill.spills.labels(
        ask.entry.namespace, ask.entry.name, remote.name, ask.trigger, outcome
    ).inc()


async def settle(state: GatewayState, spilled: Spilled, record: usage.Record) -> None:
    """A spilled request's tokens and spend, counted by remote; its spend hold corrected."""
    entry, remote = spilled.entry, spilled.remote
    spent = cost.micro(
        prompt_tokens=record.prompt, completion_tokens=record.completion, rate=spilled.rate
    )
    m = state.metrics.spill  # counted first: the spend hold's write cannot skip them
    m.tokens.labels(entry.namespace, entry.name, remote.name, "prompt").inc(record.prompt)
    m.tokens.labels(entry.namespace, entry.name, remote.name, "completion").inc(record.completion)
    if spent:
        m.spend.labels(entry.namespace, entry.name, remote.name, entry.currency).inc(
            spent / 1_000_000
        )
    if spilled.hold is not None:
        await state.budgets.settle(spilled.hold, used=spent)
