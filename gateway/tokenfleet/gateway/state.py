"""The gateway process's parts, carried in the aiohttp app under one typed key.

The app factory builds them once and hands each stage of the request path exactly the parts it
needs (:mod:`.stages`); this object holds them for what serves the app as a whole — the catalog
sources (:meth:`GatewayState.swap`), health and metrics endpoints, the background tasks, and the
orderly close. No request-path code takes it.
"""

from __future__ import annotations

import dataclasses
import logging

from aiohttp import web

from tokenfleet.gateway import engine_http
from tokenfleet.gateway.adapter_slots import AdapterSlots
from tokenfleet.gateway.budget_store import BudgetStore
from tokenfleet.gateway.catalog import Catalog
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.metrics import Metrics
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
    live: Live  # the catalog requests read now
    redis: Backend  # the one Redis backend every store shares
    quotas: QuotaStore
    budgets: BudgetStore
    responses: ResponseStore
    """Cached answers of deployments that enabled the response cache (none without Redis)."""
    usage: UsageLedger | None  # the durable usage ledger (counters without Redis)
    admitter: Admitter
    router: Router
    adapters: AdapterSlots
    remotes: Remotes
    """ModelRoute remotes: their keys and requests in flight."""
    engines: engine_http.Client  # requests to engines and remote gateways
    draining: bool = False
    shadowed: frozenset[str] = frozenset()  # adapters whose name a model took (logged once)
    route_problems: frozenset[str] = frozenset()  # route problems already logged (once each)
    route_gauges: frozenset[tuple[str, str]] = frozenset()  # routes with a classifier gauge

    @property
    def catalog(self) -> Catalog:
        return self.live.catalog

    def swap(self, catalog: Catalog) -> None:
        """Replace the catalog whole; wake queues whose capacity may have grown."""
        self.live.swap(catalog)
        self.router.forget_gone(frozenset(e.url for e in catalog.endpoints.endpoints))
        for key in sorted(catalog.shadowed - self.shadowed):
            log.warning("adapter %s is not served: a model has its served name", key)
        self.shadowed = catalog.shadowed
        self.report_routes(catalog)
        for name, model in catalog.models.items():
            if name == model.name:
                self.metrics.endpoints.labels(name).set(len(catalog.endpoints.serving(name)))
        for key, pool in catalog.pools.items():
            self.admitter.wake(pool=key, policies=pool.classes, capacity=self.live.capacity(key))

    def set_processes(self, processes: int) -> None:
        """The fleet's registry counted ``processes`` gateway processes: each pool's share of
        the slots, the quota leases and routing follow; queues wake, in case a share grew."""
        self.metrics.fleet_processes.set(processes)
        if not self.live.set_processes(processes):
            return
        log.info("%d gateway processes share the engines' slots", processes)
        self.router.processes = processes
        self.quotas.set_processes(processes)
        for key, pool in self.catalog.pools.items():
            self.admitter.wake(pool=key, policies=pool.classes, capacity=self.live.capacity(key))

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

    async def close(self) -> None:
        """Every store closed, then the Redis backend they share, then the engines' pool."""
        await self.engines.close()
        await self.quotas.close()
        if self.usage is not None:
            await self.usage.close()
        await self.budgets.close()
        await self.responses.close()
        await self.redis.close()


STATE: web.AppKey[GatewayState] = web.AppKey("tokenfleet_state", GatewayState)
