"""Step 4's response cache: look up before any quota, replay a hit, keep a complete answer
after it was served.

The decisions are :mod:`~tokenfleet.gateway.policy.cacheability`'s, the rendering
:mod:`~tokenfleet.gateway.policy.cached_answers`'s, the Redis calls :mod:`..response_store`'s; this
stage sequences them and counts what happened. A Redis failure is a miss (the store's declared
failure mode, and an error in the metrics), never a refusal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.gateway import proxy, response_store
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import ResponseCacheMetrics
from tokenfleet.gateway.policy import cacheability, cached_answers
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.stages import context, events
from tokenfleet.gateway.targets import Admitted

MODEL_HEADER = "X-TokenFleet-Model"  # as proxy sets it: the model that produced the answer
CACHEABLE = cacheability.Why.CACHEABLE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Lookup:
    """What the cache made of one request: not cached (no key), a miss to fill, or a hit."""

    key: str = ""
    revision: str = ""  # the revision the key names
    served: dict[str, Any] | None = None  # the hit, as this request's answer
    capture_bytes: int = 0  # how much of a streamed miss to keep to fill it (0: not a miss)


NOT_CACHED = Lookup()


class Cache:
    """The response cache of the models that enabled it."""

    def __init__(
        self, *, live: Live, store: response_store.ResponseStore, metrics: ResponseCacheMetrics
    ) -> None:
        self._live, self._store, self._metrics = live, store, metrics

    async def look_up(self, admitted: Admitted, passage: context.Passage) -> Lookup:
        """The request's key and, if Redis holds it, its cached answer."""
        model, pool, parsed = admitted.primary.model, admitted.primary.pool, admitted.parsed
        settings = model.response_cache
        if settings is None:
            return NOT_CACHED
        decided = cacheability.verdict(
            parsed.kind,
            parsed.body,
            weights=model.revision_weights,
            available=self._live.catalog.endpoints.revisions(model.name, pool=pool.key),
            pinned=passage.identity.pinned,
        )
        if decided.why is not CACHEABLE:
            self._metrics.skips.labels(model.name, decided.why.value).inc()
            return NOT_CACHED
        asked = parsed.body.get("cache_salt")
        key = cacheability.key(
            kind=parsed.kind,
            model=model.name,
            revision=decided.revision,
            scope=cacheability.scope(
                tenant=admitted.tenant.key,
                group=admitted.tenant.cache_group,
                caller=asked if isinstance(asked, str) else "",
            ),
            max_tokens=admitted.max_tokens,
            body=parsed.body,
        )
        served = await self._fetched(key, model=model.name, request_id=passage.identity.id)
        (self._metrics.hits if served is not None else self._metrics.misses).labels(
            model.name
        ).inc()
        passage.trace.add(events.Cached(hit=served is not None))
        capture = settings.max_entry_bytes * cacheability.STREAM_CAPTURE_FACTOR
        return Lookup(
            key=key,
            revision=decided.revision,
            served=served,
            capture_bytes=0 if served is not None else capture,
        )

    async def _fetched(self, key: str, *, model: str, request_id: str) -> dict[str, Any] | None:
        """The cached answer under ``key``; None on a miss, a Redis failure or a damaged entry."""
        try:
            entry = await self._store.get(key)
        except response_store.Unavailable:
            self._metrics.errors.labels(model, "get").inc()
            return None
        if entry is None:
            return None
        try:
            return cached_answers.answer(entry, request_id=request_id)
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            self._metrics.errors.labels(model, "decode").inc()
            return None

    @staticmethod
    async def replay(
        request: web.Request, hit: Lookup, *, admitted: Admitted, passage: context.Passage
    ) -> web.StreamResponse:
        """Answer with a hit: one JSON body, or the engine's SSE chunks in one write."""
        served, parsed = hit.served, admitted.parsed
        assert served is not None
        passage.trace.add(events.Replayed(hit.revision))
        out = passage.trace.headers()
        out[MODEL_HEADER] = admitted.primary.model.name  # the model asked: never another
        if not parsed.stream:
            return web.Response(
                body=orjson.dumps(served), content_type="application/json", headers=out
            )
        response = web.StreamResponse(
            status=200,
            headers={**out, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await response.prepare(request)
        await response.write(
            b"".join(cached_answers.events(served, include_usage=parsed.include_usage))
        )
        await response.write_eof()
        return response

    async def keep(
        self,
        lookup: Lookup,
        *,
        asked: Admitted,
        answered: context.Answered,
        passage: context.Passage,
    ) -> None:
        """Store a miss's answer when it is complete and is what the key describes: ``asked``
        is the request before a budget downgrade, ``answered`` what served it (a fallback, a
        degraded class or another revision than the key's is not stored)."""
        model, settings = asked.primary.model.name, asked.primary.model.response_cache
        outcome = answered.outcome
        if not lookup.key or lookup.served is not None or settings is None:
            return
        assert not isinstance(outcome, Rejected)
        payload = _answer_of(outcome)
        revision = passage.trace.header(events.REVISION_HEADER)
        why = cacheability.storable(
            cacheability.Served(
                status=outcome.status,
                failed=outcome.error is not None,
                payload=payload,
                oversize=outcome.oversize,
                fallback=answered.target.model.name != model,
                degraded=answered.degraded,
                other_revision=revision != lookup.revision,
            ),
            max_entry_bytes=settings.max_entry_bytes,
        )
        if why is not CACHEABLE or not isinstance(payload, bytes):
            self._metrics.skips.labels(model, why.value).inc()
            return
        try:
            await self._store.put(lookup.key, payload, ttl_seconds=settings.ttl_seconds)
        except response_store.Unavailable:
            self._metrics.errors.labels(model, "put").inc()
            return
        self._metrics.stores.labels(model).inc()


def _answer_of(outcome: proxy.Outcome) -> bytes | None:
    """The whole answer's JSON: the engine's body, or a stream's captured events assembled."""
    response = outcome.response
    body = response.body if isinstance(response, web.Response) else None
    if isinstance(body, bytes):
        return body
    return cached_answers.assembled(bytes(outcome.captured)) if outcome.captured else None
