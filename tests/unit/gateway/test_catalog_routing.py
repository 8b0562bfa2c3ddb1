"""The catalog carries routing inputs from the resources: pool routing policy and dedicated
classes from InferencePool.spec.routing, revision weights from ModelDeployment.status."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway import catalog


def obj(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name},
        "spec": spec,
        **({"status": status} if status is not None else {}),
    }


MODEL_SPEC = {
    "model": {"name": "llama"},
    "pools": ["online", "batch"],
    "artifact": {
        "uri": "file:///models/llama",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "key"}},
    },
}


@pytest.mark.parametrize(
    ("status", "weights"),
    [
        pytest.param(None, {}, id="no-status-yet"),
        pytest.param(
            {
                "revisions": [
                    {"name": "r1", "digest": "d", "weight": 90},
                    {"name": "r2", "digest": "d", "weight": 10},
                ]
            },
            {"r1": 90, "r2": 10},
            id="canary-weights",
        ),
        pytest.param({"revisions": "garbage"}, {}, id="unparseable-status-ignored"),
        pytest.param({"kopf": {"progress": {}}, "phase": "Available"}, {}, id="other-keys"),
    ],
)
def test_revision_weights_come_from_status(
    status: dict[str, Any] | None, weights: dict[str, int]
) -> None:
    cat = catalog.from_objects(
        pools=[], models=[obj("llama", MODEL_SPEC, status)], tenants=[], secrets=[], pods=[]
    )
    assert dict(cat.models["llama"].revision_weights) == weights


def test_pool_routing_policy_and_dedicated_classes() -> None:
    pools = [
        obj("online", {"routing": {"policy": "LeastLoad", "loadWeight": 3, "sampleSize": 4}}),
        obj("batch", {"routing": {"classes": ["batch"]}}),
    ]
    cat = catalog.from_objects(pools=pools, models=[], tenants=[], secrets=[], pods=[])
    online, batch = cat.pools["ns/online"], cat.pools["ns/batch"]
    assert (online.routing.kind, online.routing.load, online.routing.sample) == ("LeastLoad", 3, 4)
    assert online.routing.bounded_load == 2.0
    assert batch.option().classes == {"batch"} and online.option().classes == frozenset()
