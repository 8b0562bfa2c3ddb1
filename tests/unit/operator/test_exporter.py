"""The operator's exported fleet state: status in, samples out; decisions counted once each.

Matrix: a pool's zones (healthy, lost), its autoscaling block, conditions; a model's revisions
(stable, canary, previous) and rollout phase; objects that are gone; the text a scrape reads.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from tokenfleet.operator import exporter
from tokenfleet.signals import operator as names


def body(kind: str, name: str = "p", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"namespace": "ns", "name": name}, "spec": spec or {}}


POOL_STATUS = {
    "warmReplicas": 2,
    "zones": [
        {"name": "zone-a", "desired": 3, "ready": 2, "healthy": True},
        {"name": "zone-b", "desired": 0, "ready": 0, "healthy": False},
    ],
    "autoscaling": {"demand": 4, "reason": "QueueAge", "recommendations": {"queueAge": 4}},
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready"},
        {"type": "MetricsUnavailable", "status": "False", "reason": "SignalsFresh"},
    ],
}
MODEL_STATUS = {
    "stableRevision": "r1",
    "canaryRevision": "r2",
    "revisions": [
        {"name": "r0", "digest": "d", "weight": 0, "readyReplicas": 0},
        {"name": "r1", "digest": "d", "weight": 90, "readyReplicas": 3},
        {"name": "r2", "digest": "d", "weight": 10, "readyReplicas": 1},
    ],
    "rollout": {"phase": "Progressing", "step": 1, "stepStartedAt": "2026-01-01T00:00:00Z"},
}


def value(found: list[exporter.Sample], name: str, /, **labels: str) -> float | None:
    for s in found:
        if s.name == name and all(dict(s.labels).get(k) == v for k, v in labels.items()):
            return s.value
    return None


POOL = exporter.samples(
    "InferencePool", body("InferencePool", spec={"warm": {"perZone": 2}}), POOL_STATUS
)
MODEL = exporter.samples(
    "ModelDeployment", body("ModelDeployment", "m", {"model": {"name": "chat"}}), MODEL_STATUS
)


@pytest.mark.parametrize(
    ("found", "name", "labels", "expected"),
    [
        pytest.param(POOL, names.POOL_REPLICAS, {"zone": "zone-a", "pool": "p"}, 3, id="desired"),
        pytest.param(POOL, names.POOL_READY, {"zone": "zone-a"}, 2, id="ready"),
        pytest.param(POOL, names.POOL_WARM_FLOOR, {"zone": "zone-a"}, 2, id="floor-healthy"),
        pytest.param(POOL, names.POOL_WARM_FLOOR, {"zone": "zone-b"}, 0, id="floor-lost-zone"),
        pytest.param(POOL, names.ZONE_HEALTHY, {"zone": "zone-b"}, 0, id="zone-lost"),
        pytest.param(POOL, names.POOL_WARM, {"pool": "p"}, 2, id="warm"),
        pytest.param(POOL, names.POOL_DEMAND, {"reason": "QueueAge"}, 4, id="demand"),
        pytest.param(POOL, names.POOL_RECOMMENDED, {"signal": "queueAge"}, 4, id="signal"),
        pytest.param(
            POOL,
            names.CONDITION,
            {"type": "MetricsUnavailable", "kind": "InferencePool"},
            0,
            id="condition-false",
        ),
        pytest.param(POOL, names.CONDITION, {"type": "Ready", "name": "p"}, 1, id="condition-true"),
        pytest.param(
            MODEL, names.REVISION_WEIGHT, {"revision": "r1", "role": "stable"}, 90, id="stable"
        ),
        pytest.param(
            MODEL, names.REVISION_WEIGHT, {"revision": "r2", "role": "canary"}, 10, id="canary"
        ),
        pytest.param(
            MODEL, names.REVISION_READY, {"revision": "r0", "role": "previous"}, 0, id="old"
        ),
        pytest.param(
            MODEL, names.ROLLOUT_PHASE, {"phase": "Progressing", "model": "chat"}, 1, id="phase"
        ),
        pytest.param(MODEL, names.ROLLOUT_PHASE, {"phase": "Paused"}, 0, id="other-phase"),
        pytest.param(MODEL, names.ROLLOUT_STEP, {}, 1, id="step"),
        pytest.param(MODEL, names.ROLLOUT_STEP_STARTED, {}, 1767225600, id="step-started"),
    ],
)
def test_status_becomes_samples(
    found: list[exporter.Sample], name: str, labels: dict[str, str], expected: float
) -> None:
    assert value(found, name, **labels) == expected


def test_a_new_pool_exports_no_warm_replicas_and_nothing_it_does_not_know() -> None:
    (warm,) = exporter.samples("InferencePool", body("InferencePool"), {})
    assert (warm.name, warm.value) == (names.POOL_WARM, 0)
    assert exporter.samples("Tenant", body("Tenant"), {}) == []


def decided(time: str, reason: str = "QueueAge") -> dict[str, Any]:
    return {"autoscaling": {"decisions": [{"replicas": 1, "reason": reason, "time": time}]}}


def test_decisions_are_counted_once_each_and_gone_objects_forgotten() -> None:
    exp = exporter.Exporter()
    pool = body("InferencePool")
    for status in (decided("t1"), decided("t1"), decided("t2"), decided("t3", "WarmFloor")):
        exp.observe("InferencePool", pool, {**POOL_STATUS, **status})
    text = generate_latest(exp.registry).decode()
    assert (
        'tokenfleet_operator_scaling_decisions_total{namespace="ns",pool="p",reason="QueueAge"} 1.0'
        in text
    )
    assert 'reason="WarmFloor"} 1.0' in text
    assert 'tokenfleet_operator_pool_replicas{namespace="ns",pool="p",zone="zone-a"} 3.0' in text
    exp.retain([])
    assert "tokenfleet_operator_pool_replicas{" not in generate_latest(exp.registry).decode()
