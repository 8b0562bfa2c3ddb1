"""One completion request's way through the gateway, as a recipe.

:meth:`Completion.answer` runs the request path of docs/architecture.md, one step each:

1. **authenticate** — the API key → a Tenant;
2. **validate** — the body, the model and the tenant's right to it (a ModelRoute's public name
   is first directed to the served model its rules choose: :mod:`.model_routing`), the pool by
   context bucket, the prompt and ``max_tokens`` limits;
3. **assign** — the traffic class and the deadline: the :class:`Admitted` request, built once;
4. **admit** — the response cache first (:mod:`.response_cache`: a hit is replayed and takes no
   tokens), the tenant's token quota and budget (:mod:`.budget_gate`), then the pool's
   queue for the class (held through a cold start), on the model or its fallback
   (:mod:`~tokenfleet.gateway.policy.fallback`), and a ModelRoute's request the local side
   cannot take spills to the route's remotes (:mod:`.spill`);
5. **route** and 6. **proxy** — revision, endpoint and retries (:mod:`.attempts`), relayed;
7. **observe** — metrics, and 8. **settle** — the one place a request's final usage
   (:class:`~tokenfleet.gateway.policy.usage.Record`) is charged: the quota, the token
   counters and the access log, whether it was served, failed or cancelled midway.

Each step returns a value or a Rejected; a Rejected is rendered in one place, :meth:`refuse`.
The business rules are pure functions in ``policy/``; this module only sequences them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import time
from typing import Any

from aiohttp import web

from tokenfleet.api import cost
from tokenfleet.gateway import (
    attempts,
    budget_gate,
    budget_store,
    model_routing,
    proxy,
    queues,
    response_cache,
    settlement,
    spill,
)
from tokenfleet.gateway.accesslog import ACCESS
from tokenfleet.gateway.catalog import Tenant
from tokenfleet.gateway.intake import authenticate, parse_body, reject
from tokenfleet.gateway.metrics import model_label, observe_all
from tokenfleet.gateway.placement import Admitted, Target, place, spare_for
from tokenfleet.gateway.policy import admission, bodies, deadlines, fallback, model_routes, usage
from tokenfleet.gateway.policy import spill as spill_rules
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.policy.salt import cache_salt
from tokenfleet.gateway.quota_store import Reservation
from tokenfleet.gateway.route_catalog import RouteEntry
from tokenfleet.gateway.spill import Spilled
from tokenfleet.gateway.state import STATE, GatewayState

FALLBACK_HEADER = "X-TokenFleet-Fallback-From"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """What a target made of a request once it started: an upstream outcome or a refusal."""

    target: Target
    outcome: proxy.Outcome | Rejected
    remote: str = ""  # spilled: the remote that answered (remote/<name>), a metric's model


log = logging.getLogger("tokenfleet.gateway.completion")
_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def _new_request_id() -> str:
    """Unique per process and restart; cheaper than uuid4 on the hot path."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):010x}"


def _request_id(asked: str) -> str:
    """The client's X-Request-Id if it is printable ASCII (it goes on to engines, remotes and
    logs, and HTTP headers are not UTF-8), up to 64 characters; else a new one."""
    asked = asked[:64]
    return asked if asked and asked.isascii() and asked.isprintable() else _new_request_id()


class Completion:
    """One completion request on its way through the gateway: :meth:`answer` is the recipe.

    It owns what the request reports: the access-log record, the response headers, and the
    tokens used (counted as they are relayed, settled even when the client leaves)."""

    def __init__(self, request: web.Request, kind: bodies.Kind) -> None:
        self.request = request
        self.kind = kind
        self.state: GatewayState = request.app[STATE]
        self.started = time.monotonic()
        self.request_id = _request_id(request.headers.get("X-Request-Id", ""))
        self.log: dict[str, Any] = {"request_id": self.request_id, "route": request.path}
        self.meter = proxy.Meter()  # what the request has consumed so far
        self.ending: tuple[str, str] | None = None  # (outcome, reason) once it is known
        self.served: Target | None = None  # where it ran
        self.headers = {"X-Request-Id": self.request_id}  # on the response, whoever answers
        self.degraded = False  # admission lowered max_tokens under load
        self.capture_bytes = 0  # a streamed miss keeps its events for the response cache
        self.route: RouteEntry | None = None  # the ModelRoute that directed it, if one did
        self.spilled: Spilled | None = None  # a remote answered it
        self.delivered = False  # the whole answer went out (what comes after cannot undo it)
        self.settling: asyncio.Future[None] | None = None  # step 8, once it started

    async def run(self) -> web.StreamResponse:
        """The answer, or the refusal rendered; a client that left is counted and logged."""
        try:
            answer = await self.answer()
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away (or we are shutting down): upstream is already closed. One
            # that left after the last byte (many clients close at once) was served, and is
            # counted so once the settlement it interrupted has finished.
            if self.settling is not None:
                await self.settled()
            outcome, reason = (
                (self.ending or ("served", ""))
                if self.delivered or self.meter.complete
                else ("cancelled", "client_disconnected")
            )
            self.log.update(outcome=outcome, reason=reason)
            self.count(outcome, reason)
            self.write_log()
            raise
        if isinstance(answer, Rejected):
            return self.refuse(answer)
        outcome, reason = self.ending or ("served", "")
        self.log.update(outcome=outcome, reason=reason)
        self.count(outcome, reason)
        self.write_log()
        return answer

    async def answer(self) -> web.StreamResponse | Rejected:
        """The request path: each step's refusal ends it."""
        admitted = await self.admit()  # 1 authenticate, 2 validate, 3 assign
        if isinstance(admitted, Rejected):
            return admitted
        tenant, parsed = admitted.tenant, admitted.parsed
        cached = await response_cache.look_up(  # 4 the response cache, before any quota...
            self.state,
            admitted,
            pinned=self.request.headers.get(attempts.REVISION_HEADER),
            request_id=self.request_id,
        )
        self.headers.update(cached.headers())
        tokens = usage.reservation(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=admitted.max_tokens,
            sequences=parsed.sequences,
        )
        reservation = await self.state.quotas.reserve(  # ...the tenant's token quota...
            tenant.key,
            tenant.limits,
            0 if cached.served is not None else tokens,  # a hit: none
        )
        if isinstance(reservation, Rejected):
            return reservation
        if cached.served is not None:
            return await self.from_cache(admitted, cached, reservation)
        return await self.from_engine(admitted, cached, reservation)

    async def from_cache(
        self, admitted: Admitted, cached: response_cache.Lookup, reservation: Reservation
    ) -> web.StreamResponse:
        """A hit, replayed; settled as served with nothing charged."""
        if cached.revision:
            self.headers[attempts.REVISION_HEADER] = cached.revision
        self.ending = ("served", "cache_hit")
        try:
            replayed = await response_cache.replayed(
                self.request, cached, admitted=admitted, headers=self.headers
            )
            self.delivered = True
            return replayed
        finally:
            await self.settle(self.record(admitted, reservation.tokens), reservation, None)

    async def from_engine(
        self, admitted: Admitted, cached: response_cache.Lookup, reservation: Reservation
    ) -> web.StreamResponse | Rejected:
        """The budget, the queue, an engine; a miss's complete answer is kept."""
        asked = admitted  # the budget may downgrade the model: the cache keeps what was asked
        self.capture_bytes = response_cache.capture_bytes(cached, admitted)
        hold: budget_store.Held | None = None
        try:
            budgeted = await budget_gate.check(  # ...its budget (may downgrade the model)...
                self.state, admitted, headers=self.headers, log=self.log, also=self.remote_rates()
            )
            if isinstance(budgeted, Rejected):
                self.ending = ("rejected", budgeted.reason.value)
                return budgeted
            admitted, hold = budgeted
            answered = await self.run_on(admitted)  # ...the pool's queue, 5 route, 6 proxy
            if not isinstance(answered, Answered) or isinstance(answered.outcome, Rejected):
                answered = await self.spill(admitted, answered)  # ...or the route's remotes
            if isinstance(answered, Rejected):
                self.ending = ("rejected", answered.reason.value)
                return answered
            response = self.observe(admitted, answered)  # 7 observe
            self.delivered = not isinstance(response, Rejected)  # a refusal is rendered later
            if not isinstance(answered.outcome, Rejected) and not answered.remote:
                await response_cache.keep(
                    self.state,
                    cached,
                    asked=asked,
                    served_by=answered.target.model.name,
                    outcome=answered.outcome,
                    degraded=self.degraded,
                    revision=self.headers.get(attempts.REVISION_HEADER, ""),
                )
            return response
        finally:
            await self.settle(self.record(admitted, reservation.tokens), reservation, hold)  # 8

    async def admit(self) -> Admitted | Rejected:
        """Steps 1-3: who asks, for which model and pool, in which class, by when."""
        catalog, headers = self.state.catalog, self.request.headers
        tenant = authenticate(catalog, headers.get("Authorization"))  # 1 authenticate
        if isinstance(tenant, Rejected):
            return tenant
        self.log["tenant"] = tenant.key
        parsed = await parse_body(self.request, self.state.settings, self.kind)  # 2 validate
        if isinstance(parsed, Rejected):
            return parsed
        directed = self.direct(tenant, parsed)  # a ModelRoute's name → the served model it picks
        if isinstance(directed, Rejected):
            return directed
        parsed = directed.parsed if directed else parsed
        self.route = directed.entry if directed else None
        self.log["model"] = parsed.model
        primary = place(catalog, tenant, parsed, granted=directed is not None)
        if isinstance(primary, Rejected):
            return primary
        self.log.update(pool=primary.pool.key, **{"class": primary.cls})
        due = deadlines.deadline(  # 3 assign: the class is the pool's, the deadline its default
            now=self.started,
            header=headers.get(deadlines.HEADER),
            default_seconds=primary.pool.classes[primary.cls].default_deadline,
        )
        if isinstance(due, Rejected):
            return due
        return Admitted(
            tenant=tenant,
            parsed=parsed,
            primary=primary,
            fallback=spare_for(catalog, primary, tenant=tenant, prompt_tokens=parsed.prompt_tokens),
            due=due,
            max_tokens=usage.max_tokens(
                parsed.max_tokens,
                cap=tenant.max_tokens_cap,
                context=primary.model.context_tokens,
                prompt_tokens=parsed.prompt_tokens,
                sequences=parsed.sequences,
            ),
        )

    def direct(
        self, tenant: Tenant, parsed: bodies.Parsed
    ) -> model_routing.Directed | Rejected | None:
        """Step 2's route: the target's request, said in the response's headers and counted."""
        directed = model_routing.direct(
            self.state.catalog,
            tenant,
            parsed,
            headers=self.request.headers,
            draw=self.state.router.rng.random,
        )
        if directed is None or isinstance(directed, Rejected):
            return directed
        self.headers[model_routes.HEADER] = directed.header
        self.log["model_route"] = directed.header
        self.state.metrics.routing.route_decisions.labels(
            directed.entry.namespace,
            directed.entry.name,
            directed.decision.reason,
            directed.decision.model,
        ).inc()
        return (
            model_routing.unserved(self.state.catalog, directed, namespace=tenant.namespace)
            or directed
        )

    def record(self, admitted: Admitted, reserved: int) -> usage.Record:
        """The request's final usage; a request still running when this is read (the client
        left) was cancelled, unless the answer's end had reached the client."""
        gone = ("served", "") if self.meter.complete else ("cancelled", "client_disconnected")
        outcome, reason = self.ending or gone
        where = self.served or admitted.primary
        return settlement.record(
            self.meter,
            request_id=self.request_id,
            tenant=admitted.tenant.key,
            model=self.spilled.model if self.spilled else where.model.name,
            pool=self.spilled.pool if self.spilled else where.pool.key,
            ending=(outcome, reason),
            prompt_estimate=admitted.parsed.prompt_tokens,
            reserved=reserved,
        )

    async def settle(
        self, record: usage.Record, reservation: Reservation, hold: budget_store.Held | None
    ) -> None:
        """Step 8, in :func:`tokenfleet.gateway.settlement.settle`; the log records it.

        Shielded: a client that closes its connection just after the last byte cancels the
        handler, and a settlement cut off between its Redis calls would leak quota."""
        self.settling = asyncio.ensure_future(self._settle(record, reservation, hold))
        await asyncio.shield(self.settling)

    async def settled(self) -> None:
        """Wait out a settlement a cancellation interrupted, through further cancellations (a
        shutdown cancels twice); its failure is logged, as the request that ran it is gone."""
        settling = self.settling
        assert settling is not None
        while not settling.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(settling)
        if not settling.cancelled() and settling.exception() is not None:
            log.error("settling request %s failed", self.request_id, exc_info=settling.exception())

    async def _settle(
        self, record: usage.Record, reservation: Reservation, hold: budget_store.Held | None
    ) -> None:
        spilled = self.spilled
        await settlement.settle(
            self.state, record, reservation, hold, rate=spilled.rate if spilled else None
        )
        if spilled is not None:
            await spill.settle(self.state, spilled, record)
            self.log["model"] = spilled.model
        self.log.update(
            prompt_tokens=record.prompt,
            completion_tokens=record.completion,
            reserved_tokens=record.reserved,
        )

    async def run_on(self, admitted: Admitted) -> Answered | Rejected:
        """Steps 4-6 on the model, or on its fallback when the model has no ready replica or
        no room; Rejected if the request never started."""
        primary, spare = admitted.primary, admitted.fallback
        why = fallback.first(model_ready=self.ready(primary), fallback_ready=self.ready(spare))
        if why is None:  # with no replica anywhere, it is held for the model's cold start
            answered = await self.queued(admitted, primary)
            if not isinstance(answered, Rejected):
                return answered
            why = fallback.after(answered.reason, fallback_ready=self.ready(spare))
            if why is None:
                return answered
        assert spare is not None  # a fallback is only ready if there is one
        self.state.metrics.routing.fallbacks.labels(primary.model.name, spare.model.name, why).inc()
        self.log.update(fallback_from=primary.model.name, fallback_reason=why)
        self.headers[FALLBACK_HEADER] = primary.model.name
        return await self.queued(admitted, spare)

    async def spill(self, admitted: Admitted, answered: Answered | Rejected) -> Answered | Rejected:
        """A request the local side refused (before it started, or every endpoint failed
        before answering), at the first of its route's remotes that answers (:mod:`.spill`);
        ``answered`` as it was when its route has no remote for this refusal."""
        local = answered if isinstance(answered, Rejected) else answered.outcome
        assert isinstance(local, Rejected)
        entry = self.route
        trigger = (
            spill_rules.trigger(local.reason, spill_on=entry.spill_on)
            if entry is not None and entry.remotes
            else None
        )
        if entry is None or trigger is None:
            return answered
        salt = self.salt(admitted)
        ask = spill.Request(
            entry=entry,
            tenant=admitted.tenant,
            parsed=admitted.parsed,
            engine_body=bodies.upstream(
                admitted.parsed, model=entry.name, salt=salt, max_tokens=admitted.max_tokens
            ),
            salt=salt,
            due=admitted.due,
            local=local,
            trigger=trigger,
            sent_locally=self.meter.sent,
        )
        spilled = await spill.spill(
            self.state,
            ask,
            request=self.request,
            headers=self.headers,
            meter=self.meter,
            log=self.log,
            begin=self.spilling,
        )
        if isinstance(spilled, Rejected):
            return spilled
        self.log["pool"] = spilled.pool
        return Answered(target=admitted.primary, outcome=spilled.outcome, remote=spilled.label)

    def spilling(self, to: Spilled | None) -> None:
        """A remote has the request (None: that try failed before answering)."""
        self.spilled = to

    def remote_rates(self) -> list[cost.Rate]:
        """The prices of the remotes the request may spill to (a budget's worst case)."""
        entry = self.route
        return [spill_rules.rate(r, entry.currency) for r in entry.remotes] if entry else []

    def ready(self, to: Target | None) -> bool:
        """Whether ``to`` has a ready replica in the current catalog."""
        if to is None:
            return False
        return bool(self.state.catalog.endpoints.group(to.model.name, pool=to.pool.key))

    async def queued(self, admitted: Admitted, to: Target) -> Answered | Rejected:
        """Hold through a cold start, wait for a slot in the class's queue, then route and
        proxy; Rejected if it never started."""
        state, key, cls = self.state, to.pool.key, to.cls
        queue = state.admitter.queue(key)
        self.log.update(pool=key, **{"class": cls})
        if not self.ready(to):
            # a route that spills when unavailable sends it to a warm remote, not a cold start
            route = self.route
            spills = (
                route is not None
                and route.spills_on("Unavailable")
                and spill.usable(self.state, route)
            )
            cold = await self.held(to, admitted.due, window=0.0 if spills else None)
            if cold is not None:
                return cold
        capacity = state.capacity(key)
        state.metrics.pool_arrivals.labels(key, cls).inc()
        state.metrics.queue_depth.labels(key, cls).set(queue.depth(cls) + 1)
        fair = queues.Fair.of(
            admitted.tenant if state.settings.fair_queuing else None,
            prompt_tokens=admitted.parsed.prompt_tokens,
            max_tokens=admitted.output_tokens,
        )
        # admission judges waits in token work (issue 15): prompt plus reserved output
        cost = admission.work(
            prompt_tokens=admitted.parsed.prompt_tokens, max_tokens=admitted.output_tokens
        )
        refused = await state.admitter.acquire(
            pool=key,
            policies=to.pool.classes,
            capacity=capacity,
            cls=cls,
            deadline=admitted.due,
            fair=fair,
            cost=cost,
        )
        self.observe_queue(to)
        if refused is not None:
            state.metrics.pool_refusals.labels(key, cls, refused.reason.value).inc()
            return refused
        holding_since = time.monotonic()
        state.metrics.queue_wait.labels(key, cls).observe(holding_since - self.started)
        state.metrics.in_flight.labels(key, cls).inc()
        self.served = to
        first_byte_at: float | None = None
        try:
            max_tokens = admission.max_tokens(
                policy=to.pool.classes[cls],
                load=queue.load(capacity),
                requested=admitted.max_tokens,
                sequences=admitted.parsed.sequences,
            )
            self.degraded = max_tokens < admitted.max_tokens
            outcome = await self.proxied(admitted, to, max_tokens)
            if admitted.parsed.stream and not isinstance(outcome, Rejected):
                # a stream's first byte is its first token; a whole answer's is its last
                first_byte_at = outcome.first_byte_at
            return Answered(target=to, outcome=outcome)
        finally:
            state.metrics.in_flight.labels(key, cls).dec()
            state.admitter.release(
                pool=key,
                policies=to.pool.classes,
                capacity=state.capacity(key),
                cls=cls,
                held_seconds=time.monotonic() - holding_since,
                fair=fair,
                correction=fair.settle(self.meter.produced, reserved=admitted.output_tokens),
                cost=cost,
                prefill=None if first_byte_at is None else first_byte_at - holding_since,
            )
            self.observe_queue(to)

    async def held(self, to: Target, due: float, *, window: float | None = None) -> Rejected | None:
        """No ready replica: wait for one (a cold start) within the window (the settings'
        cold start by default) and the deadline."""
        state = self.state
        wait = state.settings.cold_start_seconds if window is None else window
        until = min(due, time.monotonic() + wait)
        while not self.ready(to):
            left = until - time.monotonic()
            if left <= 0:
                return Rejected(
                    reason=Reason.NO_ENDPOINTS,
                    retry_after=max(1.0, state.settings.cold_start_seconds),
                    message=f"no ready replica serves '{to.model.name}' right now",
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.changed.wait(), timeout=left)
        return None

    async def proxied(
        self, admitted: Admitted, to: Target, max_tokens: int
    ) -> proxy.Outcome | Rejected:
        """Steps 5 and 6: the engine's body, then revision, endpoint and retries."""
        parsed = admitted.parsed
        body = bodies.upstream(
            parsed, model=to.model.name, salt=self.salt(admitted), max_tokens=max_tokens
        )
        return await attempts.serve(
            attempts.Work(
                parsed=parsed,
                model=to.model,
                pool=to.pool,
                body=body,
                due=admitted.due,
                capture_bytes=self.capture_bytes,
            ),
            state=self.state,
            request=self.request,
            headers=self.headers,
            tried=self.tried,
            meter=self.meter,
        )

    def salt(self, admitted: Admitted) -> str:
        """The tenant's cache salt (a salt the client sent only splits it further)."""
        tenant, asked = admitted.tenant, admitted.parsed.body.get("cache_salt")
        return cache_salt(
            secret=self.state.settings.salt_secret,
            tenant=tenant.key,
            group=tenant.cache_group,
            caller=asked if isinstance(asked, str) else "",
        )

    def tried(self, trail: attempts.Trail) -> None:
        """An attempt is on its way: the log and the response say where."""
        self.log.update(endpoint=trail.endpoint, route_reason=trail.why, attempts=trail.attempt)
        if trail.revision:
            self.headers[attempts.REVISION_HEADER] = trail.revision

    def observe(self, admitted: Admitted, answered: Answered) -> web.StreamResponse | Rejected:
        """Step 7: how it ended, latency metrics and the log (tokens are settled after)."""
        outcome, cls = answered.outcome, answered.target.cls
        model = answered.remote or answered.target.model.name
        if isinstance(outcome, Rejected):
            self.ending = ("rejected", outcome.reason.value)
            return outcome  # nothing was served: nothing used
        m = self.state.metrics
        if outcome.first_byte_at is not None:
            m.ttft.labels(model, cls).observe(outcome.first_byte_at - self.started)
            self.log["ttft_ms"] = round((outcome.first_byte_at - self.started) * 1000, 2)
        if outcome.gaps:
            observe_all(m.inter_token.labels(model, cls), outcome.gaps)
        m.e2e.labels(model, cls).observe(time.monotonic() - self.started)
        self.ending = usage.ending(status=outcome.status, error=outcome.error)
        self.log["status"] = outcome.status
        assert outcome.response is not None  # proxy answers the client before it returns
        return outcome.response

    def observe_queue(self, to: Target) -> None:
        q = self.state.admitter.queue(to.pool.key)
        self.state.metrics.observe_queue(
            to.pool.key, to.cls, q.depth(to.cls), q.oldest_age(to.cls, time.monotonic())
        )

    def refuse(self, rejected: Rejected) -> web.Response:
        """The one place a refusal is counted, logged and rendered."""
        self.count("rejected", rejected.reason.value)
        self.log.update(status=rejected.status, outcome="rejected", reason=rejected.reason.value)
        self.write_log()
        return reject(rejected, self.headers)

    def count(self, outcome: str, reason: str) -> None:
        """One request in ``tokenfleet_gateway_requests_total``, with the tenant, and the
        namespace (of the pool) and the revision that served it, so a canary's error rate can
        be read apart."""
        pool = str(self.log.get("pool", ""))
        served, spilled = self.served, self.spilled
        asked = str(self.log.get("model", ""))  # any string the client sent: bounded here
        model = served.model.name if served else model_label(self.state.catalog, asked)
        self.state.metrics.requests.labels(  # tenant, model, class, outcome, reason, ns, revision
            str(self.log.get("tenant", "")),
            spilled.model if spilled else model,
            served.cls if served else str(self.log.get("class", "")),
            outcome,
            reason,
            pool.split("/", 1)[0] if "/" in pool else "",
            "" if spilled else self.headers.get(attempts.REVISION_HEADER, ""),
        ).inc()

    def write_log(self) -> None:
        if self.state.settings.access_log:
            self.log["total_ms"] = round((time.monotonic() - self.started) * 1000, 2)
            ACCESS.write(self.log)
