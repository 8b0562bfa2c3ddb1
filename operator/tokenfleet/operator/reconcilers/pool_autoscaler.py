"""A pool's demand from its signals: the scaling policy (with its forecast floor, and the
previewed policy beside it), Prometheus' signals, the pool's ready and starting workers, and
the pure decision (policy.scaling.decide) with its damping history kept per pool uid.

The gather step of the pools' reconciler, kept apart because it is most of it: it remembers
each pool's scaling state between passes, and it asks Prometheus more than anything else."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import AutoscalingStatus, InferencePoolSpec
from tokenfleet.operator import forecasts
from tokenfleet.operator.plan import autoscaling_status, desired, observed
from tokenfleet.operator.policy import forecast, scaling, signal_health
from tokenfleet.operator.reconcilers import indexed
from tokenfleet.operator.signals_source import PrometheusSignals
from tokenfleet.signals import jobs


class PoolAutoscaler:
    def __init__(self, *, indexes: indexed.Indexes, signals: PrometheusSignals | None) -> None:
        self.indexes = indexes
        self.signals = signals  # None: no Prometheus, so the bounds alone decide
        # uid → state: a pool deleted and made again under its name starts afresh, not from
        # the scaling history (or analysis time) of the one before it
        self.scaling: dict[str, scaling.State] = {}
        self.scaling_preview: dict[str, scaling.State] = {}  # the previewed policies' own
        self.forecasts = None if signals is None else forecasts.ForecastFloors(signals)

    def retain(self, live: set[str]) -> None:
        """Forget the scaling history of pools deleted since (uids not in ``live``)."""
        for held in (self.scaling, self.scaling_preview):
            for uid in held.keys() - live:  # deleted: forget it
                del held[uid]
        if self.forecasts is not None:
            self.forecasts.retain(live)

    async def autoscale(
        self,
        body: dict[str, Any],
        spec: InferencePoolSpec,
        model: ModelDeploymentSpec | None,
        *,
        old: AutoscalingStatus | None,
        now: datetime.datetime,
    ) -> tuple[int, AutoscalingStatus | None, bool | None, tuple[signal_health.Missing, ...]]:
        """Demand for the pool from its signals: (replicas, status block, metrics fresh?, the
        configured signals without data and why)."""
        if self.signals is None or model is None:
            # nothing to decide on, but a known event's floor holds (0: replicas.min decides)
            own = scaling.Policy.of(spec.autoscaling, spec.replicas)
            return scaling.demand_without_signals(own, now), None, None, ()
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        state = self.scaling.get(meta["uid"]) or scaling.State(
            replicas=(old.demand if old else 0) or spec.replicas.min
        )
        classes = scaling.queue_age_classes(
            spec.autoscaling.queue_age_classes,
            [(c.name, c.priority) for c in spec.admission.classes],
        )
        policy, previewed = scaling.policies(spec.autoscaling, spec.replicas)
        lead = spec.autoscaling.readiness_delay_seconds
        where = {"uid": meta["uid"], "ns": ns, "pool": name, "readiness": lead, "now": now}
        policy, made = await self._with_forecast(policy=policy, **where)
        if previewed is not None:
            previewed, _ = await self._with_forecast(policy=previewed, **where)
        latencies = {
            (named, objective.percentile)
            for tried in (policy, previewed)
            if tried is not None
            for _, named, objective in scaling.objectives(tried)
        }
        signals = await asyncio.to_thread(self.signals.read, ns, name, classes, latencies)
        revision = desired.revision_of(model)
        pods = indexed.items(self.indexes.pods, (ns, name))
        ready = sum(1 for p in pods if p.revision == revision and p.ready and not p.terminating)
        starting = observed.starting(
            pods, revision, now=now, within=spec.autoscaling.readiness_delay_seconds
        )
        decision = scaling.decide(
            policy=policy,
            signals=signals,
            state=state,
            ready=ready,
            starting=starting,
            now=now,
        )
        self.scaling[meta["uid"]] = decision.state
        preview = None
        if previewed is not None:  # the same signals, its own damping history: acts on nothing
            tried = self.scaling_preview.get(meta["uid"]) or scaling.State(replicas=state.replicas)
            preview = scaling.decide(
                policy=previewed,
                signals=signals,
                state=tried,
                ready=ready,
                starting=starting,
                now=now,
            )
            self.scaling_preview[meta["uid"]] = preview.state
        block = autoscaling_status.autoscaling_status(
            decision,
            old=old,
            now=now,
            preview=preview,
            promoted=spec.autoscaling.use_preview,
            policy=policy,
            signals=signals,
            forecasted=made,
        )
        missing = await self._missing_signals(ns, name, policy, signals, ready)
        fresh = not signals.stale  # readable; whether each signal has data is `missing`
        return decision.replicas, block, fresh, missing

    async def _with_forecast(
        self,
        *,
        uid: str,
        ns: str,
        pool: str,
        policy: scaling.Policy,
        readiness: float,
        now: datetime.datetime,
    ) -> tuple[scaling.Policy, forecast.Made | None]:
        """``policy`` with its forecast floor (one cold start and a bucket ahead), if it has a
        forecast, and the forecast made for it."""
        if policy.forecast is None or self.forecasts is None:
            return policy, None
        made = await self.forecasts.made(
            uid,
            ns,
            pool,
            settings=policy.forecast,
            lead=readiness + policy.forecast.step,
            now=now.timestamp(),
        )
        floor = made.decision.replicas if made.decision is not None else 0
        return dataclasses.replace(policy, forecast_floor=floor), made

    async def _missing_signals(
        self, ns: str, pool: str, policy: scaling.Policy, signals: scaling.Signals, ready: int
    ) -> tuple[signal_health.Missing, ...]:
        """The pool's configured signals without a series, explained by their scrape jobs'
        targets (asked only when some series is absent: one more request then)."""
        assert self.signals is not None
        scraped = signal_health.JobHealth(up=1)
        suspects = signal_health.missing(
            policy=policy, signals=signals, namespace=ns, pool=pool, ready=ready, targets={}
        )
        if not suspects:
            return ()
        targets = await asyncio.to_thread(self.signals.targets)
        if targets is None:
            # Prometheus answered the queries but not this: assume it scrapes; say less
            targets = {jobs.GATEWAY: scraped, jobs.WORKERS: scraped}
        unlabelled = await asyncio.to_thread(self.signals.unlabelled_engines)
        return signal_health.missing(
            policy=policy,
            signals=signals,
            namespace=ns,
            pool=pool,
            ready=ready,
            targets=targets,
            unlabelled_engines=unlabelled,
        )
