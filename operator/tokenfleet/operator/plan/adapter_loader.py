"""The adapter-loader sidecar of workers that serve ModelAdapters (docs/adapters.md).

Pure: a ModelDeployment spec in, container and volume manifests out. The sidecar is the worker
image's ``tokenfleet.worker.adapters``: it verifies an adapter's files next to the engine and
only then registers them through vLLM's runtime LoRA API, so its trust is mounted here, from
the deployment (``spec.adapters.trust``, else the model artifact's own), never taken from a
request.
"""

from __future__ import annotations

from typing import Any

from tokenfleet.api.deployment import ModelDeploymentSpec, TrustPolicy

CONTAINER = "adapter-loader"
PORT = 8002
PORT_NAME = "adapters"
ADAPTER_DIR = "/models/adapters"
TRUST_DIR = "/etc/tokenfleet/adapter-trust"
TRUST_VOLUME = "adapter-trust"
#: vLLM refuses /v1/load_lora_adapter unless this is set (its runtime adapter API).
RUNTIME_LORA_ENV = {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}


def serves_adapters(spec: ModelDeploymentSpec) -> bool:
    return spec.adapters is not None and spec.engine.lora is not None


def adapter_trust(spec: ModelDeploymentSpec) -> TrustPolicy:
    """Who may sign this deployment's adapters: its own adapter trust, else the model's."""
    if spec.adapters is not None and spec.adapters.trust is not None:
        return spec.adapters.trust
    return spec.artifact.trust


def _trust_env(trust: TrustPolicy) -> list[dict[str, str]]:
    if trust.public_key is not None:
        path = f"{TRUST_DIR}/{trust.public_key.key}"
        return [{"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": path}]
    assert trust.sigstore is not None  # the CRD requires exactly one method
    return [
        {"name": "TOKENFLEET_TRUST_IDENTITY", "value": trust.sigstore.identity},
        {"name": "TOKENFLEET_TRUST_ISSUER", "value": trust.sigstore.issuer},
    ]


def container(spec: ModelDeploymentSpec, *, image: str, engine_port: int) -> dict[str, Any]:
    """The sidecar: ``image`` is the engine's (it holds the worker package), the shared model
    volume, the adapter trust."""
    trust = adapter_trust(spec)
    mounts: list[dict[str, Any]] = [{"name": "models", "mountPath": "/models"}]
    if trust.public_key is not None:
        mounts.append({"name": TRUST_VOLUME, "mountPath": TRUST_DIR, "readOnly": True})
    return {
        "name": CONTAINER,
        "image": image,
        "command": ["python3", "-m", "tokenfleet.worker.adapters"],
        "ports": [{"name": PORT_NAME, "containerPort": PORT}],
        "env": [
            {"name": "TOKENFLEET_ADAPTER_PORT", "value": str(PORT)},
            {"name": "TOKENFLEET_ENGINE_URL", "value": f"http://127.0.0.1:{engine_port}"},
            {"name": "TOKENFLEET_ADAPTER_DIR", "value": ADAPTER_DIR},
            *_trust_env(trust),
        ],
        # Adapters are tens of MB: hashing them needs a little CPU, not the GPU node's share.
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT}, "periodSeconds": 5},
        "volumeMounts": mounts,
    }


def volumes(spec: ModelDeploymentSpec) -> list[dict[str, Any]]:
    """The adapter trust's public-key Secret (none for a Sigstore identity)."""
    key = adapter_trust(spec).public_key
    if key is None:
        return []
    return [
        {
            "name": TRUST_VOLUME,
            "secret": {"secretName": key.name, "items": [{"key": key.key, "path": key.key}]},
        }
    ]
