"""Steps 5 and 6, upstream: one admitted request's attempts — revision → endpoint → forward, and
retry elsewhere.

The revision is chosen once (operator weights, or the ``X-TokenFleet-Revision`` pin), so one
request is served by one revision end to end. Each attempt asks its :class:`Placer` for an
endpoint this request has not tried. A failure is retried only while nothing has reached the
client (proxy raises UpstreamFailed exactly then), only if another endpoint may do better
(connect error, 5xx, 429) and one is left to try, only within ``max_attempts``, the retry
budget and the deadline, after a jittered backoff. A stream that breaks after its first byte
ends with an error event and is never retried: the client already holds part of an answer.

Where an attempt goes is the one hook in which requests differ: a model's request is routed
by load and prefix affinity (:class:`Routed`, :mod:`..router`); a LoRA adapter's
(``model.adapter``) is placed by adapter affinity with the adapter loaded there first
(:class:`AdapterPlaced`, :mod:`..adapter_slots`), and an engine that answers 404 for it before
any byte (another gateway evicted it) is forgotten as a holder and the request placed again
once, within the retry budget.

Each attempt is added to the request's trace before it is sent, so a request whose client
leaves mid-attempt is still logged with the endpoint it was on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import orjson
from aiohttp import web

from tokenfleet.gateway import engine_http, proxy
from tokenfleet.gateway.adapter_slots import AdapterSlots
from tokenfleet.gateway.catalog import Model, Pool
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.policy import adapter_loads, bodies, prefix, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.router import Router
from tokenfleet.gateway.stages import context, events, timeline

#: The retry reason of an adapter the engine no longer had (another gateway evicted it).
ADAPTER_LOST = "adapter_lost"


class Work(NamedTuple):
    """What every attempt sends (a tuple: built once per request, and cheaper so)."""

    parsed: bodies.Parsed
    model: Model
    pool: Pool
    body: Mapping[str, Any]
    due: float
    capture_bytes: int = 0  # a stream's events to keep for the response cache (0: none)


class Plan(NamedTuple):
    """What every attempt of one request shares: its endpoints and its prefix."""

    group: routing.Group  # the chosen revision's endpoints
    hashes: tuple[bytes, ...]  # the prompt's block hashes (none unless routing reads them)
    match: prefix.Match


class Placer(Protocol):
    """Where one attempt goes: the hook in which a model's and an adapter's requests differ."""

    #: Whether this placement reads the prompt's prefix (then hashed once per request).
    reads_prefix: bool

    async def place(
        self,
        work: Work,
        plan: Plan,
        *,
        attempt: int,
        failed_on: frozenset[str],
        trace: events.Trace,
    ) -> routing.Endpoint | Rejected | None:
        """This attempt's endpoint (in flight there, added to ``trace``), a refusal, or None
        when none is left."""
        ...

    def holding(
        self, work: Work, endpoint: routing.Endpoint
    ) -> contextlib.AbstractContextManager[None] | None:
        """What the request holds at ``endpoint`` while it runs there (None: nothing)."""
        ...

    def recovers(self, work: Work, failed: proxy.UpstreamFailed, *, url: str, again: bool) -> bool:
        """Whether the failure is this placement's to mend by placing the request again (it
        did what mends it); ``again``: it was mended once already."""
        ...

    def exhausted(self, plan: Plan, failed_on: frozenset[str]) -> bool:
        """Every endpoint a retry could go to has failed the request."""
        ...


class Routed:
    """A model's request: the routing core picks by load, prefix affinity and zone."""

    def __init__(self, router: Router) -> None:
        self._router = router

    reads_prefix = True

    async def place(
        self,
        work: Work,
        plan: Plan,
        *,
        attempt: int,
        failed_on: frozenset[str],
        trace: events.Trace,
    ) -> routing.Endpoint | Rejected | None:
        choice = self._router.choose(
            plan.group,
            model=work.model.name,
            policy=work.pool.routing,
            match=plan.match,
            tried=failed_on,
        )
        if choice is None:
            return None
        endpoint = choice.endpoint
        trace.add(
            events.Attempted(
                endpoint.url,
                choice.why.value,
                attempt,
                endpoint.revision,
                prefix_blocks=choice.prefix_blocks,
                prefix_total=plan.match.total,
            )
        )
        # Recorded when sent, not when answered: requests for the same prefix that arrive while
        # the first is still prefilling must follow it, not scatter and prefill it everywhere.
        self._router.record(plan.hashes, endpoint)
        return endpoint

    def holding(
        self, work: Work, endpoint: routing.Endpoint
    ) -> contextlib.AbstractContextManager[None] | None:
        return None

    def recovers(self, work: Work, failed: proxy.UpstreamFailed, *, url: str, again: bool) -> bool:
        return False

    def exhausted(self, plan: Plan, failed_on: frozenset[str]) -> bool:
        # a retry could go nowhere (and must not spend the retry budget that a request with
        # another endpoint, or a ModelRoute's spill, needs)
        return all(e.url in failed_on for e in plan.group.endpoints)


class AdapterPlaced:
    """A LoRA adapter's request: placed by adapter affinity (policy.adapters.place over the
    revision's endpoints with a loader, outliers last), the adapter loaded there first."""

    def __init__(self, router: Router, slots: AdapterSlots, live: Live) -> None:
        self._router, self._slots, self._live = router, slots, live

    reads_prefix = False  # adapters are placed by slots, not by prefix

    async def place(
        self,
        work: Work,
        plan: Plan,
        *,
        attempt: int,
        failed_on: frozenset[str],
        trace: events.Trace,
    ) -> routing.Endpoint | Rejected | None:
        adapter, router = work.model.adapter, self._router
        assert adapter is not None
        now = time.monotonic()
        ejected = router.ejected(now)
        fresh = [e for e in plan.group.endpoints if e.url not in failed_on]
        placed = self._slots.place(
            [e for e in fresh if e.url not in ejected] or fresh,
            adapter=adapter,
            loaders=self._live.catalog.loaders,
            in_flight=router.in_flight,
            busy=router.lora_busy,
            now=now,
        )
        if placed is None:
            return None
        endpoint, why = plan.group.by_url[placed.url], placed.why.value
        router.take(endpoint, model=work.model.name, why=why)
        trace.add(events.Attempted(endpoint.url, why, attempt, endpoint.revision))
        self._slots.metrics.requests.labels(
            adapter.namespace, adapter.name, adapter_loads.PLACEMENT[placed.why]
        ).inc()
        return await self._loaded(endpoint, work=work, evict=placed.evict)

    async def _loaded(
        self, endpoint: routing.Endpoint, *, work: Work, evict: object
    ) -> routing.Endpoint | Rejected:
        """The endpoint once the adapter is loaded there; Rejected (not in flight) if not."""
        assert work.model.adapter is not None and self._slots.session is not None
        try:
            refused = await self._slots.ensure(
                endpoint.url,
                adapter=work.model.adapter,
                evict=None if evict is None else str(evict),
                session=self._slots.session,
                due=work.due,
            )
        except BaseException:
            self._router.done(endpoint, ok=None)  # the client left while it loaded: it goes on
            raise
        if refused is not None:
            self._router.done(endpoint, ok=None)
        return refused or endpoint

    def holding(
        self, work: Work, endpoint: routing.Endpoint
    ) -> contextlib.AbstractContextManager[None] | None:
        """Its adapter in use there (no load may evict it)."""
        assert work.model.adapter is not None
        return self._slots.using(endpoint.url, work.model.adapter.name)

    def recovers(self, work: Work, failed: proxy.UpstreamFailed, *, url: str, again: bool) -> bool:
        """An engine's 404 for an adapter this gateway believed loaded there: another gateway
        evicted it. Forgotten there, the request is placed (and the adapter loaded) again."""
        adapter = work.model.adapter
        if adapter is None or failed.cause != "upstream_404" or again:
            return False
        self._slots.forget(url, adapter.name)
        return True

    def exhausted(self, plan: Plan, failed_on: frozenset[str]) -> bool:
        return False  # placement itself says when no endpoint is left


class Upstream:
    """Attempts and their relay, with the routing state, the engines' connections and the
    adapters' slots they use."""

    def __init__(
        self,
        *,
        live: Live,
        router: Router,
        slots: AdapterSlots,
        engines: engine_http.Client,
        max_attempts: int,
    ) -> None:
        self._live, self._router, self._engines = live, router, engines
        self._max_attempts = max_attempts
        self._routed = Routed(router)
        self._adapters = AdapterPlaced(router, slots, live)

    async def serve(
        self, work: Work, *, request: web.Request, passage: context.Passage
    ) -> proxy.Outcome | Rejected:
        """Forward ``work`` until an endpoint answers; Rejected if none did before any byte."""
        placer: Placer = self._routed if work.model.adapter is None else self._adapters
        plan = self._plan(work, placer, pinned=passage.identity.pinned)
        if isinstance(plan, Rejected):
            return plan
        router, model, trace = self._router, work.model, passage.trace
        payload = orjson.dumps(work.body)
        router.count_request()
        failed_on: frozenset[str] = frozenset()
        failure = Rejected(
            reason=Reason.NO_ENDPOINTS,
            retry_after=5.0,
            message=f"no ready replica serves '{model.name}' right now",
        )
        again = False  # a placement mended once (an adapter loaded again) is not mended twice
        for attempt in range(1, self._max_attempts + 1):
            endpoint = await placer.place(
                work, plan, attempt=attempt, failed_on=failed_on, trace=trace
            )
            if endpoint is None or isinstance(endpoint, Rejected):
                return endpoint or failure
            try:
                held = placer.holding(work, endpoint)
                if held is None:
                    return await self._attempt(endpoint, payload, work, request, passage)
                with held:
                    return await self._attempt(endpoint, payload, work, request, passage)
            except proxy.UpstreamFailed as failed:
                failure = failed.rejected
                trace.add(timeline.AttemptFailed(failed.cause, failure.status))
                if placer.recovers(work, failed, url=endpoint.url, again=again):
                    if not (attempt < self._max_attempts and router.try_retry(model.name)):
                        return failure
                    router.metrics.retries.labels(model.name, ADAPTER_LOST).inc()
                    again = True  # placed again: the same replica may load it again
                    continue
                if placer.exhausted(plan, failed_on | {endpoint.url}):
                    return failure  # nowhere else to try: the retry budget is kept for who can
                if not self._may_retry(failed, attempt=attempt, due=work.due, model=model.name):
                    return failure
                router.metrics.retries.labels(model.name, failed.cause).inc()
                failed_on |= {endpoint.url}
                await asyncio.sleep(router.backoff(attempt))
        return failure

    def _plan(self, work: Work, placer: Placer, *, pinned: str | None) -> Plan | Rejected:
        """The revision (once per request), its endpoints, and the prompt's place in the index."""
        snapshot, model, pool = self._live.catalog.endpoints, work.model, work.pool
        revision = routing.choose_revision(
            model.revision_weights,
            available=snapshot.revisions(model.name, pool=pool.key),
            pinned=pinned,
            rng=self._router.rng,
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
            if placer.reads_prefix and routing.wants_prefix(pool.routing)
            else ()
        )
        return Plan(
            group=snapshot.group(model.name, pool=pool.key, revision=revision),
            hashes=hashes,
            match=self._router.index.match(hashes) if hashes else prefix.NO_MATCH,
        )

    async def _attempt(
        self,
        endpoint: routing.Endpoint,
        payload: bytes,
        work: Work,
        request: web.Request,
        passage: context.Passage,
    ) -> proxy.Outcome:
        """One forward; the endpoint's in-flight count and health are settled whatever
        happens."""
        parsed, request_id = work.parsed, passage.identity.id
        ok: bool | None = None  # cancelled (client left): says nothing about the endpoint
        call = proxy.Call(
            url=endpoint.url + bodies.PATHS[parsed.kind],
            body=payload,
            stream=parsed.stream,
            strip_usage=parsed.stream and not parsed.include_usage,
            deadline=work.due,
            headers=passage.trace.headers(),
            # the engine logs the gateway's request id: one id follows a request end to end
            upstream_headers={"Content-Type": "application/json", "X-Request-Id": request_id},
            served_by=work.model.name,
            capture_bytes=work.capture_bytes,
            write_stall=self._router.settings.write_stall_seconds,
            engine_namespace=endpoint.namespace,
        )
        timeline.propagate(passage.trace, call.upstream_headers)  # the engine joins the trace
        try:
            outcome = await proxy.forward(
                call, client=self._engines, request=request, meter=passage.meter
            )
            ok = outcome.error is not Reason.UPSTREAM_ERROR and outcome.status < 500
            return outcome
        except proxy.UpstreamFailed as failed:
            ok = False if failed.endpoint_fault else None
            raise
        finally:
            self._router.done(endpoint, ok=ok)

    def _may_retry(
        self, failed: proxy.UpstreamFailed, *, attempt: int, due: float, model: str
    ) -> bool:
        """Another endpoint may help, attempts and deadline allow it, and the budget has room."""
        return (
            failed.retryable
            and attempt < self._max_attempts
            and due - time.monotonic() > 0.05  # leave the next attempt a chance to answer
            and self._router.try_retry(model)
        )
