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
