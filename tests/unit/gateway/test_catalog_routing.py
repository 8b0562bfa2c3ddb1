"""The catalog carries routing inputs from the resources: pool routing policy and dedicated
classes from InferencePool.spec.routing, revision weights from ModelDeployment.status, the
response cache from ModelDeployment.spec.responseCache (None unless enabled), and served names
resolved in the caller's own namespace first."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.gateway import catalog
from tokenfleet.gateway.policy import quotas


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


def in_ns(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": name}, "spec": spec}


def worker_pod(namespace: str, ip: str, model: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": ip,
            "labels": {labels.MODEL: model, labels.POOL: "online"},
        },
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_served_name_claimed_in_two_namespaces_resolves_to_the_callers_own() -> None:
    """Team A's and team B's "chat" are different models: each team's tenants reach their own,
    and their endpoints never mix. A tenant elsewhere gets neither, as neither namespace shares
    it (issue 35, finding 4: before, it got the first by namespace/name, team-a's)."""
    spec = {**MODEL_SPEC, "model": {"name": "chat", "aliases": ["assistant"]}, "pools": ["online"]}
    cat = catalog.from_objects(
        pools=[in_ns("team-a", "online", {}), in_ns("team-b", "online", {})],
        models=[in_ns("team-b", "chat", spec), in_ns("team-a", "chat", spec)],
        tenants=[],
        secrets=[],
        pods=[worker_pod("team-a", "10.0.0.1", "chat"), worker_pod("team-b", "10.0.0.2", "chat")],
    )
    for team, ip in (("team-a", "10.0.0.1"), ("team-b", "10.0.0.2")):
        for name in ("chat", "assistant"):
            model = cat.model(name, team)
            assert model is not None and model.pools == (f"{team}/online",)
            (pool,) = model.pools
            urls = [e.url for e in cat.endpoints.group(name, pool=pool).endpoints]
            assert urls == [f"http://{ip}:8000"]
        assert cat.visible(team)["chat"].namespace == team
    assert cat.model("chat", "team-c") is None and "chat" not in cat.visible("team-c")
    cluster_wide = cat.model("chat")  # static callers: the first by namespace/name
    assert cluster_wide is not None and cluster_wide.namespace == "team-a"
    assert cat.model("missing", "team-a") is None


def test_a_tenants_namespace_comes_from_its_key() -> None:
    limits = quotas.Limits()
    tenant = catalog.Tenant(
        key="team-a/app", allowed_models=frozenset(), priority_class="", limits=limits
    )
    assert tenant.namespace == "team-a"
    static = catalog.Tenant(key="app", allowed_models=frozenset(), priority_class="", limits=limits)
    assert static.namespace == ""


def test_a_namespaces_broken_model_is_unavailable_to_it_not_replaced_by_anothers() -> None:
    """Not even by one another namespace shares with every namespace (spec.sharedWith)."""
    good = {**MODEL_SPEC, "model": {"name": "chat"}, "pools": ["online"], "sharedWith": ["*"]}
    broken = {"model": {"name": "chat"}, "pools": ["online"]}  # no artifact: does not parse
    cat = catalog.from_objects(
        pools=[],
        models=[in_ns("team-a", "chat", broken), in_ns("team-b", "chat", good)],
        tenants=[],
        secrets=[],
        pods=[],
    )
    assert cat.model("chat", "team-a") is None
    assert "chat" not in cat.visible("team-a")
    elsewhere = cat.model("chat", "team-c")
    assert elsewhere is not None and elsewhere.namespace == "team-b"


@pytest.mark.parametrize(
    ("cache", "expected"),
    [
        pytest.param(None, None, id="default-off"),
        pytest.param({"enabled": False, "ttlSeconds": 9}, None, id="disabled"),
        pytest.param({"enabled": True}, (300, 65536), id="enabled-defaults"),
        pytest.param(
            {"enabled": True, "ttlSeconds": 30, "maxEntryBytes": 2048}, (30, 2048), id="set"
        ),
    ],
)
def test_the_response_cache_comes_from_the_spec(
    cache: dict[str, Any] | None, expected: tuple[int, int] | None
) -> None:
    spec = {**MODEL_SPEC, **({"responseCache": cache} if cache is not None else {})}
    cat = catalog.from_objects(
        pools=[], models=[obj("llama", spec)], tenants=[], secrets=[], pods=[]
    )
    found = cat.models["llama"].response_cache
    assert ((found.ttl_seconds, found.max_entry_bytes) if found else None) == expected


def test_a_cache_group_is_scoped_to_its_namespace() -> None:
    """Two namespaces' Tenants that name the same cacheIsolation.group share no cache: the
    group is namespace/group, so their cache_salt differs; within one namespace they share it;
    a static file's tenants keep the bare name (finding 4 of issue 35: groups were global)."""
    from tokenfleet.api.tenant import TenantSpec
    from tokenfleet.gateway.policy.salt import cache_salt

    shared = TenantSpec.model_validate(
        {
            "apiKeySecretRef": {"name": "k"},
            "allowedModels": ["*"],
            "cacheIsolation": {"mode": "SharedGroup", "group": "evals"},
        }
    )
    a1, a2 = catalog.tenant_of("a/one", shared), catalog.tenant_of("a/two", shared)
    b = catalog.tenant_of("b/one", shared)
    assert (a1.cache_group, b.cache_group) == ("a/evals", "b/evals")

    def salt(t: catalog.Tenant) -> str:
        return cache_salt(secret=b"s", tenant=t.key, group=t.cache_group)

    assert salt(a1) == salt(a2) != salt(b)
    assert catalog.tenant_of("one", shared).cache_group == "evals"
    isolated = TenantSpec.model_validate({"apiKeySecretRef": {"name": "k"}, "allowedModels": ["*"]})
    assert catalog.tenant_of("a/one", isolated).cache_group == ""
