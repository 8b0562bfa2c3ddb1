"""InferencePools: each pool's worker Deployments, NetworkPolicy and status.

gather (the pool's claimant model fitted to it; its pods, ReplicaSets and nodes; its demand from
:mod:`pool_autoscaler`) → plan (plan.pools: what to apply, scale and delete, and the status) →
act (deletion costs before a scale-in, then apply, scale, delete) → report."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import InferencePoolSpec, InferencePoolStatus
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import isolation, pools
from tokenfleet.operator.policy import deletion_cost
from tokenfleet.operator.reconcilers import guard, indexed, pool_claims
from tokenfleet.operator.reconcilers.pool_autoscaler import PoolAutoscaler
from tokenfleet.operator.reconcilers.status_writer import StatusWriter
from tokenfleet.operator.signals_source import PrometheusSignals


def _replicas_of(
    manifests: Iterable[Mapping[str, Any]], scale: Mapping[str, int]
) -> dict[str, int]:
    """Worker Deployment → replicas this pass sets, whether by apply or by scale."""
    applied = {
        m["metadata"]["name"]: int(m["spec"]["replicas"])
        for m in manifests
        if m.get("kind") == "Deployment" and "replicas" in m.get("spec", {})
    }
    return {**applied, **scale}


class PoolReconciler:
    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        config: OperatorConfig,
        signals: PrometheusSignals | None,
        writer: StatusWriter,
    ) -> None:
        self.kube = kube
        self.indexes = indexes
        self.config = config
        self.signals = signals
        self.writer = writer
        self.autoscaler = PoolAutoscaler(indexes=indexes, signals=signals)

    async def reconcile(
        self,
        *,
        claims: dict[tuple[str, str], list[str]],
        specs: Mapping[tuple[str, str], InferencePoolSpec],
        now: datetime.datetime,
    ) -> None:
        for body in list(indexed.bodies(self.indexes.pools)):
            await guard.guarded(body, self._reconcile_pool(body, claims, specs, now))

    def retain(self, live: set[str]) -> None:
        """Forget what this process remembers of pools deleted since (uids not in ``live``)."""
        self.autoscaler.retain(live)

    def _peers(self) -> isolation.Peers | None:
        """Who may connect to workers (plan.isolation), or None: no NetworkPolicy rendered."""
        if not self.config.network_policy:
            return None
        return isolation.Peers(
            gateway_namespace=self.config.gateway_namespace,
            scraper_namespaces=self.config.scraper_namespaces,
        )

    async def _reconcile_pool(
        self,
        body: dict[str, Any],
        claims: dict[tuple[str, str], list[str]],
        specs: Mapping[tuple[str, str], InferencePoolSpec],
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        claimants = claims.get((ns, name), [])
        model_body = (
            next(iter(indexed.items(self.indexes.models, (ns, claimants[0]))), None)
            if claimants
            else None
        )
        try:
            spec = InferencePoolSpec.model_validate(body.get("spec", {}))
            model = ModelDeploymentSpec.model_validate(model_body["spec"]) if model_body else None
        except pydantic.ValidationError as exc:
            await self.writer.invalid(body, exc, now)
            return
        fit = pool_claims.fit(model, ns, specs, self.config.allowed_images) if model else None
        model = fit.spec if fit else None
        old = indexed.status_of(InferencePoolStatus, body)
        demand, autoscaling, metrics_ok, missing = await self.autoscaler.autoscale(
            body, spec, model, old=old.autoscaling if old else None, now=now
        )
        decided = pools.plan_pool(
            pools.PoolInputs(
                namespace=ns,
                name=name,
                uid=meta["uid"],
                generation=meta.get("generation"),
                spec=spec,
                status=old,
                model=model,
                rival_models=claimants[1:],
                pods=indexed.items(self.indexes.pods, (ns, name)),
                sets=indexed.items(self.indexes.sets, (ns, name)),
                nodes=indexed.items(self.indexes.nodes, "all"),
                now=now,
                demand=demand,
                model_annotations=dict(
                    (model_body or {}).get("metadata", {}).get("annotations") or {}
                ),
                autoscaling=autoscaling,
                metrics_ok=metrics_ok,
                metrics_missing=missing,
                model_status=indexed.status_of(ModelDeploymentStatus, model_body),
                misfit=fit.misfit if fit else None,
                peers=self._peers(),
                engine_key=self.config.engine_key,
            )
        )
        # Costs first: an applied Deployment may already carry fewer replicas, and once its
        # watch event lands the index no longer shows a shrink (a fresh-clone run saw a 6 → 3
        # scale-in leave every pod without a cost).
        await self._cost_before_scale_in(ns, name, _replicas_of(decided.apply, decided.scale))
        for manifest in decided.apply:
            await asyncio.to_thread(self.kube.apply, manifest)
        for deployment, replicas in sorted(decided.scale.items()):
            await asyncio.to_thread(self.kube.scale, ns, deployment, replicas)
        for stale in decided.delete:
            await asyncio.to_thread(self.kube.delete, "apps/v1", "Deployment", ns, stale)
        await self.writer.report(
            body, "InferencePool", decided.status.to_wire(), decided.events, now
        )

    async def _cost_before_scale_in(self, ns: str, pool: str, scale: Mapping[str, int]) -> None:
        """Before a worker Deployment shrinks, mark its pods' deletion cost from their in-flight
        requests, so the ReplicaSet removes (and drains) the least-loaded first."""
        current = {s.name: s.replicas for s in indexed.items(self.indexes.sets, (ns, pool))}
        shrinking = {d for d, n in scale.items() if n < current.get(d, 0)}
        if not shrinking or self.signals is None:
            return
        running = await asyncio.to_thread(self.signals.running_by_pod, ns, pool)
        pods = [p for p in indexed.items(self.indexes.pods, (ns, pool)) if not p.terminating]
        wanted = deletion_cost.costs([p.name for p in pods], running)
        carried = {p.name: p.deletion_cost for p in pods}
        for pod, cost in deletion_cost.changed(carried, wanted).items():
            await asyncio.to_thread(
                self.kube.annotate, ns, pod, deletion_cost.POD_DELETION_COST, cost
            )
