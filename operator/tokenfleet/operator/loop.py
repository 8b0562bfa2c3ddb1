"""The reconcile loop: level-based passes over every pool and model, prompted or on a timer.

Each pass reads the indexes (actual state), asks the pure planners what should be, and does
only the difference: apply changed children, delete stale ones, patch status if it changed,
post events for transitions. A failure on one object is logged and retried next pass; it never
stops the loop or hot-loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import kopf
import pydantic
from kubernetes.client.exceptions import ApiException

from tokenfleet.api import labels
from tokenfleet.api.adapter import ModelAdapterSpec, ModelAdapterStatus
from tokenfleet.api.base import Condition, Model, rfc3339
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import AutoscalingStatus, InferencePoolSpec, InferencePoolStatus
from tokenfleet.api.route import ModelRouteSpec, ModelRouteStatus
from tokenfleet.operator import evidence, forecasts, k8s, route_inputs, tenant_inputs
from tokenfleet.operator.adapter_verifier import AdapterVerifier
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.exporter import Exporter
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import (
    adapter_loader,
    adapter_status,
    autoscaling_status,
    canary,
    desired,
    devices,
    isolation,
    model_status,
    observed,
    pools,
    route_status,
    tenant_status,
    verification,
)
from tokenfleet.operator.plan.reporting import Event
from tokenfleet.operator.policy import (
    analysis,
    deletion_cost,
    forecast,
    rollout,
    scaling,
    signal_health,
)
from tokenfleet.operator.signals_source import PrometheusSignals
from tokenfleet.signals import jobs

log = logging.getLogger("tokenfleet.operator")

Index = kopf.Index[Any, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Indexes:
    pools: Index
    models: Index
    tenants: Index
    pods: Index
    sets: Index
    nodes: Index
    adapters: Index | None = None  # None: ModelAdapters are not watched (tests of the loop)
    routes: Index | None = None  # None: ModelRoutes are not watched (tests of the loop)


def _items(index: Index, key: Any) -> list[Any]:
    return list(index.get(key, []))


def _bodies(index: Index) -> Iterable[dict[str, Any]]:
    for key in list(index):
        yield from _items(index, key)


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


S = TypeVar("S", bound=Model)


def _fit(
    spec: ModelDeploymentSpec,
    ns: str,
    specs: Mapping[tuple[str, str], InferencePoolSpec],
    allowed_images: tuple[str, ...],
) -> devices.Fit:
    """The spec fitted to its pools in ``ns`` (plan.devices): what every planner is given."""
    return devices.fit(
        spec,
        pools={p: specs[(ns, p)] for p in spec.pools if (ns, p) in specs},
        allowed_images=allowed_images,
    )


def _status_of(model: type[S], body: Mapping[str, Any] | None) -> S | None:
    """An object's status as last written, parsed once here; unreadable status counts as none
    (the planners start over rather than stop)."""
    raw = (body or {}).get("status") or {}
    try:
        return model.model_validate(raw) if raw else None
    except pydantic.ValidationError:
        return None


class Reconciler:
    """Owns the loop; handlers only set :attr:`wake`."""

    def __init__(
        self,
        *,
        kube: Kube,
        indexes: Indexes,
        config: OperatorConfig,
        signals: PrometheusSignals | None = None,
        exporter: Exporter | None = None,
    ) -> None:
        self.kube = kube
        self.exporter = exporter  # None: fleet state is not exported (tests of the loop)
        self.signals = signals  # None: no Prometheus, so the bounds alone decide
        # uid → state: a pool deleted and made again under its name starts afresh, not from
        # the scaling history (or analysis time) of the one before it
        self.scaling: dict[str, scaling.State] = {}
        self.scaling_preview: dict[str, scaling.State] = {}  # the previewed policies' own
        self.forecasts = None if signals is None else forecasts.ForecastFloors(signals)
        self.indexes = indexes
        self.config = config
        self.wake = asyncio.Event()
        self.indexes_ready = asyncio.Event()  # set by the first handler call: kopf has indexed
        self.seen_ready: dict[str, bool | None] = {}
        self.seen_intent: dict[str, str] = {}  # uid → wakeups.intent of our objects
        self.analysed: dict[str, float] = {}  # uid → unix seconds of last analysis
        # model uid → its refused pods whose workers were restarted to verify again, until the
        # index drops them: until a replacement shows in the index, nothing else marks them stale
        self.reverifying: dict[str, set[str]] = {}
        self.gate = evidence.GateEvidence(kube=kube, signals=signals)
        self.adapter_verifier = AdapterVerifier(kube, self.wake.set, config.fetch)
        self.adapter_written: dict[str, float] = {}  # uid → monotonic time of its last write
        self.passes = 0

    async def run(self) -> None:
        await self.indexes_ready.wait()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.config.interval_seconds)
            self.wake.clear()
            await self.reconcile_all(datetime.datetime.now(datetime.UTC))
            self.passes += 1

    async def reconcile_all(self, now: datetime.datetime) -> None:
        claims = self._claims()
        specs = self._pool_specs()
        for body in list(_bodies(self.indexes.pools)):
            await self._guarded(body, self._reconcile_pool(body, claims, specs, now))
        owners = {pool: names[0] for pool, names in claims.items()}
        for body in list(_bodies(self.indexes.models)):
            await self._guarded(body, self._report_model(body, owners, specs, now))
        await self._report_tenants(now)
        await self._report_adapters(now)
        await self._report_routes(now)
        live = {
            b["metadata"]["uid"]
            for i in (self.indexes.pools, self.indexes.models)
            for b in _bodies(i)
        }
        for held in (self.scaling, self.scaling_preview, self.analysed, self.reverifying):
            for uid in held.keys() - live:  # deleted: forget it
                del held[uid]
        if self.forecasts is not None:
            self.forecasts.retain(live)
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
                for b in _bodies(index)
            )

    async def _report_tenants(self, now: datetime.datetime) -> None:
        """Each Tenant's status: keys, this period's usage and cost, budget, last use."""
        tenants = list(_bodies(self.indexes.tenants))
        inputs = await tenant_inputs.read(
            kube=self.kube,
            signals=self.signals,
            tenants=tenants,
            pools=_bodies(self.indexes.pools),
            now=now,
        )
        for body in tenants:
            status, events = tenant_status.plan_from(body=body, inputs=inputs, now=now)
            await self._guarded(body, self._report(body, "Tenant", status.to_wire(), events, now))

    async def _report_adapters(self, now: datetime.datetime) -> None:
        """Each ModelAdapter's status: the operator's verdict on its artifact, whether its base
        can serve it, and where the gateways report it loaded."""
        adapters = list(_bodies(self.indexes.adapters)) if self.indexes.adapters else []
        live = {b["metadata"]["uid"] for b in adapters}
        self.adapter_verifier.forget(live)
        for gone in self.adapter_written.keys() - live:
            del self.adapter_written[gone]
        if not adapters:
            return
        reports = await asyncio.to_thread(self._adapter_reports) if self.signals else None
        deployments: dict[str, list[dict[str, Any]]] = {}
        for body in _bodies(self.indexes.models):
            deployments.setdefault(body["metadata"]["namespace"], []).append(body)
        for body in adapters:
            await self._guarded(body, self._report_adapter(body, deployments, reports, now))

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

    async def _report_adapter(
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
            await self._invalid(body, exc, now)
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
        old = _status_of(ModelAdapterStatus, body)
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
        await self._report(body, "ModelAdapter", wire, events, now)

    async def _report_routes(self, now: datetime.datetime) -> None:
        """Each ModelRoute's Ready: its targets served in its namespace, its classifier's
        ConfigMap found, labelled and parseable; and RemotesReady: its remotes' key Secrets
        found in the gateway's namespace (plan.route_status)."""
        routes = list(_bodies(self.indexes.routes)) if self.indexes.routes else []
        inputs = route_inputs.Reader(
            kube=self.kube, gateway_namespace=self.config.gateway_namespace
        )
        by_ns: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        for body in _bodies(self.indexes.models):
            by_ns.setdefault(body["metadata"]["namespace"], ([], []))[0].append(body)
        for body in _bodies(self.indexes.adapters) if self.indexes.adapters else ():
            by_ns.setdefault(body["metadata"]["namespace"], ([], []))[1].append(body)
        for body in routes:
            models, adapters = by_ns.get(body["metadata"]["namespace"], ([], []))
            served = route_status.served_in(models, adapters)
            await self._guarded(body, self._report_route(body, served, inputs, now))

    async def _report_route(
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
            await self._invalid(body, exc, now)
            return
        status, events = route_status.plan(
            spec=spec,
            generation=meta.get("generation"),
            old=_status_of(ModelRouteStatus, body),
            served=served,
            found=await inputs.classifier(meta["namespace"], spec),
            secrets=await inputs.key_secrets(spec),
            now=now,
        )
        await self._report(body, "ModelRoute", status.to_wire(), events, now)

    async def _guarded(self, body: dict[str, Any], work: Any) -> None:
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            work.close()  # being deleted: garbage collection takes its children
            return
        try:
            await work
        except Exception as exc:  # one broken object must not stop the fleet's reconciliation
            if k8s.namespace_gone(exc):
                return
            log.exception(
                "reconciling %s %s/%s failed; retrying next pass",
                body["kind"],
                meta["namespace"],
                meta["name"],
            )

    def _peers(self) -> isolation.Peers | None:
        """Who may connect to workers (plan.isolation), or None: no NetworkPolicy rendered."""
        if not self.config.network_policy:
            return None
        return isolation.Peers(
            gateway_namespace=self.config.gateway_namespace,
            scraper_namespaces=self.config.scraper_namespaces,
        )

    def _pool_specs(self) -> dict[tuple[str, str], InferencePoolSpec]:
        """(namespace, pool) → its spec, for fitting models to their pools' device; a pool
        whose spec does not parse is left out (its own pass reports it)."""
        specs = {}
        for body in _bodies(self.indexes.pools):
            meta = body["metadata"]
            with contextlib.suppress(pydantic.ValidationError):
                specs[(meta["namespace"], meta["name"])] = InferencePoolSpec.model_validate(
                    body.get("spec", {})
                )
        return specs

    def _claims(self) -> dict[tuple[str, str], list[str]]:
        """(namespace, pool) → names of ModelDeployments listing it, the winner first."""
        claims: dict[tuple[str, str], list[model_status.Claim]] = {}
        for body in _bodies(self.indexes.models):
            meta = body["metadata"]
            for pool in body.get("spec", {}).get("pools", []):
                claim = model_status.Claim(
                    created=meta.get("creationTimestamp", ""), name=meta["name"]
                )
                claims.setdefault((meta["namespace"], pool), []).append(claim)
        return {
            key: [c.name for c in sorted(found, key=model_status.Claim.key)]
            for key, found in claims.items()
        }

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
            next(iter(_items(self.indexes.models, (ns, claimants[0]))), None) if claimants else None
        )
        try:
            spec = InferencePoolSpec.model_validate(body.get("spec", {}))
            model = ModelDeploymentSpec.model_validate(model_body["spec"]) if model_body else None
        except pydantic.ValidationError as exc:
            await self._invalid(body, exc, now)
            return
        fit = _fit(model, ns, specs, self.config.allowed_images) if model else None
        model = fit.spec if fit else None
        old = _status_of(InferencePoolStatus, body)
        demand, autoscaling, metrics_ok, missing = await self._autoscale(
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
                pods=_items(self.indexes.pods, (ns, name)),
                sets=_items(self.indexes.sets, (ns, name)),
                nodes=_items(self.indexes.nodes, "all"),
                now=now,
                demand=demand,
                model_annotations=dict(
                    (model_body or {}).get("metadata", {}).get("annotations") or {}
                ),
                autoscaling=autoscaling,
                metrics_ok=metrics_ok,
                metrics_missing=missing,
                model_status=_status_of(ModelDeploymentStatus, model_body),
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
        await self._report(body, "InferencePool", decided.status.to_wire(), decided.events, now)

    async def _cost_before_scale_in(self, ns: str, pool: str, scale: Mapping[str, int]) -> None:
        """Before a worker Deployment shrinks, mark its pods' deletion cost from their in-flight
        requests, so the ReplicaSet removes (and drains) the least-loaded first."""
        current = {s.name: s.replicas for s in _items(self.indexes.sets, (ns, pool))}
        shrinking = {d for d, n in scale.items() if n < current.get(d, 0)}
        if not shrinking or self.signals is None:
            return
        running = await asyncio.to_thread(self.signals.running_by_pod, ns, pool)
        pods = [p for p in _items(self.indexes.pods, (ns, pool)) if not p.terminating]
        wanted = deletion_cost.costs([p.name for p in pods], running)
        carried = {p.name: p.deletion_cost for p in pods}
        for pod, cost in deletion_cost.changed(carried, wanted).items():
            await asyncio.to_thread(
                self.kube.annotate, ns, pod, deletion_cost.POD_DELETION_COST, cost
            )

    async def _autoscale(
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
            floor = scaling.scheduled_floor(own, now)
            return (floor if floor > spec.replicas.min else 0), None, None, ()
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
        pods = _items(self.indexes.pods, (ns, name))
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

    async def _report_model(
        self,
        body: dict[str, Any],
        owners: dict[tuple[str, str], str],
        specs: Mapping[tuple[str, str], InferencePoolSpec],
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        ns = meta["namespace"]
        spec = ModelDeploymentSpec.model_validate(body.get("spec", {}))
        fit = _fit(spec, ns, specs, self.config.allowed_images)
        spec = fit.spec
        existing = frozenset(n for (pool_ns, n) in self.indexes.pools if pool_ns == ns)
        current = _status_of(ModelDeploymentStatus, body)
        pods = self._not_reverifying(
            meta["uid"], [p for pool in spec.pools for p in _items(self.indexes.pods, (ns, pool))]
        )
        trust, recheck = await self._recheck(body, spec, current, pods)
        gathered = await self.gate.gather(
            namespace=ns,
            name=meta["name"],
            spec=spec,
            status=current,
            latency=await self._analyse(body, spec, now),
            pods=pods,
            window=self._window(spec),
        )
        status, events = model_status.plan_model(
            model_status.ModelInputs(
                namespace=ns,
                name=meta["name"],
                generation=meta.get("generation"),
                spec=spec,
                status=current,
                existing_pools=existing,
                pool_owner={
                    pool: owner for (pool_ns, pool), owner in owners.items() if pool_ns == ns
                },
                pods=pods,
                now=now,
                evidence=gathered,
                trust=trust,
                recheck=recheck,
                fit=fit,
                allowed_images=self.config.allowed_images,
            )
        )
        await self._report(body, "ModelDeployment", status.to_wire(), events, now)

    async def _recheck(
        self,
        body: dict[str, Any],
        spec: ModelDeploymentSpec,
        status: ModelDeploymentStatus | None,
        pods: list[observed.WorkerPod],
    ) -> tuple[str | None, verification.Recheck]:
        """This pass's trust fingerprint, and whether a refusal of the spec's revision still
        stands; restarts its workers when not (before status says so: a failed patch is tried
        again next pass)."""
        ns = body["metadata"]["namespace"]
        trust = await self._trust(ns, spec, status)
        recheck = verification.plan(
            namespace=ns,
            spec=spec,
            status=status,
            pods=pods,
            sets=[s for pool in spec.pools for s in _items(self.indexes.sets, (ns, pool))],
            current=trust,
        )
        await self._reverify(body, recheck)
        return trust, recheck

    async def _trust(
        self, ns: str, spec: ModelDeploymentSpec, status: ModelDeploymentStatus | None
    ) -> str | None:
        """The trust fingerprint, with the Secret read only while the spec's revision is new
        or refused (plan.verification.needs_trust); None when not read or unreadable."""
        key = spec.artifact.trust.public_key
        if key is None:
            return verification.fingerprint(spec.artifact.trust, None)
        if not verification.needs_trust(spec, status):
            return None
        try:
            pem = await asyncio.to_thread(self.kube.trust_key, ns, key.name, key.key)
        except ApiException as exc:  # decide nothing on it; the next pass reads again
            log.warning("cannot read trust Secret %s/%s: %s", ns, key.name, exc.reason)
            return None
        return verification.fingerprint(spec.artifact.trust, pem)

    async def _reverify(self, body: dict[str, Any], recheck: verification.Recheck) -> None:
        """Restart the revision's workers whose refusal no longer stands: their new pods verify
        against the trust as it is now."""
        if not recheck.decision.reverify:
            return
        meta = body["metadata"]
        log.info(
            "ModelDeployment %s/%s: revision %s: %s; restarting %s to verify again",
            meta["namespace"],
            meta["name"],
            recheck.revision,
            recheck.detail,
            ", ".join(recheck.restart) or "no worker Deployment yet",
        )
        for deployment in recheck.restart:
            await asyncio.to_thread(
                self.kube.restart,
                meta["namespace"],
                deployment,
                labels.TRUST_FINGERPRINT,
                recheck.decision.fingerprint,
            )
        self.reverifying.setdefault(meta["uid"], set()).update(recheck.stale)

    def _not_reverifying(
        self, uid: str, pods: list[observed.WorkerPod]
    ) -> list[observed.WorkerPod]:
        """The pods without the refused ones this process restarted (forgotten once the index
        no longer lists them)."""
        restarted = self.reverifying.get(uid)
        if not restarted:
            return pods
        restarted.intersection_update(p.name for p in pods)
        return [p for p in pods if p.name not in restarted]

    async def _analyse(
        self, body: dict[str, Any], spec: ModelDeploymentSpec, now: datetime.datetime
    ) -> analysis.Judgment | None:
        """Canary against stable from Prometheus, once per analysis interval while a canary
        takes traffic; None when not due, or when Prometheus did not answer (no verdict)."""
        meta = body["metadata"]
        ns, key = meta["namespace"], meta["uid"]
        current = _status_of(ModelDeploymentStatus, body)
        state = canary.state_of(current)
        live = state.phase in (rollout.Phase.PROGRESSING, rollout.Phase.PAUSED)
        interval = spec.rollout.analysis.interval_seconds
        at = now.timestamp()
        remembered = self.analysed.get(key, 0.0)  # status may lag this process's own write
        due = canary.analysis_due(current, now=at, interval=interval, remembered=remembered)
        if self.signals is None or not live or not due:
            return None
        self.analysed[key] = at
        window = self._window(spec)
        samples = [
            await asyncio.to_thread(
                self.signals.canary_sample, ns, spec.model.name, name, window_seconds=window
            )
            for name in (state.canary, state.stable)
        ]
        if samples[0] is None or samples[1] is None:
            return None
        judgment = analysis.judge(samples[0], samples[1], canary.thresholds_of(spec.rollout))
        if judgment.outcome is rollout.Outcome.INSUFFICIENT_SAMPLES:  # say why it waits
            targets = await asyncio.to_thread(self.signals.targets)
            if targets is not None:
                problems = {
                    job: signal_health.job_problem(job, targets.get(job)) for job in jobs.ALL
                }
                judgment = analysis.explained(judgment, problems)
        # every interval: debug only; status.rollout.lastAnalysis and Events carry the news
        log.debug("ModelDeployment %s: canary %s: %s", key, state.canary, judgment.message)
        return judgment

    def _window(self, spec: ModelDeploymentSpec) -> int:
        """Seconds an analysis measures over: the configured window, or the interval if longer."""
        return round(
            max(spec.rollout.analysis.interval_seconds, self.config.analysis_window_seconds)
        )

    async def _invalid(
        self, body: dict[str, Any], exc: pydantic.ValidationError, now: datetime.datetime
    ) -> None:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())[
            :900
        ]
        log.warning(
            "%s %s/%s: invalid spec: %s",
            body["kind"],
            body["metadata"]["namespace"],
            body["metadata"]["name"],
            message,
        )
        status = InferencePoolStatus(
            observed_generation=body["metadata"].get("generation"),
            conditions=[
                Condition(
                    type="Ready",
                    status="False",
                    reason="InvalidSpec",
                    message=message,
                    last_transition_time=rfc3339(now),
                )
            ],
        )
        # a patch of these fields only: the pool's last counts and zones stay as they were
        await self._report(body, body["kind"], status.to_patch(), [], now)

    async def _report(
        self,
        body: dict[str, Any],
        kind: str,
        status: dict[str, Any],
        events: list[Event],
        now: datetime.datetime,
    ) -> None:
        """Patch ``status`` (wire form: the planner's typed status, dumped by the caller) when
        it differs from what is stored, and post the events."""
        meta = body["metadata"]
        if self.exporter is not None:
            self.exporter.observe(kind, body, status)
        if status != (body.get("status") or {}):
            await asyncio.to_thread(
                self.kube.patch_status, kind, meta["namespace"], meta["name"], status
            )
        for event in events:
            log.info(
                "%s %s/%s: %s: %s",
                kind,
                meta["namespace"],
                meta["name"],
                event.reason,
                event.message,
            )
            try:
                await asyncio.to_thread(self.kube.post_event, body, event, now)
            except ApiException as exc:  # an Event is a courtesy: status already says it all
                log.warning("could not post %s event: %s", event.reason, exc.reason)
