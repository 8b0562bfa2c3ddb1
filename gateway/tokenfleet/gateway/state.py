"""The gateway's per-process state, carried in the aiohttp app under one typed key."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import aiohttp
from aiohttp import web

from tokenfleet.gateway import engine_http
from tokenfleet.gateway.adapter_slots import AdapterSlots
from tokenfleet.gateway.budget_store import BudgetStore
from tokenfleet.gateway.catalog import Catalog
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.metrics import Metrics
from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.queues import Admitter
from tokenfleet.gateway.quota_store import QuotaStore
from tokenfleet.gateway.redis_backend import Backend
from tokenfleet.gateway.remotes import Remotes
from tokenfleet.gateway.response_store import ResponseStore
from tokenfleet.gateway.router import Router
from tokenfleet.gateway.usage_ledger import UsageLedger

log = logging.getLogger("tokenfleet.gateway.state")


@dataclasses.dataclass(slots=True, kw_only=True)
class GatewayState:
    settings: Settings
    metrics: Metrics
    redis: Backend  # the one Redis backend every store shares
    quotas: QuotaStore
    admitter: Admitter
    router: Router
    adapters: AdapterSlots
    usage: UsageLedger | None = None  # the durable usage ledger (counters without Redis)
    budgets: BudgetStore = dataclasses.field(default_factory=lambda: BudgetStore(None))
    responses: ResponseStore = dataclasses.field(default_factory=lambda: ResponseStore(None))
    """Cached answers of deployments that enabled the response cache (none without Redis)."""
    catalog: Catalog = dataclasses.field(default_factory=Catalog)
    catalog_loaded: bool = False  # the first full catalog (models, tenants, endpoints) arrived
    session: aiohttp.ClientSession | None = (
        None  # adapter loads and other calls off the request path
    )
    engines: engine_http.Client | None = None  # requests to engines and remote gateways
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set (and replaced) on every catalog swap: requests held for a cold start wait on it."""
    draining: bool = False
    capacities: dict[str, int] = dataclasses.field(default_factory=dict)  # pool → concurrency
    shadowed: frozenset[str] = frozenset()  # adapters whose name a model took (logged once)
    route_problems: frozenset[str] = frozenset()  # route problems already logged (once each)
    route_gauges: frozenset[tuple[str, str]] = frozenset()  # routes with a classifier gauge
    remotes: Remotes = dataclasses.field(default_factory=lambda: Remotes(Path("/nonexistent")))
    """ModelRoute remotes: their keys and requests in flight (set from settings at start)."""

    def capacity(self, pool: str) -> int:
        """This process's share of the requests the pool's ready endpoints take at once
        (computed once per catalog): every gateway process admits its share, so together
        they never put more in flight than the engines have slots."""
        return self.capacities.get(pool, 0)

    def swap(self, catalog: Catalog) -> None:
        """Replace the catalog whole; wake queues whose capacity may have grown."""
        self.catalog = catalog
        self.router.forget_gone(frozenset(e.url for e in catalog.endpoints.endpoints))
        self.changed.set()
        self.changed = asyncio.Event()
        self.capacities = {
            key: admission.share(capacity(catalog, key), processes=self.settings.processes)
            for key in catalog.pools
        }
        self.catalog_loaded = True
        for key in sorted(catalog.shadowed - self.shadowed):
            log.warning("adapter %s is not served: a model has its served name", key)
        self.shadowed = catalog.shadowed
        self.report_routes(catalog)
        for name, model in catalog.models.items():
            if name == model.name:
                self.metrics.endpoints.labels(name).set(len(catalog.endpoints.serving(name)))
        for key, pool in catalog.pools.items():
            self.admitter.wake(pool=key, policies=pool.classes, capacity=self.capacities[key])

    def report_routes(self, catalog: Catalog) -> None:
        """Log each route problem once (a shadowed name, a classifier without weights) and set
        the classifier gauge of every route that has one."""
        problems = {
            f"route {key}: not served, a model or an adapter has its name"
            for key in catalog.shadowed_routes
        }
        gauge, labelled = self.metrics.routing.route_classifier_ready, set()
        for entry in catalog.routes.values():
            if entry.route.uses_classifier:
                labelled.add((entry.namespace, entry.name))
                gauge.labels(entry.namespace, entry.name).set(0 if entry.classifier is None else 1)
            for remote in entry.remotes:
                if why := self.remotes.problem(remote, namespace=entry.namespace):
                    problems.add(
                        f"route {entry.key}: remote {remote.name} is never tried: {why} (list "
                        f"Secret {remote.api_key_secret.name} in the chart's "
                        "gateway.remoteKeySecrets; docs/routes.md, Spill)"
                    )
            if entry.classifier_problem:
                problems.add(
                    f"route {entry.key}: no classifier score, its score rules do not match: "
                    f"{entry.classifier_problem}"
                )
        for gone in self.route_gauges - labelled:  # a deleted route leaves no stale series
            gauge.remove(*gone)
        self.route_gauges = frozenset(labelled)
        for problem in sorted(problems - self.route_problems):
            log.warning("%s", problem)
        self.route_problems = frozenset(problems)


def capacity(catalog: Catalog, pool: str) -> int:
    """Requests the pool's ready endpoints take at once."""
    return sum(e.max_concurrency for e in catalog.endpoints.endpoints if e.pool == pool)


STATE: web.AppKey[GatewayState] = web.AppKey("tokenfleet_state", GatewayState)
