"""ModelRoutes: each route's Ready — its targets served in its namespace, its classifier's
ConfigMap found, labelled and parseable — and RemotesReady: its remotes' key Secrets found in
the gateway's namespace.

gather (the served models and adapters per namespace; route_inputs: ConfigMaps and Secrets) →
plan (plan.route_status) → report. A route has no children to act on."""

from __future__ import annotations

import datetime
from typing import Any

import pydantic

from tokenfleet.api.route import ModelRouteSpec, ModelRouteStatus
from tokenfleet.operator import route_inputs
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import route_status
from tokenfleet.operator.reconcilers import guard, indexed
from tokenfleet.operator.reconcilers.status_writer import StatusWriter


class RouteReconciler:
    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        config: OperatorConfig,
        writer: StatusWriter,
    ) -> None:
        self.kube = kube
        self.indexes = indexes
        self.config = config
        self.writer = writer

    async def reconcile(self, now: datetime.datetime) -> None:
        """Each ModelRoute's Ready: its targets served in its namespace, its classifier's
        ConfigMap found, labelled and parseable; and RemotesReady: its remotes' key Secrets
        found in the gateway's namespace (plan.route_status)."""
        routes = list(indexed.bodies(self.indexes.routes)) if self.indexes.routes else []
        inputs = route_inputs.Reader(
            kube=self.kube, gateway_namespace=self.config.gateway_namespace
        )
        by_ns: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        for body in indexed.bodies(self.indexes.models):
            by_ns.setdefault(body["metadata"]["namespace"], ([], []))[0].append(body)
        for body in indexed.bodies(self.indexes.adapters) if self.indexes.adapters else ():
            by_ns.setdefault(body["metadata"]["namespace"], ([], []))[1].append(body)
        for body in routes:
            models, adapters = by_ns.get(body["metadata"]["namespace"], ([], []))
            served = route_status.served_in(models, adapters)
            await guard.guarded(body, self._reconcile_route(body, served, inputs, now))

    async def _reconcile_route(
        self,
        body: dict[str, Any],
        served: route_status.Served,
        inputs: route_inputs.Reader,
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        try:
            spec = ModelRouteSpec.model_validate(body.get("spec") or {})
        except pydantic.ValidationError as exc:
            await self.writer.invalid(body, exc, now)
            return
        status, events = route_status.plan(
            spec=spec,
            generation=meta.get("generation"),
            old=indexed.status_of(ModelRouteStatus, body),
            served=served,
            found=await inputs.classifier(meta["namespace"], spec),
            secrets=await inputs.key_secrets(spec),
            now=now,
        )
        await self.writer.report(body, "ModelRoute", status.to_wire(), events, now)
