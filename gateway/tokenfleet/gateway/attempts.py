"""One admitted request's attempts: revision → endpoint → forward, and retry elsewhere.

The revision is chosen once (operator weights, or the ``X-TokenFleet-Revision`` pin), so one
request is served by one revision end to end. Each attempt asks the routing core for an
endpoint this request has not tried. A failure is retried only while nothing has reached the
client (proxy raises UpstreamFailed exactly then), only if another endpoint may do better
(connect error, 5xx, 429) and one is left to try, only within ``max_attempts``, the retry
budget and the deadline,
after a jittered backoff. A stream that breaks after its first byte ends with an error event
and is never retried: the client already holds part of an answer.

A LoRA adapter's request (``work.model.adapter``) is placed by adapter affinity instead
(:func:`_route_adapter`: :mod:`.adapter_slots`), its adapter loaded there first; an engine that
answers 404 for it before any byte (another gateway evicted it) is forgotten as a holder and
the request placed again once, within the retry budget.

The caller's headers and log are left alone: :func:`serve` returns the outcome, and tells the
caller where each attempt goes (a :class:`Trail`) before it is sent, so a request whose client
leaves mid-attempt is still logged with the endpoint it was on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.gateway import proxy
from tokenfleet.gateway.catalog import Model, Pool
from tokenfleet.gateway.policy import adapter_loads, bodies, prefix, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.state import GatewayState

#: Pins a request to one revision (testing a canary); the response names the revision served.
REVISION_HEADER = "X-TokenFleet-Revision"
#: The retry reason of an adapter the engine no longer had (another gateway evicted it).
ADAPTER_LOST = "adapter_lost"
_ID = "X-Request-Id"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Work:
    """What every attempt sends."""

    parsed: bodies.Parsed
    model: Model
    pool: Pool
    body: Mapping[str, Any]
    due: float
    capture_bytes: int = 0  # a stream's events to keep for the response cache (0: none)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Trail:
    """Where one attempt went, for the access log and the response's revision header."""

    endpoint: str  # its URL
    why: str  # the routing reason, a metric label
    attempt: int  # 1 for the first
    revision: str  # the endpoint's ("" when it has none)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """What every attempt of one request shares: its endpoints and its prefix."""

    group: routing.Group  # the chosen revision's endpoints
    hashes: tuple[bytes, ...]  # the prompt's block hashes (none unless routing reads them)
    match: prefix.Match


def _plan(work: Work, *, state: GatewayState, pinned: str | None) -> _Plan | Rejected:
    """The revision (once per request), its endpoints, and the prompt's place in the index."""
    router, snapshot, model, pool = state.router, state.catalog.endpoints, work.model, work.pool
    revision = routing.choose_revision(
        model.revision_weights,
        available=snapshot.revisions(model.name, pool=pool.key),
        pinned=pinned,
        rng=router.rng,
    )
    if revision is None:
        return Rejected(
            reason=Reason.NO_ENDPOINTS,
            retry_after=5.0,
            message=f"revision '{pinned}' of '{model.name}' has no ready replica",
        )
    hashes = (
        prefix.block_hashes(
            work.parsed.prefix_text, model=model.name, salt=str(work.body.get("cache_salt", ""))
        )
        if routing.wants_prefix(pool.routing) and model.adapter is None  # adapters: by slots
        else ()
    )
    return _Plan(
        group=snapshot.group(model.name, pool=pool.key, revision=revision),
        hashes=hashes,
        match=router.index.match(hashes) if hashes else prefix.NO_MATCH,
    )


async def serve(
    work: Work,
    *,
    state: GatewayState,
    request: web.Request,
    headers: Mapping[str, str],
    tried: Callable[[Trail], None],
    meter: proxy.Meter,
) -> proxy.Outcome | Rejected:
    """Forward ``work`` until an endpoint answers; Rejected if none did before any byte.

    ``headers`` go on the response (with the serving revision's); ``tried`` hears each
    attempt's :class:`Trail` before it is sent; ``meter`` counts what the request consumed."""
    plan = _plan(work, state=state, pinned=request.headers.get(REVISION_HEADER))
    if isinstance(plan, Rejected):
        return plan
    router, model = state.router, work.model
    payload = orjson.dumps(work.body)
    router.count_request()
    sent = dict(headers)  # the last revision stays on them if a later endpoint has none
    failed_on: frozenset[str] = frozenset()
    failure = Rejected(
        reason=Reason.NO_ENDPOINTS,
        retry_after=5.0,
        message=f"no ready replica serves '{model.name}' right now",
    )
    reloaded = False  # an adapter the engine lost is loaded again once per request
    for attempt in range(1, state.settings.max_attempts + 1):
        endpoint = (
            _route(work, plan, state=state, attempt=attempt, failed_on=failed_on, tried=tried)
            if model.adapter is None
            else await _route_adapter(
                work, plan, state=state, attempt=attempt, failed_on=failed_on, tried=tried
            )
        )
        if endpoint is None or isinstance(endpoint, Rejected):
            return endpoint or failure
        if endpoint.revision:
            sent[REVISION_HEADER] = endpoint.revision
        try:
            with _running(state, work, endpoint):
                return await _attempt(
                    state,
                    endpoint,
                    payload=payload,
                    work=work,
                    request=request,
                    headers=sent,
                    meter=meter,
                )
        except proxy.UpstreamFailed as failed:
            failure = failed.rejected
            if model.adapter is None and _none_left(plan, failed_on | {endpoint.url}):
                return failure  # nowhere else to try: the retry budget is kept for who can
            why = _retry(state, work, failed, url=endpoint.url, attempt=attempt, reloaded=reloaded)
            if why is None:
                return failure
            state.metrics.routing.retries.labels(model.name, why).inc()
            if why == ADAPTER_LOST:  # placed again: the same replica may load it again
                reloaded = True
                continue
            failed_on |= {endpoint.url}
            await asyncio.sleep(router.backoff(attempt))
    return failure


def _none_left(plan: _Plan, failed_on: frozenset[str]) -> bool:
    """Every endpoint of the request's revision has failed it: a retry could go nowhere (and
    must not spend the retry budget that a request with another endpoint, or a ModelRoute's
    spill, needs)."""
    return all(e.url in failed_on for e in plan.group.endpoints)


def _route(
    work: Work,
    plan: _Plan,
    *,
    state: GatewayState,
    attempt: int,
    failed_on: frozenset[str],
    tried: Callable[[Trail], None],
) -> routing.Endpoint | None:
    """This attempt's endpoint (none it failed on), told to the caller; None if none is left."""
    choice = state.router.choose(
        plan.group,
        model=work.model.name,
        policy=work.pool.routing,
        match=plan.match,
        tried=failed_on,
    )
    if choice is None:
        return None
    endpoint = choice.endpoint
    tried(
        Trail(
            endpoint=endpoint.url, why=choice.why.value, attempt=attempt, revision=endpoint.revision
        )
    )
    # Recorded when sent, not when answered: requests for the same prefix that arrive while
    # the first is still prefilling must follow it, not scatter and prefill it everywhere.
    state.router.record(plan.hashes, endpoint)
    return endpoint


async def _route_adapter(
    work: Work,
    plan: _Plan,
    *,
    state: GatewayState,
    attempt: int,
    failed_on: frozenset[str],
    tried: Callable[[Trail], None],
) -> routing.Endpoint | Rejected | None:
    """This attempt's endpoint for an adapter (policy.adapters.place over the revision's
    endpoints with a loader, none it failed on, outliers last), with the adapter loaded
    there; Rejected if the load failed or timed out, None if no endpoint is left."""
    adapter, router = work.model.adapter, state.router
    assert adapter is not None
    now = time.monotonic()
    ejected = router.ejected(now)
    fresh = [e for e in plan.group.endpoints if e.url not in failed_on]
    placed = state.adapters.place(
        [e for e in fresh if e.url not in ejected] or fresh,
        adapter=adapter,
        loaders=state.catalog.loaders,
        in_flight=router.in_flight,
        busy=router.lora_busy,
        now=now,
    )
    if placed is None:
        return None
    endpoint, why = plan.group.by_url[placed.url], placed.why.value
    router.take(endpoint, model=work.model.name, why=why)
    tried(Trail(endpoint=endpoint.url, why=why, attempt=attempt, revision=endpoint.revision))
    state.metrics.adapters.requests.labels(
        adapter.namespace, adapter.name, adapter_loads.PLACEMENT[placed.why]
    ).inc()
    return await _loaded(state, endpoint, work=work, evict=placed.evict)


async def _loaded(
    state: GatewayState, endpoint: routing.Endpoint, *, work: Work, evict: object
) -> routing.Endpoint | Rejected:
    """The endpoint once the adapter is loaded there; Rejected (and not in flight) if not."""
    assert work.model.adapter is not None and state.session is not None
    try:
        refused = await state.adapters.ensure(
            endpoint.url,
            adapter=work.model.adapter,
            evict=None if evict is None else str(evict),
            session=state.session,
            due=work.due,
        )
    except BaseException:
        state.router.done(endpoint, ok=None)  # the client left while it loaded: it goes on
        raise
    if refused is not None:
        state.router.done(endpoint, ok=None)
    return refused or endpoint


def _running(
    state: GatewayState, work: Work, endpoint: routing.Endpoint
) -> contextlib.AbstractContextManager[None]:
    """An adapter's request holds its adapter in use there (no load may evict it)."""
    if work.model.adapter is None:
        return contextlib.nullcontext()
    return state.adapters.using(endpoint.url, work.model.adapter.name)


def _retry(
    state: GatewayState,
    work: Work,
    failed: proxy.UpstreamFailed,
    *,
    url: str,
    attempt: int,
    reloaded: bool,
) -> str | None:
    """Why the request is tried again after ``failed`` (a metric label); None if it is not.
    An engine's 404 for an adapter this gateway believed loaded there means another gateway
    evicted it: forgotten there, the request is placed (and the adapter loaded) again once."""
    adapter = work.model.adapter
    if adapter is not None and failed.cause == "upstream_404" and not reloaded:
        state.adapters.forget(url, adapter.name)
        again = attempt < state.settings.max_attempts and state.router.try_retry(work.model.name)
        return ADAPTER_LOST if again else None
    if not _may_retry(state, failed, attempt=attempt, due=work.due, model=work.model.name):
        return None
    return failed.cause


async def _attempt(
    state: GatewayState,
    endpoint: routing.Endpoint,
    *,
    payload: bytes,
    work: Work,
    request: web.Request,
    headers: dict[str, str],
    meter: proxy.Meter,
) -> proxy.Outcome:
    """One forward; the endpoint's in-flight count and health are settled whatever happens."""
    parsed = work.parsed
    ok: bool | None = None  # cancelled (client left): says nothing about the endpoint
    assert state.engines is not None
    call = proxy.Call(
        url=endpoint.url + bodies.PATHS[parsed.kind],
        body=payload,
        stream=parsed.stream,
        strip_usage=parsed.stream and not parsed.include_usage,
        deadline=work.due,
        headers=headers,
        # the engine logs the gateway's request id: one id follows a request end to end
        upstream_headers={"Content-Type": "application/json", "X-Request-Id": headers[_ID]},
        served_by=work.model.name,
        capture_bytes=work.capture_bytes,
    )
    try:
        outcome = await proxy.forward(call, client=state.engines, request=request, meter=meter)
        ok = outcome.error is not Reason.UPSTREAM_ERROR and outcome.status < 500
        return outcome
    except proxy.UpstreamFailed as failed:
        ok = False if failed.endpoint_fault else None
        raise
    finally:
        state.router.done(endpoint, ok=ok)


def _may_retry(
    state: GatewayState, failed: proxy.UpstreamFailed, *, attempt: int, due: float, model: str
) -> bool:
    """Another endpoint may help, attempts and deadline allow it, and the budget has room."""
    return (
        failed.retryable
        and attempt < state.settings.max_attempts
        and due - time.monotonic() > 0.05  # leave the next attempt a chance to answer
        and state.router.try_retry(model)
    )
