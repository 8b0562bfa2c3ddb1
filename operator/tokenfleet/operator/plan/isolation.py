"""What confines a worker pod: its security context, its pool's NetworkPolicy, and the engine
key it serves behind (pure: settings in, manifests out).

A worker runs a ModelDeployment author's engine on tenants' prompts. Nothing in the cluster
but the gateway may call it (docs/security.md):

- **NetworkPolicy per pool** admits the gateway's pods to the engine (8000) and the adapter
  sidecar (8002), and the scrapers' namespaces to the engine port only (Prometheus reads
  ``/metrics`` there; vLLM's ``/v1`` routes need the key below). The kubelet's probes come from
  the node, which NetworkPolicy implementations admit; the readiness probe and the preStop drain
  run inside the pod. A cluster without an enforcing CNI ignores the object: it is rendered and
  tested, and the engine key is what still holds there.
- **The engine key**: vLLM's ``--api-key``, read from ``VLLM_API_KEY``, which comes from a
  Secret the operator applies per pool (``<pool>-engine-key``, owned by the pool). It holds
  the pool's *namespace's* key, derived from the installation's (the chart's Secret) by
  HMAC-SHA256 (tokenfleet.api.engine_key): a namespace admin who reads it can call only their
  own namespace's engines. The gateway holds the installation's key and sends each endpoint
  its namespace's as ``Authorization: Bearer``; the adapter sidecar requires it too, and sends
  it to the engine's runtime LoRA API.
- **Security context**: not root, no capabilities, no privilege escalation, the runtime's
  default seccomp profile, and no service-account token (a worker never calls the API server).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from tokenfleet.api import labels

Manifest = dict[str, Any]

#: The environment variable vLLM reads its ``--api-key`` from (and the sidecar and probe too):
#: an env value from a Secret, never an argument (arguments show in ``ps`` and in the spec).
KEY_ENV = "VLLM_API_KEY"
#: The key inside the per-pool Secret.
KEY_FIELD = "key"
#: The worker images' unprivileged user (worker-image/Dockerfile, images/worker-*/Dockerfile).
WORKER_UID = 65532


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Peers:
    """Who may open a connection to a worker, as NetworkPolicy peers."""

    gateway_namespace: str
    """The namespace the gateway runs in (the chart's release namespace)."""
    gateway_pods: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"app.kubernetes.io/name": "tokenfleet-gateway"}
    )
    """Labels that select the gateway's pods there (the chart's selector labels)."""
    scraper_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may read the engine port's ``/metrics`` (Prometheus)."""


def key_secret_name(pool_name: str) -> str:
    return f"{pool_name}-engine-key"[:253]


def key_env(pool_name: str) -> dict[str, Any]:
    """The engine key as an environment variable from the pool's Secret."""
    ref = {"name": key_secret_name(pool_name), "key": KEY_FIELD}
    return {"name": KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


def key_secret(*, metadata: Mapping[str, Any], pool_name: str, key: str) -> Manifest:
    """The pool's engine key, its namespace's (its workers mount it by env)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**metadata, "name": key_secret_name(pool_name)},
        "type": "Opaque",
        "data": {KEY_FIELD: base64.b64encode(key.encode()).decode()},
    }


def container_security() -> dict[str, Any]:
    """Every worker container's: nothing it does needs root or a capability."""
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    """The worker pod's: its image's unprivileged user, which owns the emptyDir volumes."""
    return {
        "runAsNonRoot": True,
        "runAsUser": WORKER_UID,
        "runAsGroup": WORKER_UID,
        "fsGroup": WORKER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def network_policy(
    *,
    metadata: Mapping[str, Any],
    workers: Mapping[str, str],
    peers: Peers,
    engine_port: int,
    sidecar_port: int,
) -> Manifest:
    """Ingress to a pool's workers: the gateway to both ports, scrapers to the engine's."""
    gateway = {
        "namespaceSelector": {
            "matchLabels": {labels.NAMESPACE_NAME: peers.gateway_namespace},
        },
        "podSelector": {"matchLabels": dict(peers.gateway_pods)},
    }
    ingress: list[dict[str, Any]] = [
        {
            "from": [gateway],
            "ports": [
                {"protocol": "TCP", "port": engine_port},
                {"protocol": "TCP", "port": sidecar_port},
            ],
        }
    ]
    if peers.scraper_namespaces:
        scrapers = [
            {"namespaceSelector": {"matchLabels": {labels.NAMESPACE_NAME: ns}}}
            for ns in peers.scraper_namespaces
        ]
        ingress.append({"from": scrapers, "ports": [{"protocol": "TCP", "port": engine_port}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": dict(metadata),
        "spec": {
            "podSelector": {"matchLabels": dict(workers)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
