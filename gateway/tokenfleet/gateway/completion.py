"""One completion request's way through the gateway, as a recipe.

authenticate → parse → resolve the model → the pool's context bucket and the tenant's cap →
deadline → quota reservation → admission → endpoint → relay → settle → observe. Every
refusal is a Rejected value, rendered by :func:`reject`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from tokenfleet.gateway import attempts, keys, proxy
from tokenfleet.gateway.catalog import Catalog, Model, Pool, Tenant
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.policy import admission, bodies, deadlines, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.policy.salt import cache_salt
from tokenfleet.gateway.state import STATE

#: Admission refusals that mean "no room on this model": its fallback may take the request.
NO_ROOM = frozenset(
    {
        Reason.NO_ENDPOINTS,
        Reason.QUEUE_FULL,
        Reason.QUEUE_TIMEOUT,
        Reason.DEADLINE_UNMEETABLE,
        Reason.SHED,
    }
)

access_log = logging.getLogger("tokenfleet.gateway.access")
log = logging.getLogger("tokenfleet.gateway")


def reject(rejected: Rejected, extra: Mapping[str, str] | None = None) -> web.Response:
    headers = dict(extra or {})
    if rejected.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(rejected.retry_after)))
    return web.Response(
        body=orjson.dumps(rejected.body()),
        status=rejected.status,
        content_type="application/json",
        headers=headers,
    )


def authenticate(catalog: Catalog, header: str | None) -> Tenant | Rejected:
    if not header or not header.startswith("Bearer ") or len(header) < 8:
        return Rejected(
            reason=Reason.MISSING_API_KEY,
            message="missing API key: send 'Authorization: Bearer <key>'",
        )
    tenant = catalog.tenants_by_key_hash.get(keys.hash_key(header[7:].strip()))
    if tenant is None:
        return Rejected(reason=Reason.INVALID_API_KEY, message="invalid API key")
    return tenant


async def read_body(request: web.Request, settings: Settings) -> bytes | Rejected:
    too_big = Rejected(
        reason=Reason.BODY_TOO_LARGE,
        message=f"request body larger than {settings.max_body_bytes} bytes",
    )
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        return too_big
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return too_big
    except TimeoutError:
        return Rejected(reason=Reason.BODY_TIMEOUT, message="the request body arrived too slowly")


def pick_pool(catalog: Catalog, model: Model, prompt_tokens: int, cls: str = "") -> Pool | None:
    options = [catalog.pools[p].option() for p in model.pools if p in catalog.pools]
    key = routing.choose_pool(options, prompt_tokens=prompt_tokens, cls=cls)
    return catalog.pools[key] if key is not None else None


_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def _new_request_id() -> str:
    """Unique per process and restart; cheaper than uuid4 on the hot path."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):010x}"


class Completion:
    """One completion request on its way through the gateway."""

    def __init__(self, request: web.Request, kind: bodies.Kind) -> None:
        self.request = request
        self.kind = kind
        self.state = request.app[STATE]
        self.started = time.monotonic()
        self.request_id = request.headers.get("X-Request-Id", "")[:64] or _new_request_id()
        self.log: dict[str, Any] = {"request_id": self.request_id, "route": request.path}
        self.used_tokens = 0  # what the request has consumed so far: settled even on cancel
        self.headers = {"X-Request-Id": self.request_id}  # on the response, whoever answers

    async def run(self) -> web.StreamResponse:
        catalog = self.state.catalog
        tenant = authenticate(catalog, self.request.headers.get("Authorization"))
        if isinstance(tenant, Rejected):
            return self.refuse(tenant)
        self.log["tenant"] = tenant.key
        body = await read_body(self.request, self.state.settings)
        if isinstance(body, Rejected):
            return self.refuse(body)
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            return self.refuse(
                Rejected(reason=Reason.MALFORMED_JSON, message="the request body is not valid JSON")
            )
        parsed = bodies.parse(decoded, self.kind)
        if isinstance(parsed, Rejected):
            return self.refuse(parsed)
        self.log["model"] = parsed.model
        model = catalog.model(parsed.model, tenant.namespace)
        if model is None or not tenant.may_use(parsed.model, model):
            known = model is not None or parsed.model in catalog.endpoints.models()
            reason = Reason.MODEL_NOT_ALLOWED if known else Reason.MODEL_NOT_FOUND
            verb = "is not available to you" if known else "does not exist"
            return self.refuse(
                Rejected(reason=reason, param="model", message=f"model '{parsed.model}' {verb}")
            )
        pool = pick_pool(catalog, model, parsed.prompt_tokens, tenant.priority_class)
        if pool is None:
            return self.refuse(
                Rejected(
                    reason=Reason.NO_ENDPOINTS,
                    retry_after=5.0,
                    message=f"model '{parsed.model}' has no pool configured",
                )
            )
        limit = bodies.check_limits(
            parsed, max_input_tokens=pool.max_input_tokens, max_tokens_cap=tenant.max_tokens_cap
        )
        if limit is not None:
            return self.refuse(limit)
        cls = admission.class_for(tenant.priority_class, pool.classes)
        self.log.update(pool=pool.key, **{"class": cls})
        due = deadlines.deadline(
            now=self.started,
            header=self.request.headers.get(deadlines.HEADER),
            default_seconds=pool.classes[cls].default_deadline,
        )
        if isinstance(due, Rejected):
            return self.refuse(due)
        max_tokens = min(parsed.max_tokens, tenant.max_tokens_cap or parsed.max_tokens)
        reservation = await self.state.quotas.reserve(
            tenant.key, tenant.limits, parsed.prompt_tokens + max_tokens
        )
        if isinstance(reservation, Rejected):
            return self.refuse(reservation)
        try:
            return await self.served(
                parsed, tenant=tenant, model=model, pool=pool, due=due, max_tokens=max_tokens
            )
        finally:
            await self.state.quotas.settle(reservation, self.used_tokens)

    async def served(
        self,
        parsed: bodies.Parsed,
        *,
        tenant: Tenant,
        model: Model,
        pool: Pool,
        due: float,
        max_tokens: int,
    ) -> web.StreamResponse:
        """The model, or its fallback when the model has no ready replica or no room."""
        catalog = self.state.catalog
        fallback = catalog.model(model.fallback, model.namespace) if model.fallback else None
        fallback_pool = pick_pool(catalog, fallback, parsed.prompt_tokens) if fallback else None
        work = functools.partial(
            self.admitted, parsed=parsed, tenant=tenant, due=due, max_tokens=max_tokens
        )

        def fallback_ready() -> bool:
            endpoints = self.state.catalog.endpoints
            return bool(
                fallback
                and fallback_pool
                and endpoints.group(fallback.name, pool=fallback_pool.key)
            )

        why = "no_endpoints"
        if catalog.endpoints.group(model.name, pool=pool.key) or not fallback_ready():
            result = await work(model=model, pool=pool)  # nothing anywhere: hold for a cold start
            if not (isinstance(result, Rejected) and result.reason in NO_ROOM and fallback_ready()):
                return self.refuse(result) if isinstance(result, Rejected) else result
            why = result.reason.value
        assert fallback is not None and fallback_pool is not None
        self.state.metrics.routing.fallbacks.labels(model.name, fallback.name, why).inc()
        self.log.update(fallback_from=model.name, fallback_reason=why)
        self.headers["X-TokenFleet-Fallback-From"] = model.name
        result = await work(model=fallback, pool=fallback_pool)
        return self.refuse(result) if isinstance(result, Rejected) else result

    async def admitted(
        self,
        *,
        parsed: bodies.Parsed,
        tenant: Tenant,
        model: Model,
        pool: Pool,
        due: float,
        max_tokens: int,
    ) -> web.StreamResponse | Rejected:
        """Hold through a cold start, queue, route and proxy; Rejected if it never started."""
        state, admitter = self.state, self.state.admitter
        cls = admission.class_for(tenant.priority_class, pool.classes)
        self.log.update(pool=pool.key, **{"class": cls})
        if not state.catalog.endpoints.group(model.name, pool=pool.key):
            cold = await self.held(model, pool, due)
            if cold is not None:
                return cold
        cap = state.capacity(pool.key)
        state.metrics.pool_arrivals.labels(pool.key, cls).inc()
        state.metrics.queue_depth.labels(pool.key, cls).set(admitter.queue(pool.key).depth(cls) + 1)
        refused = await admitter.acquire(
            pool=pool.key, policies=pool.classes, capacity=cap, cls=cls, deadline=due
        )
        self.observe_queue(pool, cls)
        if refused is not None:
            return refused
        started_at = time.monotonic()
        state.metrics.queue_wait.labels(pool.key, cls).observe(started_at - self.started)
        state.metrics.in_flight.labels(pool.key, cls).inc()
        try:
            load = admitter.queue(pool.key).load(cap)
            capped = admission.max_tokens(policy=pool.classes[cls], load=load, requested=max_tokens)
            return await self.proxied(
                parsed, tenant=tenant, model=model, pool=pool, cls=cls, due=due, max_tokens=capped
            )
        finally:
            state.metrics.in_flight.labels(pool.key, cls).dec()
            admitter.release(
                pool=pool.key,
                policies=pool.classes,
                capacity=state.capacity(pool.key),
                cls=cls,
            )
            self.observe_queue(pool, cls)

    async def held(self, model: Model, pool: Pool, due: float) -> Rejected | None:
        """No ready replica: wait for one (a cold start) within the window and the deadline."""
        state = self.state
        until = min(due, time.monotonic() + state.settings.cold_start_seconds)
        while not state.catalog.endpoints.group(model.name, pool=pool.key):
            left = until - time.monotonic()
            if left <= 0:
                return Rejected(
                    reason=Reason.NO_ENDPOINTS,
                    retry_after=max(1.0, state.settings.cold_start_seconds),
                    message=f"no ready replica serves '{model.name}' right now",
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.changed.wait(), timeout=left)
        return None

    async def proxied(
        self,
        parsed: bodies.Parsed,
        *,
        tenant: Tenant,
        model: Model,
        pool: Pool,
        cls: str,
        due: float,
        max_tokens: int,
    ) -> web.StreamResponse:
        state = self.state
        body = dict(parsed.body)
        body["model"] = model.name  # aliases are the gateway's business, not the engine's
        body["cache_salt"] = cache_salt(
            secret=state.settings.salt_secret, tenant=tenant.key, group=tenant.cache_group
        )
        if max_tokens != parsed.max_tokens or parsed.max_tokens_given:
            body["max_tokens"] = max_tokens
            body.pop("max_completion_tokens", None)
        outcome = await attempts.serve(
            attempts.Work(parsed=parsed, model=model, pool=pool, body=body, due=due),
            state=state,
            request=self.request,
            headers=self.headers,
            log=self.log,
        )
        if isinstance(outcome, Rejected):
            self.used_tokens = 0  # nothing was served
            return self.refuse(outcome)
        completion = (
            outcome.completion_tokens
            if outcome.completion_tokens is not None
            else max(0, outcome.chunks - 2)
        )
        prompt = (
            outcome.prompt_tokens if outcome.prompt_tokens is not None else parsed.prompt_tokens
        )
        self.used_tokens = prompt + completion
        self.account(
            outcome, tenant=tenant, model=model, cls=cls, prompt=prompt, completion=completion
        )
        assert outcome.response is not None
        return outcome.response

    def account(
        self,
        outcome: proxy.Outcome,
        *,
        tenant: Tenant,
        model: Model,
        cls: str,
        prompt: int,
        completion: int,
    ) -> None:
        m = self.state.metrics
        now = time.monotonic()
        if outcome.first_byte_at is not None:
            m.ttft.labels(model.name, cls).observe(outcome.first_byte_at - self.started)
            self.log["ttft_ms"] = round((outcome.first_byte_at - self.started) * 1000, 2)
        for gap in outcome.gaps:
            m.inter_token.labels(model.name, cls).observe(gap)
        m.e2e.labels(model.name, cls).observe(now - self.started)
        m.prompt_tokens.labels(tenant.key, model.name).inc(prompt)
        m.completion_tokens.labels(tenant.key, model.name).inc(completion)
        outcome_name = "served" if outcome.error is None and outcome.status < 400 else "failed"
        reason = (
            outcome.error.value
            if outcome.error
            else ("" if outcome.status < 400 else f"upstream_{outcome.status}")
        )
        self.count(outcome_name, reason, model=model.name, cls=cls)
        self.log.update(
            status=outcome.status,
            outcome=outcome_name,
            reason=reason,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
        self.write_log()

    def observe_queue(self, pool: Pool, cls: str) -> None:
        q = self.state.admitter.queue(pool.key)
        self.state.metrics.observe_queue(
            pool.key, cls, q.depth(cls), q.oldest_age(cls, time.monotonic())
        )

    def refuse(self, rejected: Rejected) -> web.Response:
        self.count("rejected", rejected.reason.value)
        self.log.update(status=rejected.status, outcome="rejected", reason=rejected.reason.value)
        self.write_log()
        return reject(rejected, self.headers)

    def count(self, outcome: str, reason: str, *, model: str = "", cls: str = "") -> None:
        """One request in ``tokenfleet_gateway_requests_total``, with the namespace (of the
        pool) and the revision that served it, so a canary's error rate can be read apart."""
        pool = str(self.log.get("pool", ""))
        self.state.metrics.requests.labels(
            model=model or str(self.log.get("model", "")),
            **{"class": cls or str(self.log.get("class", ""))},
            outcome=outcome,
            reason=reason,
            namespace=pool.split("/", 1)[0] if "/" in pool else "",
            revision=self.headers.get(attempts.REVISION_HEADER, ""),
        ).inc()

    def write_log(self) -> None:
        if self.state.settings.access_log:
            self.log["total_ms"] = round((time.monotonic() - self.started) * 1000, 2)
            access_log.info(json.dumps(self.log, separators=(",", ":")))
