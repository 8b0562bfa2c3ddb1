"""The gateway's HTTP surface: OpenAI-compatible routes, health, metrics, and the app factory
— the one place the process's parts are built and each stage of the request path is handed
exactly the parts it needs.

The completion recipe lives in :mod:`tokenfleet.gateway.completion`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from tokenfleet.gateway import (
    adapter_catalog,
    adapter_slots,
    completion,
    engine_http,
    router,
    trace_export,
)
from tokenfleet.gateway.accesslog import ACCESS
from tokenfleet.gateway.budget_store import BudgetStore
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.engine_keys import EngineKeys
from tokenfleet.gateway.fleet_registry import FleetRegistry
from tokenfleet.gateway.intake import authenticate, reject
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import Metrics
from tokenfleet.gateway.policy import bodies
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.queues import Admitter
from tokenfleet.gateway.quota_store import QuotaStore
from tokenfleet.gateway.redis_backend import Backend
from tokenfleet.gateway.remotes import Remotes
from tokenfleet.gateway.response_store import ResponseStore
from tokenfleet.gateway.stages import (
    Budgets,
    Cache,
    Intake,
    Queue,
    Quota,
    Report,
    Settle,
    Spill,
    Stages,
)
from tokenfleet.gateway.stages.tracing import Tracer
from tokenfleet.gateway.stages.upstream import Upstream
from tokenfleet.gateway.state import STATE, GatewayState
from tokenfleet.gateway.usage_ledger import UsageLedger

access_log = logging.getLogger("tokenfleet.gateway.access")
log = logging.getLogger("tokenfleet.gateway")


def completions_of(
    kind: bodies.Kind, stages: Stages
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of one OpenAI endpoint: the completion recipe over the app's stages."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return await completion.answer(request, kind, stages)

    return handle


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    tenant = authenticate(state.catalog, request.headers.get("Authorization"))
    if isinstance(tenant, Rejected):
        return reject(tenant)
    visible = state.catalog.visible(tenant.namespace)
    names = sorted(n for n, m in visible.items() if tenant.may_use(n, m))
    names += state.catalog.adapters_for(tenant)  # LoRA adapters: those that name the tenant
    names += state.catalog.routes_for(tenant)  # ModelRoutes' public names it is allowed
    data = [_model_entry(n) for n in names]
    return web.json_response({"object": "list", "data": data})


def _model_entry(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "tokenfleet"}


async def get_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: the model, if the caller may use it (OpenAI's retrieve)."""
    state = request.app[STATE]
    tenant = authenticate(state.catalog, request.headers.get("Authorization"))
    if isinstance(tenant, Rejected):
        return reject(tenant)
    name = request.match_info["model"]
    model = state.catalog.visible(tenant.namespace).get(name)
    adapter = name in (*state.catalog.adapters_for(tenant), *state.catalog.routes_for(tenant))
    if not adapter and (model is None or not tenant.may_use(name, model)):
        return reject(
            Rejected(
                reason=Reason.MODEL_NOT_FOUND, param="model", message=f"model '{name}' not found"
            )
        )
    return web.json_response(_model_entry(name))


async def health(request: web.Request) -> web.Response:
    """vLLM's ``GET /health``: 200 with no body while the gateway can serve, else 503 (load
    balancers and clients such as guidellm probe it)."""
    ready = await readyz(request)
    return web.Response(status=ready.status)


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    catalog = state.catalog
    checks = {
        "catalog": state.live.loaded,
        "tenants": bool(catalog.tenants_by_key_hash),
        "answers": catalog.answerable(),  # an endpoint, a model to hold for, or a spill route
        "quota_backend": state.quotas.healthy or state.settings.quota_failure == "open",
        "draining": not state.draining,
    }
    ready = all(checks.values())
    detail = {
        "ready": ready,
        "checks": checks,
        "quota_mode": ("shared" if state.quotas.healthy else f"fail-{state.settings.quota_failure}")
        if state.quotas.shared
        else "local",
    }
    return web.json_response(detail, status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.metrics.quota_backend_up.set(1 if state.quotas.healthy else 0)
    registry = state.metrics.registry
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:  # several workers: add up every process's files
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


@web.middleware
async def openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Unknown routes and methods, and anything unexpected, in OpenAI's error shape."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPNotFound:
        return reject(Rejected(reason=Reason.NOT_FOUND, message=f"no route {request.path}"))
    except web.HTTPMethodNotAllowed:
        return reject(
            Rejected(
                reason=Reason.METHOD_NOT_ALLOWED, message=f"{request.method} is not allowed here"
            )
        )
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unexpected error on %s", request.path)
        return web.Response(
            status=500,
            content_type="application/json",
            body=orjson.dumps(
                {
                    "error": {
                        "message": "internal error",
                        "type": "server_error",
                        "param": None,
                        "code": "internal_error",
                    }
                }
            ),
        )


def create_app(settings: Settings, *, metrics_registry: Any = None) -> web.Application:
    """The aiohttp application; a catalog source must call ``app[STATE].swap()``."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[openai_errors])
    app[STATE] = parts = build(settings, Metrics.create(metrics_registry))
    traces = (
        trace_export.Export(settings.tracing, registry=parts.metrics.registry)
        if settings.tracing.on
        else None
    )
    stages = stages_of(
        settings,
        live=parts.live,
        metrics=parts.metrics,
        quotas=parts.quotas,
        budgets=parts.budgets,
        responses=parts.responses,
        ledger=parts.usage,
        admitter=parts.admitter,
        router=parts.router,
        adapters=parts.adapters,
        remotes=parts.remotes,
        engines=parts.engines,
        traces=traces,
    )
    for path, kind in PATHS.items():
        app.router.add_post(path, completions_of(kind, stages))
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model}", get_model)
    app.router.add_get("/health", health)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if settings.metrics_port:
        app.cleanup_ctx.append(_metrics_port)
    else:
        app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(_fleet_registry)  # first: registered before the catalog loads
    app.cleanup_ctx.append(_client_session)
    app.cleanup_ctx.append(_access_log)
    app.cleanup_ctx.append(_queue_gauges)
    app.cleanup_ctx.append(
        router.scraping(lambda a: a[STATE].router, lambda a: a[STATE].catalog.endpoints.endpoints)
    )
    app.cleanup_ctx.append(_adapter_listings)
    if traces is not None:
        app.cleanup_ctx.append(traces.run)
    return app


#: The OpenAI-compatible endpoints the recipe answers, by the kind of body each takes.
PATHS: dict[str, bodies.Kind] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
    "/v1/responses": "response",
}


def build(settings: Settings, registry: Metrics) -> GatewayState:
    """The process's parts: one Redis backend shared by every store, the routing and queue
    state, the engines' connections (with each namespace's engine key, derived once)."""
    redis = Backend(settings.redis_url)
    keys = EngineKeys(settings.engine_key)
    return GatewayState(
        settings=settings,
        metrics=registry,
        live=Live(processes=settings.processes),
        redis=redis,
        quotas=QuotaStore(
            backend=redis,
            failure=settings.quota_failure,
            replicas=settings.processes,  # each process leases (and fails open) on its own
        ),
        budgets=BudgetStore(backend=redis, failure=settings.quota_failure),
        responses=ResponseStore(settings.cache_redis_url)
        if settings.cache_redis_url  # a Redis of its own: its evictions never touch quotas
        else ResponseStore(backend=redis),
        usage=UsageLedger(backend=redis, registry=registry.registry),
        admitter=Admitter(),
        router=router.Router(settings, registry.routing),
        adapters=adapter_slots.AdapterSlots(registry.adapters, engine_keys=keys),
        remotes=Remotes(settings.remote_keys_dir),
        engines=engine_http.Client(
            connect_seconds=settings.upstream_connect_seconds, engine_keys=keys
        ),
    )


def stages_of(
    settings: Settings,
    *,
    live: Live,
    metrics: Metrics,
    quotas: QuotaStore,
    budgets: BudgetStore,
    responses: ResponseStore,
    ledger: UsageLedger | None,
    admitter: Admitter,
    router: router.Router,
    adapters: adapter_slots.AdapterSlots,
    remotes: Remotes,
    engines: engine_http.Client,
    traces: trace_export.Export | None = None,
) -> Stages:
    """Each stage of the request path, with exactly the parts it needs."""
    m = metrics
    upstream = Upstream(
        live=live,
        router=router,
        slots=adapters,
        engines=engines,
        max_attempts=settings.max_attempts,
    )
    spill = Spill(remotes=remotes, budgets=budgets, router=router, engines=engines, metrics=m.spill)
    return Stages(
        intake=Intake(
            live=live,
            settings=settings,
            draw=router.rng.random,
            route_decisions=m.routing.route_decisions,
        ),
        cache=Cache(live=live, store=responses, metrics=m.response_cache),
        quota=Quota(store=quotas),
        budget=Budgets(store=budgets, live=live),
        queue=Queue(
            live=live,
            admitter=admitter,
            upstream=upstream,
            metrics=m,
            fair_queuing=settings.fair_queuing,
            cold_start_seconds=settings.cold_start_seconds,
            spills_instead=spill.spills_instead,
        ),
        spill=spill,
        report=Report(
            metrics=m,
            live=live,
            access_log=ACCESS if settings.access_log else None,
            tracer=None if traces is None else Tracer(traces),
        ),
        settle=Settle(
            quotas=quotas,
            budgets=budgets,
            ledger=ledger,
            live=live,
            metrics=m,
        ),
    )


async def _adapter_listings(app: web.Application) -> Any:
    """Keep each worker's adapters current (adapter_slots.refresh_forever): other gateways
    load and evict on the same workers."""
    state = app[STATE]
    interval = state.settings.adapter_listing_seconds
    if interval <= 0:
        yield
        return

    def loaders() -> dict[str, tuple[adapter_catalog.Loader, str]]:
        catalog = state.catalog
        return {
            e.url: (catalog.loaders[e.url], adapter_catalog.namespace_of(e))
            for e in catalog.endpoints.endpoints
            if e.url in catalog.loaders
        }

    # short connections, as the /metrics scrape: a listing every few seconds per worker
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True)
    )  # each request carries its sidecar's namespace's key (adapter_slots)
    task = asyncio.create_task(
        adapter_slots.refresh_forever(state.adapters, session, loaders, interval=interval)
    )
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await session.close()


QUEUE_GAUGE_SECONDS = 0.5


async def _queue_gauges(app: web.Application) -> Any:
    """Keep queue depth and oldest age current while requests wait: a request only updates
    them when it enters or leaves, and the autoscaler must see a queue that is aging."""

    async def refresh() -> None:
        state = app[STATE]
        while True:
            now = time.monotonic()
            for key, q in state.admitter.pools.items():
                for cls in list(q.queued):
                    state.metrics.observe_queue(key, cls, q.depth(cls), q.oldest_age(cls, now))
            await asyncio.sleep(QUEUE_GAUGE_SECONDS)

    task = asyncio.create_task(refresh())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _fleet_registry(app: web.Application) -> Any:
    """This process in its fleet's registry (policy.fleet): the slots' share follows the
    processes alive, not a configured count."""
    state = app[STATE]
    registry = FleetRegistry(
        state.redis,
        fleet_name=state.settings.fleet_name,
        configured=state.settings.processes,
        on_count=state.set_processes,
    )
    async with registry.running():
        yield


async def _access_log(_: web.Application) -> Any:
    async with ACCESS.running():
        yield


async def _metrics_port(app: web.Application) -> Any:
    """/metrics on its own port (settings.metrics_port), never on the public API's: it names
    every tenant and their usage. Every worker process binds it (SO_REUSEPORT), and any of
    them answers for all (the multiprocess collector)."""
    settings = app[STATE].settings
    side = web.Application()
    side[STATE] = app[STATE]
    side.router.add_get("/metrics", metrics)
    runner = web.AppRunner(side, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.metrics_port, reuse_port=True).start()
    yield
    await runner.cleanup()


async def _client_session(app: web.Application) -> Any:
    """The adapters' loads go through one session made at start (it needs the loop); at the
    end every store, the Redis backend and the engines' connections close."""
    state = app[STATE]
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
    state.adapters.session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, connect=state.settings.upstream_connect_seconds),
        auto_decompress=False,
    )  # each load carries its sidecar's namespace's key (adapter_slots)
    yield
    await state.close()
    await state.adapters.session.close()
