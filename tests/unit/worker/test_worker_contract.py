"""The operator and the worker image agree: the environment, args and volumes desired.py puts
on a worker container are what tokenfleet.worker parses (public key and Sigstore trust)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.objects import BASE
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import desired
from tokenfleet.worker import entrypoint


def _container(model: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    manifest = desired.worker_deployment(
        namespace="demo",
        pool_name="chat",
        pool=InferencePoolSpec.model_validate(BASE["InferencePool"]),
        model=ModelDeploymentSpec.model_validate(model),
        owner=desired.Owner(kind="ModelDeployment", name="m", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    pod = manifest["spec"]["template"]["spec"]
    return pod["containers"][0], pod


def test_public_key_trust_reaches_the_worker_through_a_secret_volume() -> None:
    model = {**BASE["ModelDeployment"]}
    model["artifact"] = {
        **model["artifact"],
        "signatureUri": "file:///sigs/demo.sig",
        "trust": {"publicKey": {"name": "signing-key", "key": "cosign.pub"}},
    }
    container, pod = _container(model)
    env = {e["name"]: e["value"] for e in container["env"]}
    config = entrypoint.Config.from_env(env)
    assert config.uri == model["artifact"]["uri"]
    assert config.signature_uri == "file:///sigs/demo.sig"
    assert config.public_key == Path(desired.TRUST_DIR) / "cosign.pub"
    [volume] = [v for v in pod["volumes"] if v["name"] == desired.TRUST_VOLUME]
    assert volume["secret"] == {
        "secretName": "signing-key",
        "items": [{"key": "cosign.pub", "path": "cosign.pub"}],
    }
    mount = next(m for m in container["volumeMounts"] if m["name"] == desired.TRUST_VOLUME)
    assert mount == {"name": desired.TRUST_VOLUME, "mountPath": desired.TRUST_DIR, "readOnly": True}
    # The args start with the placeholder the entrypoint replaces by the verified directory.
    rendered = entrypoint.render(container["args"], placeholder=config.model_dir, served=Path("/v"))
    assert rendered[:3] == ["vllm", "serve", "/v"]


def test_sigstore_trust_needs_no_volume() -> None:
    model = {**BASE["ModelDeployment"]}
    identity = {"identity": "release@example.com", "issuer": "https://accounts.example.com"}
    model["artifact"] = {**model["artifact"], "trust": {"sigstore": identity}}
    container, pod = _container(model)
    config = entrypoint.Config.from_env({e["name"]: e["value"] for e in container["env"]})
    assert (config.identity, config.issuer, config.public_key) == (
        "release@example.com",
        "https://accounts.example.com",
        None,
    )
    assert all(v["name"] != desired.TRUST_VOLUME for v in pod["volumes"])


@pytest.mark.parametrize("field", ["terminationMessagePolicy"])
def test_refusals_surface_in_the_termination_message(field: str) -> None:
    container, _ = _container(BASE["ModelDeployment"])
    assert container[field] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("trust", "key_path", "identity"),
    [
        ({"publicKey": {"name": "adapter-key", "key": "a.pem"}}, "a.pem", ""),
        (None, "public.pem", ""),  # unset: the model artifact's own trust
        ({"sigstore": {"identity": "ci@example.com", "issuer": "https://i"}}, "", "ci@example.com"),
    ],
)
def test_the_adapter_loader_sidecar_parses_what_the_operator_renders(
    trust: dict[str, Any] | None, key_path: str, identity: str
) -> None:
    from tokenfleet.operator.plan import adapter_loader
    from tokenfleet.worker import adapter_plan

    model = {
        **BASE["ModelDeployment"],
        "engine": {"lora": {"maxLoras": 2}},
        "adapters": {"trust": trust} if trust else {},
    }
    engine, pod = _container(model)
    loader = next(c for c in pod["containers"] if c["name"] == adapter_loader.CONTAINER)
    settings = adapter_plan.Settings.from_env({e["name"]: e["value"] for e in loader["env"]})
    assert settings.port == loader["ports"][0]["containerPort"]
    assert settings.engine_url == f"http://127.0.0.1:{engine['ports'][0]['containerPort']}"
    assert str(settings.adapter_dir).startswith("/models/")  # the volume the engine reads too
    assert any(m["mountPath"] == "/models" for m in loader["volumeMounts"])
    assert any(m["mountPath"] == "/models" for m in engine["volumeMounts"])
    if key_path:
        assert settings.public_key == Path(adapter_loader.TRUST_DIR) / key_path
        mount = next(m for m in loader["volumeMounts"] if m["name"] == adapter_loader.TRUST_VOLUME)
        assert mount["mountPath"] == adapter_loader.TRUST_DIR and mount["readOnly"]
    else:
        assert (settings.public_key, settings.identity) == (None, identity)
