"""Tenants: each Tenant's status — keys, this period's usage and cost, budget, last use.

gather (tenant_inputs: key Secrets, Prometheus' usage, the pools' prices) → plan
(plan.tenant_status) → report. A Tenant has no children to act on."""

from __future__ import annotations

import datetime

from tokenfleet.operator import tenant_inputs
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import tenant_status
from tokenfleet.operator.reconcilers import guard, indexed
from tokenfleet.operator.reconcilers.status_writer import StatusWriter
from tokenfleet.operator.signals_source import PrometheusSignals


class TenantReconciler:
    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        signals: PrometheusSignals | None,
        writer: StatusWriter,
    ) -> None:
        self.kube = kube
        self.indexes = indexes
        self.signals = signals
        self.writer = writer

    async def reconcile(self, now: datetime.datetime) -> None:
        """Each Tenant's status: keys, this period's usage and cost, budget, last use."""
        tenants = list(indexed.bodies(self.indexes.tenants))
        inputs = await tenant_inputs.read(
            kube=self.kube,
            signals=self.signals,
            tenants=tenants,
            pools=indexed.bodies(self.indexes.pools),
            now=now,
        )
        for body in tenants:
            status, events = tenant_status.plan_from(body=body, inputs=inputs, now=now)
            await guard.guarded(
                body, self.writer.report(body, "Tenant", status.to_wire(), events, now)
            )
