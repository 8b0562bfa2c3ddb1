"""One admitted request's attempts: revision → endpoint → forward, and retry elsewhere.

The revision is chosen once (operator weights, or the ``X-TokenFleet-Revision`` pin), so one
request is served by one revision end to end. Each attempt asks the routing core for an
endpoint this request has not tried. A failure is retried only while nothing has reached the
client (proxy raises UpstreamFailed exactly then), only if another endpoint may do better
(connect error, 5xx, 429), only within ``max_attempts``, the retry budget and the deadline,
after a jittered backoff. A stream that breaks after its first byte ends with an error event
and is never retried: the client already holds part of an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.gateway import proxy
from tokenfleet.gateway.catalog import Model, Pool
from tokenfleet.gateway.policy import bodies, prefix, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.state import GatewayState

#: Pins a request to one revision (testing a canary); the response names the revision served.
REVISION_HEADER = "X-TokenFleet-Revision"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Work:
    """What every attempt sends."""

    parsed: bodies.Parsed
    model: Model
    pool: Pool
    body: Mapping[str, Any]
    due: float


async def serve(
    work: Work,
    *,
    state: GatewayState,
    request: web.Request,
    headers: dict[str, str],
    log: dict[str, Any],
) -> proxy.Outcome | Rejected:
    """Forward ``work`` until an endpoint answers; Rejected if none did before any byte."""
    router, snapshot, model, pool = state.router, state.catalog.endpoints, work.model, work.pool
    revision = routing.choose_revision(
        model.revision_weights,
        available=snapshot.revisions(model.name, pool=pool.key),
        pinned=request.headers.get(REVISION_HEADER),
        rng=router.rng,
    )
    if revision is None:
        return Rejected(
            reason=Reason.NO_ENDPOINTS,
            retry_after=5.0,
            message=f"revision '{request.headers.get(REVISION_HEADER)}' of '{model.name}' has "
            "no ready replica",
        )
    group = snapshot.group(model.name, pool=pool.key, revision=revision)
    hashes = (
        prefix.block_hashes(
            work.parsed.prefix_text, model=model.name, salt=str(work.body.get("cache_salt", ""))
        )
        if routing.wants_prefix(pool.routing)
        else ()
    )
    match = router.index.match(hashes) if hashes else prefix.NO_MATCH
    payload = orjson.dumps(work.body)
    router.count_request()
    tried: frozenset[str] = frozenset()
    failure = Rejected(
        reason=Reason.NO_ENDPOINTS,
        retry_after=5.0,
        message=f"no ready replica serves '{model.name}' right now",
    )
    for attempt in range(1, state.settings.max_attempts + 1):
        choice = router.choose(
            group, model=model.name, policy=pool.routing, match=match, tried=tried
        )
        if choice is None:
            return failure
        endpoint = choice.endpoint
        log.update(endpoint=endpoint.url, route_reason=choice.why.value, attempts=attempt)
        if endpoint.revision:
            headers[REVISION_HEADER] = endpoint.revision
        # Recorded when sent, not when answered: requests for the same prefix that arrive while
        # the first is still prefilling must follow it, not scatter and prefill it everywhere.
        router.record(hashes, endpoint)
        try:
            outcome = await _attempt(
                state, endpoint, payload=payload, work=work, request=request, headers=headers
            )
        except proxy.UpstreamFailed as failed:
            failure = failed.rejected
            if not _may_retry(state, failed, attempt=attempt, due=work.due, model=model.name):
                return failure
            state.metrics.routing.retries.labels(model.name, failed.cause).inc()
            tried |= {endpoint.url}
            await asyncio.sleep(router.backoff(attempt))
            continue
        return outcome
    return failure


async def _attempt(
    state: GatewayState,
    endpoint: routing.Endpoint,
    *,
    payload: bytes,
    work: Work,
    request: web.Request,
    headers: dict[str, str],
) -> proxy.Outcome:
    """One forward; the endpoint's in-flight count and health are settled whatever happens."""
    path = "/v1/chat/completions" if work.parsed.kind == "chat" else "/v1/completions"
    ok: bool | None = None  # cancelled (client left): says nothing about the endpoint
    assert state.session is not None
    try:
        outcome = await proxy.forward(
            session=state.session,
            url=endpoint.url + path,
            body=payload,
            request=request,
            stream=work.parsed.stream,
            deadline=work.due,
            headers=headers,
            served_by=work.model.name,
        )
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
