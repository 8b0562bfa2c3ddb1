"""The adapters in the catalog (``adapter_catalog``, ``catalog.from_objects``, static mode) and
a request's resolution to one (``targets.resolve``).

Matrix: the adapter's status (verified and current, stale, refused, none) → its offer; the
base's lora limits → slots, its spec.adapters → spill and load timeout (defaults when absent);
a base without lora or missing → left out; a model's name beats an adapter's; only worker pods
with an ``adapters`` port, of the base, in the adapter's namespace, carry its name; and
resolution: a tenant named (served as the base under the adapter's name), not named (403 even
with allowedModels "*"), pending (503 + Retry-After), refused (503 without).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.gateway import catalog, config, targets
from tokenfleet.gateway.policy import quotas
from tokenfleet.gateway.policy.adapter_access import Offer
from tokenfleet.gateway.policy.rejections import Reason, Rejected

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def obj(
    kind_spec: dict[str, Any],
    name: str,
    *,
    namespace: str = "team-a",
    generation: int = 1,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name, "uid": f"{namespace}-{name}"}
    return {
        "metadata": {**meta, "generation": generation},
        "spec": kind_spec,
        **({"status": status} if status is not None else {}),
    }


def deployment(
    name: str = "llama-8b",
    *,
    served: str = "llama",
    lora: dict[str, Any] | None = None,
    adapters: dict[str, Any] | None = None,
    namespace: str = "team-a",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": served},
        "pools": ["online"],
        "artifact": {
            "uri": "file:///models/llama",
            "digest": DIGEST,
            "trust": {"publicKey": {"name": "key"}},
        },
    }
    if lora is not None:
        spec["engine"] = {"lora": lora}
    if adapters is not None:
        spec["adapters"] = adapters
    return obj(spec, name, namespace=namespace)


VERIFIED = {"observedGeneration": 1, "digest": DIGEST, "verified": True, "reason": "Verified"}


def adapter(
    name: str = "acme-support",
    *,
    base: str = "llama-8b",
    status: dict[str, Any] | None = None,
    namespace: str = "team-a",
    digest: str = DIGEST,
) -> dict[str, Any]:
    spec = {
        "base": base,
        "servedName": name,
        "artifact": {"uri": f"file:///models/adapters/{name}", "digest": digest},
        "tenants": ["acme"],
    }
    return obj(spec, name, namespace=namespace, status=VERIFIED if status is None else status)


def pod(ip: str, *, loader: bool = True, model: str = "llama", namespace: str = "team-a") -> Any:
    ports = [{"name": "http", "containerPort": 8000}]
    containers = [{"name": "vllm", "ports": ports}]
    if loader:
        containers.append(
            {"name": "adapter-loader", "ports": [{"name": "adapters", "containerPort": 8002}]}
        )
    return {
        "metadata": {
            "namespace": namespace,
            "name": f"worker-{ip}",
            "labels": {labels.MODEL: model, labels.POOL: "online"},
        },
        "spec": {"containers": containers},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def build(
    adapters: list[dict[str, Any]],
    models: list[dict[str, Any]] | None = None,
    pods: list[dict[str, Any]] | None = None,
) -> catalog.Catalog:
    return catalog.from_objects(
        pools=[obj({}, "online")],
        models=[deployment(lora={"maxLoras": 2})] if models is None else models,
        tenants=[],
        secrets=[],
        pods=pods or [],
        adapters=adapters,
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(VERIFIED, Offer.OFFERED, id="verified for this generation and digest"),
        pytest.param({}, Offer.PENDING, id="no verdict yet"),
        pytest.param({**VERIFIED, "observedGeneration": 0}, Offer.PENDING, id="stale generation"),
        pytest.param({**VERIFIED, "digest": OTHER}, Offer.PENDING, id="verdict on another digest"),
        pytest.param(
            {**VERIFIED, "verified": False, "reason": "SignatureInvalid"},
            Offer.REFUSED,
            id="refused",
        ),
        pytest.param({"kopf": {"x": 1}}, Offer.PENDING, id="only kopf's keys"),
    ],
)
def test_the_offer_follows_the_status(status: dict[str, Any], expected: Offer) -> None:
    found = build([adapter(status=status)]).adapter("acme-support", "team-a")
    assert found is not None and found.offer is expected


@pytest.mark.parametrize(
    ("lora", "policy", "slots", "spill", "timeout"),
    [
        pytest.param({"maxLoras": 2}, None, 2, 8, 30.0, id="max_loras, default knobs"),
        pytest.param({"maxLoras": 2, "maxCpuLoras": 6}, None, 6, 8, 30.0, id="max_cpu_loras wins"),
        pytest.param(
            {"maxLoras": 4},
            {"spillAbove": 3, "loadTimeoutSeconds": 5},
            4,
            3,
            5.0,
            id="spec.adapters knobs",
        ),
    ],
)
def test_slots_and_knobs_come_from_the_base(
    lora: dict[str, Any], policy: dict[str, Any] | None, slots: int, spill: int, timeout: float
) -> None:
    found = build([adapter()], models=[deployment(lora=lora, adapters=policy)]).adapter(
        "acme-support", "team-a"
    )
    assert found is not None
    assert (found.slots, found.policy.spill_above, found.load_timeout_seconds) == (
        slots,
        spill,
        timeout,
    )
    assert (found.base_model, found.artifact.digest, found.tenants) == (
        "llama",
        DIGEST,
        frozenset({"acme"}),
    )


@pytest.mark.parametrize(
    "models",
    [
        pytest.param([deployment()], id="base without lora"),
        pytest.param([], id="no base"),
        pytest.param([deployment(lora={"maxLoras": 2}, namespace="team-b")], id="base elsewhere"),
    ],
)
def test_an_adapter_without_a_lora_base_is_left_out(models: list[dict[str, Any]]) -> None:
    assert build([adapter()], models=models).adapter("acme-support", "team-a") is None


def test_a_models_name_wins_over_an_adapters() -> None:
    cat = build([adapter("llama")])
    assert cat.adapter("llama", "team-a") is None
    assert cat.shadowed == {"team-a/llama"}


def test_only_the_bases_pods_with_a_loader_carry_an_offered_adapter() -> None:
    cat = build(
        [adapter(), adapter("pending-one", status={})],
        pods=[
            pod("10.0.0.1"),
            pod("10.0.0.2", loader=False),
            pod("10.0.0.3", model="other"),
            pod("10.0.0.4", namespace="team-b"),
        ],
    )
    group = cat.endpoints.group("acme-support", pool="team-a/online")
    assert [e.url for e in group.endpoints] == ["http://10.0.0.1:8000"]
    assert not cat.endpoints.group("pending-one").endpoints
    loader = cat.loaders["http://10.0.0.1:8000"]
    assert (loader.url, loader.pod) == ("http://10.0.0.1:8002", "worker-10.0.0.1")
    assert "http://10.0.0.2:8000" not in cat.loaders


def tenant(key: str, allowed: tuple[str, ...] = ("*",)) -> catalog.Tenant:
    return catalog.Tenant(
        key=key, allowed_models=frozenset(allowed), priority_class="", limits=quotas.Limits()
    )


@pytest.mark.parametrize(
    ("who", "status", "reason", "retry"),
    [
        pytest.param(tenant("team-a/acme", ()), VERIFIED, None, None, id="named: served"),
        pytest.param(tenant("team-a/other"), VERIFIED, Reason.MODEL_NOT_ALLOWED, None, id="*"),
        pytest.param(
            tenant("team-b/acme"), VERIFIED, Reason.MODEL_NOT_ALLOWED, None, id="other namespace"
        ),
        pytest.param(tenant("team-a/acme"), {}, Reason.ADAPTER_PENDING, 10.0, id="pending"),
        pytest.param(
            tenant("team-a/acme"),
            {**VERIFIED, "verified": False, "reason": "DigestMismatch"},
            Reason.ADAPTER_REFUSED,
            None,
            id="refused",
        ),
    ],
)
def test_resolve(
    who: catalog.Tenant, status: dict[str, Any], reason: Reason | None, retry: float | None
) -> None:
    cat = build([adapter(status=status)], pods=[pod("10.0.0.1")])
    got = targets.resolve(cat, who, "acme-support")
    if reason is None:
        assert isinstance(got, catalog.Model)
        assert (got.name, got.names, got.pools, got.fallback) == (
            "acme-support",
            frozenset({"acme-support"}),
            ("team-a/online",),
            None,
        )
        assert got.adapter is not None and got.adapter.base_model == "llama"
        return
    assert isinstance(got, Rejected)
    assert (got.reason, got.retry_after) == (reason, retry)


STATIC: dict[str, Any] = {
    "models": [
        {
            "name": "base",
            "endpoints": ["http://127.0.0.1:9001", "http://127.0.0.1:9002"],
            "lora": {"maxLoras": 1, "maxCpuLoras": 2},
            "adapters": {"spillAbove": 2},
            "adapterLoaders": {"http://127.0.0.1:9001": "http://127.0.0.1:9101"},
        }
    ],
    "tenants": [
        {"name": "acme", "apiKeyHashes": ["sha256:" + "c" * 64], "allowedModels": ["base"]}
    ],
    "adapters": [
        {
            "base": "base",
            "servedName": "a1",
            "artifact": {"uri": "file:///a1", "digest": DIGEST},
            "tenants": ["acme"],
        },
        {
            "base": "base",
            "servedName": "a2",
            "artifact": {"uri": "file:///a2", "digest": DIGEST},
            "tenants": ["acme"],
            "verified": False,
        },
    ],
}


def test_static_mode_serves_adapters() -> None:
    cat = config.StaticConfig.model_validate(STATIC).catalog()
    a1, a2 = cat.adapter("a1"), cat.adapter("a2")
    assert a1 is not None and a2 is not None
    assert (a1.offer, a1.slots, a1.policy.spill_above, a2.offer) == (
        Offer.OFFERED,
        2,
        2,
        Offer.PENDING,
    )
    assert [e.url for e in cat.endpoints.group("a1").endpoints] == ["http://127.0.0.1:9001"]
    assert cat.loaders["http://127.0.0.1:9001"].url == "http://127.0.0.1:9101"
    assert isinstance(targets.resolve(cat, tenant("acme", ()), "a1"), catalog.Model)


def test_static_mode_refuses_an_adapter_on_a_model_without_lora() -> None:
    bad = {**STATIC, "models": [{**STATIC["models"][0], "lora": None}]}
    with pytest.raises(ValueError, match="no model with lora"):
        config.StaticConfig.model_validate(bad).catalog()


def test_the_documented_static_file_serves_its_adapter() -> None:
    """docs/gateway-static.yaml is executable documentation: its adapter is offered on both
    endpoints, to the tenant it names only."""
    path = Path(__file__).parents[3] / "docs" / "gateway-static.yaml"
    cat = config.StaticConfig.load(path).catalog()
    found = cat.adapter("search-rerank")
    assert found is not None and (found.slots, found.offer) == (16, Offer.OFFERED)
    assert len(cat.endpoints.group("search-rerank").endpoints) == 2
    search = tenant("search-team", ("llama-3.1-8b-instruct",))
    assert cat.adapters_for(search) == ["search-rerank"]


def test_rebuilds_wait_twice_as_long_as_the_last_one_took() -> None:
    from tokenfleet.gateway import discovery

    assert discovery.rebuild_delay(0.0) == discovery.REBUILD_DELAY_SECONDS
    assert discovery.rebuild_delay(0.1) == 0.2  # a third of the CPU at most goes to rebuilds


def test_a_rebuild_derives_again_only_what_changed() -> None:
    """Entries are kept by uid and resourceVersion (thousands of adapters, few changed per
    event); a new version, a changed verdict or a changed base derives the entry again."""

    def versioned(version: str, **kw: Any) -> dict[str, Any]:
        found = adapter(**kw)
        found["metadata"]["resourceVersion"] = version
        return found

    first = build([versioned("1")]).adapters[("team-a", "acme-support")]
    again = build([versioned("1")]).adapters[("team-a", "acme-support")]
    assert again is first  # the same entry, not derived again
    refused = {**VERIFIED, "verified": False, "reason": "DigestMismatch"}
    changed = build([versioned("2", status=refused)]).adapters[("team-a", "acme-support")]
    assert changed.offer is Offer.REFUSED
    wider = build([versioned("2", status=refused)], models=[deployment(lora={"maxLoras": 6})])
    assert wider.adapters[("team-a", "acme-support")].slots == 6  # the base changed
    assert build([], models=[deployment(lora={"maxLoras": 2})]).adapters == {}
    assert "team-a-acme-support" not in catalog._ADAPTER_MEMO  # a deleted adapter is forgotten
