"""What the node agent verifies for a worker pod: every one that declares an artifact (no
opt-in), the artifact from the engine container's environment, the public key from the Secret
volume a kubelet would mount (with and without items), Sigstore identities, pods that mount
nothing, and pods that declare no artifact."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.devstack import simulated
from tokenfleet.devstack.simulated import ArtifactCheck

ENV = [
    {"name": "TOKENFLEET_ARTIFACT_URI", "value": "file:///m/tiny"},
    {"name": "TOKENFLEET_ARTIFACT_DIGEST", "value": "sha256:" + "a" * 64},
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
]
KEY_ENV = [*ENV, {"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": "/etc/tokenfleet/trust/pub.pem"}]
MOUNT = [{"name": "artifact-trust", "mountPath": "/etc/tokenfleet/trust", "readOnly": True}]
WITH_ITEMS = [
    {
        "name": "artifact-trust",
        "secret": {"secretName": "signing", "items": [{"key": "public.pem", "path": "pub.pem"}]},
    }
]
WITHOUT_ITEMS = [{"name": "artifact-trust", "secret": {"secretName": "signing"}}]


def pod(
    *, env: list[dict[str, Any]], mounts: Any = (), volumes: Any = (), opt_in: bool = True
) -> dict[str, Any]:
    annotations = {labels.SIM_VERIFY_ARTIFACT: "true"} if opt_in else {}
    return {
        "metadata": {"annotations": annotations, "labels": {labels.ROLE: labels.ROLE_WORKER}},
        "spec": {
            "containers": [{"name": "vllm", "env": env, "volumeMounts": list(mounts)}],
            "volumes": list(volumes),
        },
    }


BASE = ArtifactCheck(uri="file:///m/tiny", digest="sha256:" + "a" * 64)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            pod(env=KEY_ENV, mounts=MOUNT, volumes=WITH_ITEMS, opt_in=False),
            ArtifactCheck(
                uri=BASE.uri, digest=BASE.digest, secret="signing", secret_key="public.pem"
            ),
            id="declares-an-artifact-so-verified-without-opt-in",
        ),
        pytest.param(pod(env=[], opt_in=False), None, id="declares-no-artifact"),
        pytest.param(
            pod(env=[], opt_in=True), ArtifactCheck(uri="", digest=""), id="opted-in-without-one"
        ),
        pytest.param(
            {**pod(env=KEY_ENV, opt_in=False), "metadata": {"labels": {}}}, None, id="not-a-worker"
        ),
        pytest.param(
            pod(env=KEY_ENV, mounts=MOUNT, volumes=WITH_ITEMS),
            ArtifactCheck(
                uri=BASE.uri, digest=BASE.digest, secret="signing", secret_key="public.pem"
            ),
            id="secret-with-items",
        ),
        pytest.param(
            pod(
                env=[
                    *ENV,
                    {
                        "name": "TOKENFLEET_TRUST_PUBLIC_KEY",
                        "value": "/etc/tokenfleet/trust/public.pem",
                    },
                ],
                mounts=MOUNT,
                volumes=WITHOUT_ITEMS,
            ),
            ArtifactCheck(
                uri=BASE.uri, digest=BASE.digest, secret="signing", secret_key="public.pem"
            ),
            id="secret-without-items",
        ),
        pytest.param(pod(env=KEY_ENV), BASE, id="key-path-but-nothing-mounted"),
        pytest.param(
            pod(
                env=[
                    *ENV,
                    {"name": "TOKENFLEET_TRUST_IDENTITY", "value": "me@example.com"},
                    {"name": "TOKENFLEET_TRUST_ISSUER", "value": "https://issuer"},
                    {"name": "TOKENFLEET_SIGNATURE_URI", "value": "file:///s/tiny.sig"},
                ]
            ),
            ArtifactCheck(
                uri=BASE.uri,
                digest=BASE.digest,
                signature_uri="file:///s/tiny.sig",
                identity="me@example.com",
                issuer="https://issuer",
            ),
            id="sigstore",
        ),
    ],
)
def test_artifact_check(obj: dict[str, Any], expected: ArtifactCheck | None) -> None:
    assert simulated.artifact_check(obj) == expected
