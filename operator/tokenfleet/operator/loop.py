"""The reconcile loop: level-based passes over every kind, prompted or on a timer.

Each pass runs one reconciler per kind (``tokenfleet.operator.reconcilers``: pools, models,
tenants, adapters, routes), in that order: each reads the indexes (actual state), asks its pure
planner what should be, and does only the difference: apply changed children, delete stale ones,
patch status if it changed, post events for transitions. A failure on one object is logged and
retried next pass; it never stops the loop or hot-loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime

from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.exporter import Exporter
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.reconcilers import indexed, pool_claims
from tokenfleet.operator.reconcilers.inference_pools import PoolReconciler
from tokenfleet.operator.reconcilers.model_adapters import AdapterReconciler
from tokenfleet.operator.reconcilers.model_deployments import ModelReconciler
from tokenfleet.operator.reconcilers.model_routes import RouteReconciler
from tokenfleet.operator.reconcilers.status_writer import StatusWriter
from tokenfleet.operator.reconcilers.tenants import TenantReconciler
from tokenfleet.operator.signals_source import PrometheusSignals


class Reconciler:
    """Owns the loop; handlers only set :attr:`wake`."""

    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        config: OperatorConfig,
        signals: PrometheusSignals | None = None,
        exporter: Exporter | None = None,
    ) -> None:
        self.exporter = exporter  # None: fleet state is not exported (tests of the loop)
        self.indexes = indexes
        self.config = config
        self.wake = asyncio.Event()
        self.indexes_ready = asyncio.Event()  # set by the first handler call: kopf has indexed
        self.seen_ready: dict[str, bool | None] = {}
        self.seen_intent: dict[str, str] = {}  # uid → wakeups.intent of our objects
        self.passes = 0
        writer = StatusWriter(kube=kube, exporter=exporter)
        self.pools = PoolReconciler(
            kube=kube, indexes=indexes, writer=writer, config=config, signals=signals
        )
        self.models = ModelReconciler(
            kube=kube, indexes=indexes, writer=writer, config=config, signals=signals
        )
        self.tenants = TenantReconciler(kube=kube, indexes=indexes, writer=writer, signals=signals)
        self.adapters = AdapterReconciler(
            kube=kube,
            indexes=indexes,
            writer=writer,
            config=config,
            signals=signals,
            wake=self.wake.set,
        )
        self.routes = RouteReconciler(kube=kube, indexes=indexes, writer=writer, config=config)

    async def run(self) -> None:
        await self.indexes_ready.wait()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.config.interval_seconds)
            self.wake.clear()
            await self.reconcile_all(datetime.datetime.now(datetime.UTC))
            self.passes += 1

    async def reconcile_all(self, now: datetime.datetime) -> None:
        claims = pool_claims.claims(self.indexes)
        specs = pool_claims.pool_specs(self.indexes)
        await self.pools.reconcile(claims=claims, specs=specs, now=now)
        owners = {pool: names[0] for pool, names in claims.items()}
        await self.models.reconcile(owners=owners, specs=specs, now=now)
        await self.tenants.reconcile(now)
        await self.adapters.reconcile(now)
        await self.routes.reconcile(now)
        live = {
            b["metadata"]["uid"]
            for i in (self.indexes.pools, self.indexes.models)
            for b in indexed.bodies(i)
        }
        self.pools.retain(live)
        self.models.retain(live)
        if self.exporter is not None:
            self.exporter.retain(
                (kind, b["metadata"]["namespace"], b["metadata"]["name"])
                for kind, index in (
                    ("InferencePool", self.indexes.pools),
                    ("ModelDeployment", self.indexes.models),
                    ("Tenant", self.indexes.tenants),
                    *([("ModelAdapter", self.indexes.adapters)] if self.indexes.adapters else []),
                    *([("ModelRoute", self.indexes.routes)] if self.indexes.routes else []),
                )
                for b in indexed.bodies(index)
            )
