"""The operator's ``/metrics``: fleet state, from the status the operator reports, as gauges.

Pure core: :func:`samples` turns one object's body and the status just planned for it into
:class:`Sample` values (names from tokenfleet.signals.operator). Shell: :class:`Exporter`, a
prometheus_client collector holding the latest samples of every object (each object's samples
replaced whole, so a scrape never sees half an update) and counting scaling decisions.

Why from status: it is what ``kubectl get`` shows and what the operator decided, so a dashboard
and an alert never disagree with the objects; nothing is measured twice.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Iterable, Iterator
from typing import Any, get_args

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tokenfleet.api.deployment import RolloutPhase
from tokenfleet.signals import operator as names

Obj = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace, name

HELP = {
    names.POOL_REPLICAS: "Replicas the operator wants in a zone of a pool.",
    names.POOL_READY: "Ready replicas in a zone of a pool.",
    names.POOL_WARM_FLOOR: "Warm floor of a zone (spec.warm.perZone; 0 while the zone is lost).",
    names.POOL_WARM: "Ready replicas of a pool held by its warm floor.",
    names.ZONE_HEALTHY: "1 while the zone is healthy, 0 while it is considered lost.",
    names.POOL_DEMAND: "Replicas the scaling signals asked for; reason: the deciding signal.",
    names.POOL_RECOMMENDED: "Replicas each scaling signal recommends.",
    names.SCALING_DECISIONS: "Scaling decisions that changed a pool's demand, by reason.",
    names.CONDITION: "1 when the condition's status is True, else 0.",
    names.REVISION_WEIGHT: "Percent of a model's traffic a revision receives.",
    names.REVISION_READY: "Ready replicas of a revision.",
    names.ROLLOUT_PHASE: "1 for the rollout's current phase, 0 for the others.",
    names.ROLLOUT_STEP: "Index of the current canary step.",
    names.ROLLOUT_STEP_STARTED: "Unix time the current canary step (or a resume) began.",
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def _sample(metric: str, value: float, /, **labels: str) -> Sample:
    return Sample(name=metric, labels=tuple(labels.items()), value=float(value))


def _conditions(kind: str, namespace: str, name: str, status: Obj) -> list[Sample]:
    return [
        _sample(
            names.CONDITION,
            c.get("status") == "True",
            kind=kind,
            namespace=namespace,
            name=name,
            type=str(c.get("type", "")),
            reason=str(c.get("reason", "")),
        )
        for c in status.get("conditions") or []
    ]


def _pool(namespace: str, pool: str, spec: Obj, status: Obj) -> list[Sample]:
    floor = int((spec.get("warm") or {}).get("perZone", 1))
    out = [_sample(names.POOL_WARM, status.get("warmReplicas", 0), namespace=namespace, pool=pool)]
    for zone in status.get("zones") or []:
        where = {"namespace": namespace, "pool": pool, "zone": str(zone["name"])}
        healthy = bool(zone.get("healthy", True))
        out += [
            _sample(names.POOL_REPLICAS, zone.get("desired", 0), **where),
            _sample(names.POOL_READY, zone.get("ready", 0), **where),
            _sample(names.ZONE_HEALTHY, healthy, **where),
            _sample(names.POOL_WARM_FLOOR, floor if healthy else 0, **where),
        ]
    scaling = status.get("autoscaling") or {}
    if "demand" in scaling:
        reason = str(scaling.get("reason", ""))
        out.append(
            _sample(
                names.POOL_DEMAND, scaling["demand"], namespace=namespace, pool=pool, reason=reason
            )
        )
    for signal, replicas in sorted((scaling.get("recommendations") or {}).items()):
        out.append(
            _sample(names.POOL_RECOMMENDED, replicas, namespace=namespace, pool=pool, signal=signal)
        )
    return out


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _model(namespace: str, spec: Obj, status: Obj) -> list[Sample]:
    model = str((spec.get("model") or {}).get("name", ""))
    where = {"namespace": namespace, "model": model}
    roles = {status.get("stableRevision"): "stable", status.get("canaryRevision"): "canary"}
    out = []
    for rev in status.get("revisions") or []:
        role = roles.get(rev["name"], "previous")
        out += [
            _sample(
                names.REVISION_WEIGHT,
                rev.get("weight", 0),
                **where,
                revision=rev["name"],
                role=role,
            ),
            _sample(
                names.REVISION_READY,
                rev.get("readyReplicas", 0),
                **where,
                revision=rev["name"],
                role=role,
            ),
        ]
    rollout = status.get("rollout") or {}
    if rollout:
        current = rollout.get("phase", "Promoted")
        out += [
            _sample(names.ROLLOUT_PHASE, phase == current, **where, phase=phase)
            for phase in get_args(RolloutPhase)
        ]
        out.append(_sample(names.ROLLOUT_STEP, rollout.get("step", 0), **where))
        started = _timestamp(rollout.get("stepStartedAt"))
        if started is not None:
            out.append(_sample(names.ROLLOUT_STEP_STARTED, started, **where))
    return out


def samples(kind: str, body: Obj, status: Obj) -> list[Sample]:
    """What one object's status says, as samples (pure)."""
    meta, spec = body["metadata"], body.get("spec") or {}
    namespace, name = str(meta["namespace"]), str(meta["name"])
    out = _conditions(kind, namespace, name, status)
    if kind == "InferencePool":
        out += _pool(namespace, name, spec, status)
    elif kind == "ModelDeployment":
        out += _model(namespace, spec, status)
    return out


class Exporter:
    """The latest samples of every object, served to Prometheus."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()  # the HTTP server collects from its own thread
        self._latest: dict[Key, list[Sample]] = {}
        self._decided: dict[tuple[str, str], str] = {}  # pool → time of its last decision
        self._decisions: dict[tuple[str, str, str], int] = {}  # namespace, pool, reason → count
        self.registry.register(self)

    def observe(self, kind: str, body: Obj, status: Obj) -> None:
        """Replace the object's samples; count a new scaling decision of a pool."""
        meta = body["metadata"]
        key = (kind, str(meta["namespace"]), str(meta["name"]))
        fresh = samples(kind, body, status)
        with self._lock:
            self._latest[key] = fresh
            if kind == "InferencePool":
                self._count_decision(key[1], key[2], status)

    def _count_decision(self, namespace: str, pool: str, status: Obj) -> None:
        decisions = (status.get("autoscaling") or {}).get("decisions") or []
        if not decisions:
            return
        last = decisions[-1]
        counter = (namespace, pool, str(last.get("reason", "")))
        self._decisions.setdefault(counter, 0)  # the series exists from its first sighting
        seen = self._decided.get((namespace, pool))
        if seen is not None and seen != last.get("time"):
            self._decisions[counter] += 1
        self._decided[(namespace, pool)] = str(last.get("time", ""))

    def retain(self, keys: Iterable[Key]) -> None:
        """Forget objects that are gone (their series disappear, as the objects did)."""
        keep = set(keys)
        with self._lock:
            for key in set(self._latest) - keep:
                del self._latest[key]

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector protocol."""
        with self._lock:
            everything = [s for found in self._latest.values() for s in found]
            decisions = dict(self._decisions)
        by_name: dict[str, list[Sample]] = {}
        for s in everything:
            by_name.setdefault(s.name, []).append(s)
        for name, found in sorted(by_name.items()):
            family = GaugeMetricFamily(name, HELP[name], labels=[k for k, _ in found[0].labels])
            for s in found:
                family.add_metric([v for _, v in s.labels], s.value)
            yield family
        counter = CounterMetricFamily(
            names.SCALING_DECISIONS.removesuffix("_total"),
            HELP[names.SCALING_DECISIONS],
            labels=["namespace", "pool", "reason"],
        )
        for (namespace, pool, reason), count in sorted(decisions.items()):
            counter.add_metric([namespace, pool, reason], count)
        yield counter

    def serve(self, port: int, address: str = "") -> None:
        """Serve /metrics on ``address:port`` from a daemon thread (fails if the port is taken)."""
        start_http_server(port, addr=address or "0.0.0.0", registry=self.registry)  # noqa: S104
