"""ModelAdapters: each adapter's status — the operator's verdict on its artifact, whether its
base can serve it, and where the gateways report it loaded.

gather (the base ModelDeployment; the verifier's verdict; Prometheus' placement reports) → plan
(plan.adapter_status, throttled) → report. The engines load adapters themselves: nothing to
apply."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from tokenfleet.api.adapter import ModelAdapterSpec, ModelAdapterStatus
from tokenfleet.operator.adapter_verifier import AdapterVerifier
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import adapter_loader, adapter_status
from tokenfleet.operator.reconcilers import guard, indexed
from tokenfleet.operator.reconcilers.status_writer import StatusWriter
from tokenfleet.operator.signals_source import PrometheusSignals


class AdapterReconciler:
    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        config: OperatorConfig,
        signals: PrometheusSignals | None,
        writer: StatusWriter,
        wake: Callable[[], None],
    ) -> None:
        self.indexes = indexes
        self.signals = signals
        self.writer = writer
        self.adapter_verifier = AdapterVerifier(kube, wake, config.fetch)
        self.adapter_written: dict[str, float] = {}  # uid → monotonic time of its last write

    async def reconcile(self, now: datetime.datetime) -> None:
        """Each ModelAdapter's status: the operator's verdict on its artifact, whether its base
        can serve it, and where the gateways report it loaded."""
        adapters = list(indexed.bodies(self.indexes.adapters)) if self.indexes.adapters else []
        live = {b["metadata"]["uid"] for b in adapters}
        self.adapter_verifier.forget(live)
        for gone in self.adapter_written.keys() - live:
            del self.adapter_written[gone]
        if not adapters:
            return
        reports = await asyncio.to_thread(self._adapter_reports) if self.signals else None
        deployments: dict[str, list[dict[str, Any]]] = {}
        for body in indexed.bodies(self.indexes.models):
            deployments.setdefault(body["metadata"]["namespace"], []).append(body)
        for body in adapters:
            await guard.guarded(body, self._reconcile_adapter(body, deployments, reports, now))

    def _adapter_reports(self) -> dict[tuple[str, str], adapter_status.Placement] | None:
        """(namespace, served name) → what the gateways and engines report of the adapter;
        None when the gateways' series are unreadable (status keeps the last report)."""
        assert self.signals is not None
        placement = self.signals.adapter_placement()
        if placement is None:
            return None
        in_use = self.signals.adapters_in_use() or {}
        return {
            key: adapter_status.Placement(
                pods=placement.get(key, ((), 0))[0],
                requests=placement.get(key, ((), 0))[1],
                active=in_use.get(key, ()),
            )
            for key in placement.keys() | in_use.keys()
        }

    async def _reconcile_adapter(
        self,
        body: dict[str, Any],
        deployments: Mapping[str, list[dict[str, Any]]],
        reports: Mapping[tuple[str, str], adapter_status.Placement] | None,
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        try:
            spec = ModelAdapterSpec.model_validate(body.get("spec") or {})
        except pydantic.ValidationError as exc:
            await self.writer.invalid(body, exc, now)
            return
        base = adapter_status.base_of(spec.base, deployments.get(meta["namespace"], []))
        verdict = None
        if base.spec is not None:
            verdict = self.adapter_verifier.verdict(
                uid=meta["uid"],
                namespace=meta["namespace"],
                spec=spec,
                trust=adapter_loader.adapter_trust(base.spec),
            )
        reported = None
        if reports is not None:
            reported = reports.get(
                (meta["namespace"], spec.served_name), adapter_status.Placement()
            )
        old = indexed.status_of(ModelAdapterStatus, body)
        status, events = adapter_status.plan(
            spec=spec,
            generation=meta.get("generation"),
            old=old,
            base=base,
            verdict=verdict,
            placement=reported,
            now=now,
        )
        written = self.adapter_written.get(meta["uid"])
        status = adapter_status.throttled(
            status, old, since_write=None if written is None else time.monotonic() - written
        )
        wire = status.to_wire()
        if wire != (body.get("status") or {}):
            self.adapter_written[meta["uid"]] = time.monotonic()
        await self.writer.report(body, "ModelAdapter", wire, events, now)
