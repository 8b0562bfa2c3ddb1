"""The response cache on a request's path: look up before admission, replay a hit, keep a
complete answer after it was served.

The decisions are :mod:`~tokenfleet.gateway.policy.cacheability`'s, the rendering
:mod:`~tokenfleet.gateway.policy.replay`'s, the Redis calls :mod:`.response_store`'s; this
module sequences them and counts what happened. A Redis failure is a miss (and an error in the
metrics), never a refusal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.gateway import proxy, response_store
from tokenfleet.gateway.placement import Admitted
from tokenfleet.gateway.policy import cacheability, replay
from tokenfleet.gateway.state import GatewayState

#: On every response of a cache-enabled model's cacheable request: ``hit`` or ``miss``.
HEADER = "X-TokenFleet-Cache"
MODEL_HEADER = "X-TokenFleet-Model"  # as proxy sets it: the model that produced the answer
CACHEABLE = cacheability.Why.CACHEABLE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Lookup:
    """What the cache made of one request: not cached (no key), a miss to fill, or a hit."""

    key: str = ""
    revision: str = ""  # the revision the key names
    served: dict[str, Any] | None = None  # the hit, as this request's answer

    def headers(self) -> dict[str, str]:
        if not self.key:
            return {}
        return {HEADER: "hit" if self.served is not None else "miss"}


NOT_CACHED = Lookup()


async def look_up(
    state: GatewayState, admitted: Admitted, *, pinned: str | None, request_id: str
) -> Lookup:
    """The request's key and, if Redis holds it, its cached answer."""
    model, pool, parsed = admitted.primary.model, admitted.primary.pool, admitted.parsed
    if model.response_cache is None:
        return NOT_CACHED
    metrics = state.metrics.response_cache
    decided = cacheability.verdict(
        parsed.kind,
        parsed.body,
        weights=model.revision_weights,
        available=state.catalog.endpoints.revisions(model.name, pool=pool.key),
        pinned=pinned,
    )
    if decided.why is not CACHEABLE:
        metrics.skips.labels(model.name, decided.why.value).inc()
        return NOT_CACHED
    key = cacheability.key(
        kind=parsed.kind,
        model=model.name,
        revision=decided.revision,
        scope=cacheability.scope(
            tenant=admitted.tenant.key,
            group=admitted.tenant.cache_group,
            caller=salt if isinstance(salt := admitted.parsed.body.get("cache_salt"), str) else "",
        ),
        max_tokens=admitted.max_tokens,
        body=parsed.body,
    )
    served = await _fetched(state, key, model=model.name, request_id=request_id)
    (metrics.hits if served is not None else metrics.misses).labels(model.name).inc()
    return Lookup(key=key, revision=decided.revision, served=served)


async def _fetched(
    state: GatewayState, key: str, *, model: str, request_id: str
) -> dict[str, Any] | None:
    """The cached answer under ``key``; None on a miss, a Redis failure or a damaged entry."""
    try:
        entry = await state.responses.get(key)
    except response_store.Unavailable:
        state.metrics.response_cache.errors.labels(model, "get").inc()
        return None
    if entry is None:
        return None
    try:
        return replay.answer(entry, request_id=request_id)
    except (orjson.JSONDecodeError, TypeError, AttributeError):
        state.metrics.response_cache.errors.labels(model, "decode").inc()
        return None


async def replayed(
    request: web.Request, hit: Lookup, *, admitted: Admitted, headers: dict[str, str]
) -> web.StreamResponse:
    """Answer ``request`` with a hit: one JSON body, or the engine's SSE chunks in one write."""
    served, parsed = hit.served, admitted.parsed
    assert served is not None
    out = {**headers, MODEL_HEADER: admitted.primary.model.name}  # the model asked: never another
    if not parsed.stream:
        return web.Response(body=orjson.dumps(served), content_type="application/json", headers=out)
    response = web.StreamResponse(
        status=200,
        headers={**out, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
    )
    await response.prepare(request)
    await response.write(b"".join(replay.events(served, include_usage=parsed.include_usage)))
    await response.write_eof()
    return response


def capture_bytes(lookup: Lookup, admitted: Admitted) -> int:
    """How much of a streamed miss to keep to assemble its answer (0: not a miss to fill)."""
    settings = admitted.primary.model.response_cache
    if not lookup.key or lookup.served is not None or settings is None:
        return 0
    return settings.max_entry_bytes * cacheability.STREAM_CAPTURE_FACTOR


def _answer_of(outcome: proxy.Outcome) -> bytes | None:
    """The whole answer's JSON: the engine's body, or a stream's captured events assembled."""
    response = outcome.response
    body = response.body if isinstance(response, web.Response) else None
    if isinstance(body, bytes):
        return body
    return replay.assembled(bytes(outcome.captured)) if outcome.captured else None


async def keep(
    state: GatewayState,
    lookup: Lookup,
    *,
    asked: Admitted,
    served_by: str,
    outcome: proxy.Outcome,
    degraded: bool,
    revision: str,
) -> None:
    """Store a miss's answer when it is complete and is what the key describes: ``asked`` is
    the request before a budget downgrade, ``served_by`` the model that answered."""
    model, settings = asked.primary.model.name, asked.primary.model.response_cache
    if not lookup.key or lookup.served is not None or settings is None:
        return
    payload = _answer_of(outcome)
    why = cacheability.storable(
        cacheability.Served(
            status=outcome.status,
            failed=outcome.error is not None,
            payload=payload,
            oversize=outcome.oversize,
            fallback=served_by != model,
            degraded=degraded,
            other_revision=revision != lookup.revision,
        ),
        max_entry_bytes=settings.max_entry_bytes,
    )
    metrics = state.metrics.response_cache
    if why is not CACHEABLE or not isinstance(payload, bytes):
        metrics.skips.labels(model, why.value).inc()
        return
    try:
        await state.responses.put(lookup.key, payload, ttl_seconds=settings.ttl_seconds)
    except response_store.Unavailable:
        metrics.errors.labels(model, "put").inc()
        return
    metrics.stores.labels(model).inc()
