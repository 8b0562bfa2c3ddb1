"""One pool's reconciliation decided from values: what to apply, delete, report (pure).

The shell gathers the inputs from the indexes, calls :func:`plan_pool`, and carries out the
returned :class:`PoolPlan`. Nothing here talks to the API server or reads a clock.

A model that does not fit its pools (plan.devices: mixed devices, an image for the other device,
a CPU replica that cannot be sized) is held: no worker Deployment is applied, scaled or deleted,
so whatever runs keeps serving, and Ready says why.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Literal

from tokenfleet.api import engine_key, labels
from tokenfleet.api.base import Condition, rfc3339
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import (
    AutoscalingStatus,
    InferencePoolSpec,
    InferencePoolStatus,
    ScalingDecision,
    ZoneStatus,
)
from tokenfleet.operator.plan import (
    canary,
    cpu_workers,
    desired,
    isolation,
    observed,
    reporting,
)
from tokenfleet.operator.plan.reporting import Event, condition
from tokenfleet.operator.policy import placement, signal_health, zones


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolInputs:
    """Everything the decision for one pool depends on."""

    namespace: str
    name: str
    uid: str
    generation: int | None
    spec: InferencePoolSpec
    status: InferencePoolStatus | None  # as the last pass wrote it; None: new, or unreadable
    model: ModelDeploymentSpec | None  # the ModelDeployment this pool runs, if any
    rival_models: Sequence[str]  # other ModelDeployments claiming the pool (they lose)
    pods: Sequence[observed.WorkerPod]
    sets: Sequence[observed.WorkerSet]
    nodes: Sequence[observed.NodeRecord]
    now: datetime.datetime
    demand: int = 0  # the autoscaler's wish; 0 lets the bounds decide
    model_annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    autoscaling: AutoscalingStatus | None = None  # the autoscaler's status block, when it runs
    metrics_ok: bool | None = None  # None: no autoscaler; False: its signals were unreadable
    #: configured signals that had no series, each with its likely cause
    metrics_missing: tuple[signal_health.Missing, ...] = ()
    model_status: ModelDeploymentStatus | None = None  # where the model's rollout stands
    #: why ``model`` cannot run on its pools as written (plan.devices); None: it fits
    misfit: cpu_workers.Misfit | None = None
    #: who may connect to the workers (a NetworkPolicy); None: no policy rendered
    peers: isolation.Peers | None = None
    #: the installation's engine key (the gateway holds it); the pool's Secret gets the key
    #: derived from it for the pool's namespace (tokenfleet.api.engine_key); "": no --api-key
    engine_key: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolPlan:
    """What the shell must do for one pool."""

    apply: list[desired.Manifest]
    delete: list[str]  # worker Deployment names
    scale: dict[str, int]  # worker Deployment name → replicas (the kept revision's, mid-rollout)
    status: InferencePoolStatus
    events: list[Event]


def _isolation(inputs: PoolInputs, owner: desired.Owner) -> list[desired.Manifest]:
    """The pool's NetworkPolicy and engine-key Secret, when configured (plan.isolation)."""
    ns, name = inputs.namespace, inputs.name
    out = []
    if inputs.peers is not None:
        out.append(
            desired.network_policy(namespace=ns, pool_name=name, owner=owner, peers=inputs.peers)
        )
    if inputs.engine_key:
        out.append(
            desired.engine_key_secret(
                namespace=ns, pool_name=name, owner=owner, installation_key=inputs.engine_key
            )
        )
    return out


def plan_pool(inputs: PoolInputs) -> PoolPlan:
    """Decide children, status and events for one pool."""
    spec = inputs.spec
    health = zones.assess(
        wanted=spec.zones.names,
        nodes=observed.zone_nodes(inputs.nodes, spec),
        unschedulable_since=observed.unschedulable_since(inputs.pods),
        now=inputs.now,
    )
    owner = desired.Owner(kind="InferencePool", name=inputs.name, uid=inputs.uid)
    common = [
        desired.disruption_budget(namespace=inputs.namespace, pool_name=inputs.name, owner=owner),
        desired.headless_service(namespace=inputs.namespace, pool_name=inputs.name, owner=owner),
        *_isolation(inputs, owner),
    ]
    revision = desired.revision_of(inputs.model) if inputs.model else ""
    running = (
        canary.pool_revisions(inputs.model_status, revision=revision, spec=inputs.model.rollout)
        if inputs.model
        else canary.PoolRevisions()
    )
    serving = running.kept or revision  # the revision placement sizes and status reports
    current = observed.replicas_by_zone(inputs.sets, serving)
    ready = observed.ready_by_zone(inputs.pods, serving)
    zone_list = [
        placement.Zone(
            name=h.name,
            healthy=h.healthy,
            current=current.get(h.name, 0),
            ready=ready.get(h.name, 0),
        )
        for h in health
    ]
    placed = placement.place(
        demand=inputs.demand,
        zones=zone_list,
        min_replicas=spec.replicas.min,
        max_replicas=spec.replicas.max,
        warm_per_zone=spec.warm.per_zone,
        tolerate_loss=spec.zones.tolerate_loss,
        pool=f"{inputs.namespace}/{inputs.name}",
    )
    if inputs.model is None:
        placed = dataclasses.replace(placed, per_zone=dict.fromkeys(placed.per_zone, 0))
    step = placement.transition(target=placed.per_zone, zones=zone_list)
    workers, keep = _children(inputs, running, step=step, total=placed.total, ready=ready)
    if inputs.misfit is not None:  # held: nothing new rendered, nothing running touched
        workers, keep = [], {s.name for s in inputs.sets}
    existing = {s.name: s.applied_hash for s in inputs.sets}
    # the replica count is checked apart from the hash: kept_scale's patches move it without
    # touching the hash, and a revision that is placed again must get its count back
    replicas = {s.name: s.replicas for s in inputs.sets}
    apply = [
        m
        for m in common + workers
        if existing.get(m["metadata"]["name"]) != _hash(m)
        or (m["kind"] == "Deployment" and replicas[m["metadata"]["name"]] != m["spec"]["replicas"])
    ]
    delete = sorted(name for name in existing if name not in keep)
    scale = (
        kept_scale([s for s in inputs.sets if s.revision == running.kept], placed.per_zone)
        if running.kept and inputs.misfit is None
        else {}
    )
    status = _status(inputs, health, placed, step, ready)
    return PoolPlan(
        apply=apply,
        delete=delete,
        scale=scale,
        status=status,
        events=_events(inputs.status, status),
    )


def _children(
    inputs: PoolInputs,
    running: canary.PoolRevisions,
    *,
    step: Mapping[str, int],
    total: int,
    ready: Mapping[str, int],
) -> tuple[list[desired.Manifest], set[str]]:
    """Worker Deployments to apply, and the names of every worker Deployment to keep."""
    owner = desired.Owner(kind="InferencePool", name=inputs.name, uid=inputs.uid)
    if running.kept:  # a rollout: the stable revision runs on (scaled: kept_scale), the canary
        # beside it
        zone_names = [z for z, n in step.items() if n > 0] or list(step)  # healthy first
        workers = _workers(inputs, spread(running.canary_replicas(total), zone_names), owner)
        keep = {m["metadata"]["name"] for m in workers}
        return workers, keep | {s.name for s in inputs.sets if s.revision == running.kept}
    workers = _workers(inputs, step, owner)
    keep = {m["metadata"]["name"] for m in workers}
    revision = desired.revision_of(inputs.model) if inputs.model else ""
    for s in inputs.sets:  # an older revision serves until the new one is fully ready
        if s.revision != revision and inputs.model is not None and sum(ready.values()) < total:
            keep.add(s.name)
    return workers, keep


def kept_scale(sets: Sequence[observed.WorkerSet], target: Mapping[str, int]) -> dict[str, int]:
    """Replica counts that make the kept (stable) revision follow the pool's placement during a
    rollout, and after a rollback until the spec changes: traffic and zone losses do not wait
    for a canary. It stays at the full placement beside the canary, so a rollback is instant.

    Its spec is gone from the manifest, so it can only grow in zones where it already runs: a
    zone's share without a kept Deployment goes to the zones that have one. It goes straight to
    the target (no make-before-break between zones, which would wait for a zone it cannot
    start in)."""
    by_zone: dict[str, list[observed.WorkerSet]] = {}
    for s in sorted(sets, key=lambda s: s.name):
        by_zone.setdefault(s.zone, []).append(s)
    if not by_zone:
        return {}
    hosts = [z for z in by_zone if target.get(z, 0) > 0]  # placement gives lost zones 0
    if not hosts:
        return {}  # it runs only in zones placement gave up: nowhere healthy to grow
    homeless = sum(n for z, n in target.items() if z not in by_zone)
    extra = spread(homeless, hosts)
    out = {}
    for zone, members in by_zone.items():
        want = target.get(zone, 0) + extra.get(zone, 0)
        shares = spread(want, [m.name for m in members])  # one per zone, unless interrupted
        out.update({m.name: shares[m.name] for m in members if m.replicas != shares[m.name]})
    return out


def _hash(manifest: desired.Manifest) -> str:
    return str(manifest["metadata"]["annotations"][desired.APPLIED_HASH])


def spread(replicas: int, zones: Sequence[str]) -> dict[str, int]:
    """``replicas`` over ``zones`` as evenly as possible, the first zones taking the rest."""
    if not zones:
        return {}
    ordered = sorted(zones)
    share, rest = divmod(replicas, len(ordered))
    return {z: share + (1 if i < rest else 0) for i, z in enumerate(ordered)}


def _workers(
    inputs: PoolInputs, step: Mapping[str, int], owner: desired.Owner
) -> list[desired.Manifest]:
    if inputs.model is None:
        return []
    key = engine_key.derive(inputs.engine_key, inputs.namespace)
    fingerprint = engine_key.fingerprint(key) if key else ""
    return [
        desired.worker_deployment(
            namespace=inputs.namespace,
            pool_name=inputs.name,
            pool=inputs.spec,
            model=inputs.model,
            owner=owner,
            zone=zone,
            replicas=count,
            pod_annotations={
                k: v for k, v in inputs.model_annotations.items() if k.startswith(labels.SIM_PREFIX)
            },
            engine_key_fingerprint=fingerprint,
        )
        for zone, count in sorted(step.items())
        if count > 0
    ]


Verdict = tuple[bool, str, str]  # condition status, reason, message


def _ready_verdict(
    inputs: PoolInputs, health: Sequence[zones.ZoneHealth], total: int, ready: int
) -> Verdict:
    if inputs.model is None:
        return (
            False,
            "NoModelDeployment",
            f"no ModelDeployment in {inputs.namespace} lists this "
            "pool in spec.pools; apply one to run workers here",
        )
    if inputs.misfit is not None:
        return (False, inputs.misfit.reason, inputs.misfit.message)
    if not any(h.healthy for h in health):
        return (
            False,
            "NoHealthyZone",
            "; ".join(h.message for h in health)
            or "no node offers the accelerator this pool asks for (check spec.accelerator)",
        )
    if ready >= total:
        return (True, "AllReplicasReady", f"{ready} of {total} replicas ready")
    return (False, "ReplicasStarting", f"{ready} of {total} replicas ready")


def _progress_verdict(
    inputs: PoolInputs, placed: placement.Placement, step: Mapping[str, int], ready: int
) -> Verdict:
    if inputs.misfit is not None:
        return (False, "Held", "no worker changes until the ModelDeployment fits (see Ready)")
    if any(step.get(z, 0) != n for z, n in placed.per_zone.items()):
        return (True, "Rebalancing", "new replicas start before old ones stop")
    if inputs.model is not None and ready < placed.total:
        return (True, "ScalingUp", f"waiting for {placed.total - ready} replicas to become ready")
    return (False, "Stable", "desired replicas are in place")


def _lost_zone_message(old: InferencePoolStatus, zone: zones.ZoneHealth, healthy: list[str]) -> str:
    """ "zone-b lost: ...; its 3 replicas moved to zone-a and zone-c", stable across passes."""
    moved = {z.name: z.desired for z in old.zones}
    if moved.get(zone.name) and healthy:
        return (
            f"{zone.message}; its {moved[zone.name]} replicas moved to {reporting.names(healthy)}"
        )
    before = reporting.find(old.conditions, "Degraded")
    parts = before.message.split(" | ") if before else []
    return next((p for p in parts if p.startswith(zone.message)), zone.message)


def _degraded_verdict(
    inputs: PoolInputs, health: Sequence[zones.ZoneHealth], placed: placement.Placement
) -> Verdict:
    healthy = [h.name for h in health if h.healthy]
    old = inputs.status or InferencePoolStatus()
    lost = [_lost_zone_message(old, h, healthy) for h in health if not h.healthy]
    if lost:
        return (True, "ZoneLost", " | ".join(lost))
    if placed.why == placement.Why.MAX_REPLICAS:
        return (
            True,
            "ScalingLimited",
            f"{placed.needed} replicas needed but replicas.max is {inputs.spec.replicas.max}",
        )
    if inputs.rival_models:
        return (
            True,
            "PoolClaimedTwice",
            f"ModelDeployment(s) {reporting.names(inputs.rival_models)} "
            "also claim this pool; a pool runs one model, the oldest claim wins",
        )
    return (False, "AllZonesHealthy", "every zone is healthy")


#: The MetricsUnavailable condition, by whether the autoscaler's signals were fresh.
_METRICS: dict[bool, Verdict] = {
    True: (False, "SignalsFresh", "scaling signals are fresh"),
    False: (
        True,
        "SignalsUnreadable",
        "Prometheus did not answer or the pool's series are stale: holding the last decision, "
        "never scaling down on silence",
    ),
}


def _metrics_verdict(inputs: PoolInputs) -> Verdict:
    """Unreadable or stale first (the decision holds); then any configured signal without
    data, named with its cause (the decision runs on the rest); else fresh."""
    if inputs.metrics_ok and inputs.metrics_missing:
        return (True, "SignalsMissing", signal_health.summary(inputs.metrics_missing)[:1000])
    idle = inputs.autoscaling is not None and inputs.autoscaling.reason == "MetricsUnavailable"
    if inputs.metrics_ok and idle:
        return (
            False,
            "AwaitingData",
            "Prometheus answers and scrapes every job, but no signal has data yet (no ready "
            "worker, no request for the pool): holding the last decision",
        )
    return _METRICS[bool(inputs.metrics_ok)]


def _last_scaling(inputs: PoolInputs, placed: placement.Placement) -> ScalingDecision:
    """The last decision that changed the size or its reason; kept as is (time too) otherwise."""
    last = inputs.status.last_scaling if inputs.status else None
    why, message = placed.why.value, placed.message
    if placed.why == placement.Why.DEMAND and inputs.autoscaling:  # say which signal asked
        why, message = inputs.autoscaling.reason, inputs.autoscaling.message
    if last is not None and last.replicas == placed.total and last.reason == why:
        return last
    return ScalingDecision(
        replicas=placed.total, reason=why, message=message, time=rfc3339(inputs.now)
    )


def _status(
    inputs: PoolInputs,
    health: Sequence[zones.ZoneHealth],
    placed: placement.Placement,
    step: Mapping[str, int],
    ready: Mapping[str, int],
) -> InferencePoolStatus:
    total_ready = sum(ready.values())
    verdicts = [
        ("Ready", _ready_verdict(inputs, health, placed.total, total_ready)),
        ("Progressing", _progress_verdict(inputs, placed, step, total_ready)),
        ("Degraded", _degraded_verdict(inputs, health, placed)),
    ]
    if inputs.metrics_ok is not None:
        verdicts.append(("MetricsUnavailable", _metrics_verdict(inputs)))
    healthy = [h.name for h in health if h.healthy]
    return InferencePoolStatus(
        observed_generation=inputs.generation,
        replicas=placed.total,
        ready_replicas=total_ready,
        warm_replicas=sum(min(ready.get(z, 0), inputs.spec.warm.per_zone) for z in healthy),
        zones=[
            ZoneStatus(
                name=h.name,
                desired=placed.per_zone.get(h.name, 0),
                ready=ready.get(h.name, 0),
                healthy=h.healthy,
                message=h.message,
            )
            for h in health
        ],
        last_scaling=_last_scaling(inputs, placed),
        autoscaling=inputs.autoscaling,
        conditions=_conditions(inputs, verdicts),
    )


def _conditions(inputs: PoolInputs, verdicts: Sequence[tuple[str, Verdict]]) -> list[Condition]:
    old = inputs.status.conditions if inputs.status else []
    now, gen = inputs.now, inputs.generation
    return [
        condition(old, type=t, status=s, reason=r, message=m, now=now, generation=gen)
        for t, (s, r, m) in verdicts
    ]


def _events(old: InferencePoolStatus | None, new: InferencePoolStatus) -> list[Event]:
    """One Event per transition a user should see: a zone lost or back, a blocked pool, a new
    size, a new demand."""
    before = old or InferencePoolStatus()
    events = []
    if lost := reporting.changed_to(before.conditions, new.conditions, "Degraded", "True"):
        events.append(Event(type="Warning", reason=lost.reason, message=lost.message))
    was_lost = {z.name for z in before.zones if not z.healthy}
    back = [z.name for z in new.zones if z.healthy and z.name in was_lost]
    if back:
        events.append(
            Event(
                type="Normal",
                reason="ZoneRecovered",
                message=f"{reporting.names(back)} healthy again; rebalancing replicas",
            )
        )
    blocked = reporting.changed_to(before.conditions, new.conditions, "Ready", "False")
    if blocked and blocked.reason in ("NoModelDeployment", "NoHealthyZone"):
        waiting = blocked.reason == "NoModelDeployment"  # a pool waiting for a model is normal
        kind: Literal["Normal", "Warning"] = "Normal" if waiting else "Warning"
        events.append(Event(type=kind, reason=blocked.reason, message=blocked.message))
    last_old, last_new = before.last_scaling, new.last_scaling
    if last_new is not None and (last_old.time if last_old else None) != last_new.time:
        events.append(
            Event(
                type="Normal",
                reason="Scaled",
                message=f"{last_old.replicas if last_old else 0} -> {last_new.replicas} "
                f"replicas ({last_new.message})",
            )
        )
    # a signal gone silent (or a new one silent): say which and why, once per change
    silent = reporting.changed_to(before.conditions, new.conditions, "MetricsUnavailable", "True")
    if silent:
        events.append(Event(type="Warning", reason=silent.reason, message=silent.message[:500]))
    demand_old, demand_new = before.autoscaling, new.autoscaling
    if demand_old and demand_new and demand_old.demand != demand_new.demand:
        events.append(Event(type="Normal", reason="Autoscaled", message=demand_new.message[:500]))
    return events
