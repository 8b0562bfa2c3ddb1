"""ModelAdapters in the operator, from values: the workers of a deployment that serves adapters
get the adapter-loader sidecar with the deployment's adapter trust (and the engine vLLM's
runtime LoRA switch); other workers are unchanged; an adapter's status says whether it was
verified, whether its base can serve it, and where the gateways report it loaded."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.api import crd
from tokenfleet.api.adapter import ModelAdapterSpec, ModelAdapterStatus
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import adapter_loader, adapter_status, desired

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
POOL = InferencePoolSpec.model_validate(
    {"accelerator": {"product": "H100"}, "zones": {"names": ["zone-a"]}, "replicas": {"min": 1}}
)
DIGEST = "sha256:" + "a" * 64


def base(**extra: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "llama", "aliases": ["llama-latest"]},
            "pools": ["p"],
            "artifact": {
                "uri": "file:///m",
                "digest": "sha256:" + "c" * 64,
                "trust": {"publicKey": {"name": "model-key"}},
            },
            "engine": {"lora": {"maxLoras": 4, "maxCpuLoras": 8}},
            **extra,
        }
    )


def adapter(**extra: Any) -> ModelAdapterSpec:
    return ModelAdapterSpec.model_validate(
        {
            "base": "llama",
            "servedName": "acme-support",
            "artifact": {"uri": "file:///a", "digest": DIGEST},
            "tenants": ["acme"],
            **extra,
        }
    )


def pod_of(spec: ModelDeploymentSpec) -> dict[str, Any]:
    owner = desired.Owner(kind="InferencePool", name="p", uid="u")
    manifest = desired.worker_deployment(
        namespace="ns",
        pool_name="p",
        pool=POOL,
        model=spec,
        owner=owner,
        zone="zone-a",
        replicas=1,
    )
    return dict(manifest["spec"]["template"]["spec"])


def test_workers_that_serve_adapters_get_the_loader_with_the_adapter_trust() -> None:
    pod = pod_of(base(adapters={"trust": {"publicKey": {"name": "adapter-key", "key": "k.pem"}}}))
    engine, loader = pod["containers"]
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in engine["env"]
    assert "--enable-lora" in engine["args"] and "--max-cpu-loras" in engine["args"]
    assert loader["name"] == adapter_loader.CONTAINER
    assert loader["image"] == engine["image"]
    assert loader["command"] == ["python3", "-m", "tokenfleet.worker.adapters"]
    assert loader["ports"] == [{"name": "adapters", "containerPort": 8002}]
    env = {e["name"]: e["value"] for e in loader["env"]}
    assert env["TOKENFLEET_TRUST_PUBLIC_KEY"] == "/etc/tokenfleet/adapter-trust/k.pem"
    assert env["TOKENFLEET_ENGINE_URL"] == "http://127.0.0.1:8000"
    mounts = {m["name"]: m["mountPath"] for m in loader["volumeMounts"]}
    assert mounts == {"models": "/models", "adapter-trust": "/etc/tokenfleet/adapter-trust"}
    volume = next(v for v in pod["volumes"] if v["name"] == "adapter-trust")
    assert volume["secret"] == {
        "secretName": "adapter-key",
        "items": [{"key": "k.pem", "path": "k.pem"}],
    }


def test_adapter_trust_defaults_to_the_models_and_a_sigstore_identity_mounts_nothing() -> None:
    pod = pod_of(base(adapters={}))
    loader = pod["containers"][1]
    env = {e["name"]: e["value"] for e in loader["env"]}
    assert env["TOKENFLEET_TRUST_PUBLIC_KEY"] == "/etc/tokenfleet/adapter-trust/public.pem"
    assert (
        next(v for v in pod["volumes"] if v["name"] == "adapter-trust")["secret"]["secretName"]
        == "model-key"
    )
    identity = {"sigstore": {"identity": "ci@example.com", "issuer": "https://issuer"}}
    pod = pod_of(base(adapters={"trust": identity}))
    loader = pod["containers"][1]
    env = {e["name"]: e["value"] for e in loader["env"]}
    assert env["TOKENFLEET_TRUST_IDENTITY"] == "ci@example.com"
    assert "TOKENFLEET_TRUST_PUBLIC_KEY" not in env
    assert not any(v["name"] == "adapter-trust" for v in pod["volumes"])


def test_workers_without_adapters_are_unchanged() -> None:
    pod = pod_of(base())  # engine.lora alone: static LoRA flags, no runtime loading
    assert [c["name"] for c in pod["containers"]] == ["vllm"]
    assert not any(
        e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING" for e in pod["containers"][0]["env"]
    )


def test_adapters_need_engine_lora() -> None:
    with pytest.raises(ValueError, match=r"engine\.lora"):
        ModelDeploymentSpec.model_validate({**base().to_wire(), "engine": {}, "adapters": {}})


def deployments(**extra: Any) -> list[dict[str, Any]]:
    return [
        {"metadata": {"name": "llama"}, "spec": base(**extra).to_wire()},
        {"metadata": {"name": "other"}, "spec": {"model": {"name": "mistral"}}},
    ]


VERIFIED = adapter_status.Verdict(digest=DIGEST, reason="Verified", signer="key:sha256:ab")
TAMPERED = adapter_status.Verdict(
    digest=DIGEST, reason="DigestMismatch", message="Hash mismatch for 'adapter_model.safetensors'"
)


def plan(
    spec: ModelAdapterSpec | None = None,
    *,
    found: list[dict[str, Any]] | None = None,
    verdict: adapter_status.Verdict | None = VERIFIED,
    placement: adapter_status.Placement | None = None,
    old: ModelAdapterStatus | None = None,
) -> tuple[ModelAdapterStatus, list[Any]]:
    spec = spec or adapter()
    return adapter_status.plan(
        spec=spec,
        generation=3,
        old=old,
        base=adapter_status.base_of(
            spec.base, deployments(adapters={}) if found is None else found
        ),
        verdict=verdict,
        placement=placement,
        now=NOW,
    )


def cond(status: ModelAdapterStatus, kind: str) -> tuple[str, str]:
    c = next(c for c in status.conditions if c.type == kind)
    return c.status, c.reason


@pytest.mark.parametrize(
    ("case", "verified", "ready"),
    [
        ({}, ("True", "Verified"), ("True", "Verified")),
        ({"verdict": TAMPERED}, ("False", "DigestMismatch"), ("False", "DigestMismatch")),
        ({"verdict": None}, ("False", "Verifying"), ("False", "Verifying")),
        ({"found": [], "verdict": None}, ("False", "Verifying"), ("False", "BaseNotFound")),
        ({"found": deployments()}, ("True", "Verified"), ("False", "BaseServesNoAdapters")),
        (
            {"spec": adapter(servedName="llama-latest")},
            ("True", "Verified"),
            ("False", "NameConflict"),
        ),
        (  # a verdict about the previous digest says nothing about this one
            {"verdict": adapter_status.Verdict(digest="sha256:" + "b" * 64, reason="Verified")},
            ("False", "Verifying"),
            ("False", "Verifying"),
        ),
    ],
)
def test_conditions(
    case: dict[str, Any], verified: tuple[str, str], ready: tuple[str, str]
) -> None:
    status, _ = plan(**case)
    assert cond(status, "Verified") == verified
    assert cond(status, "Ready") == ready
    assert status.verified is (verified[0] == "True")
    assert status.observed_generation == 3


def test_a_refusal_is_a_warning_once_with_the_reason_and_a_fix_is_an_event() -> None:
    status, events = plan(verdict=TAMPERED)
    assert [(e.type, e.reason) for e in events] == [("Warning", "DigestMismatch")]
    assert "Hash mismatch" in events[0].message and status.reason == "DigestMismatch"
    again, events = plan(verdict=TAMPERED, old=status)
    assert events == [] and again == status
    fixed, events = plan(old=again)
    assert [(e.type, e.reason) for e in events] == [("Normal", "Verified")]
    assert fixed.signer == "key:sha256:ab"


def test_placement_from_the_gateways_and_kept_when_unreadable() -> None:
    placement = adapter_status.Placement(pods=("w-2", "w-1"), requests=41, active=("w-2",))
    status, _ = plan(placement=placement)
    assert (status.loaded_on, status.loaded_replicas, status.requests_served) == (
        ["w-1", "w-2"],
        2,
        41,
    )
    assert status.active_on == ["w-2"]
    kept, _ = plan(placement=None, old=status)
    assert (kept.loaded_on, kept.requests_served, kept.active_on) == (["w-1", "w-2"], 41, ["w-2"])
    gone, _ = plan(placement=adapter_status.Placement(), old=status)
    assert (gone.loaded_on, gone.loaded_replicas, gone.active_on) == ([], 0, [])


def test_the_status_has_the_shape_the_crd_stores() -> None:
    status, _ = plan(placement=adapter_status.Placement(pods=("w",), requests=1))
    kind = next(k for k in crd.KINDS if k.kind == "ModelAdapter")
    schema = crd.openapi_schema(kind)["properties"]["status"]["properties"]
    assert set(status.to_wire()) <= set(schema)


def test_traffic_figures_are_written_at_most_every_refresh_but_verdicts_at_once() -> None:
    first, _ = plan(placement=adapter_status.Placement(pods=("w-1",), requests=5))
    busier, _ = plan(placement=adapter_status.Placement(pods=("w-1", "w-2"), requests=9), old=first)
    held = adapter_status.throttled(busier, first, since_write=3.0)
    assert held == first  # nothing to write: only the traffic moved
    late = adapter_status.throttled(
        busier, first, since_write=adapter_status.TRAFFIC_REFRESH_SECONDS
    )
    assert (late.requests_served, late.loaded_on) == (9, ["w-1", "w-2"])
    refused, _ = plan(verdict=TAMPERED, old=first, placement=adapter_status.Placement(requests=9))
    kept = adapter_status.throttled(refused, first, since_write=1.0)
    assert kept.reason == "DigestMismatch" and kept.requests_served == 5
    assert adapter_status.throttled(busier, first, since_write=None) == busier
