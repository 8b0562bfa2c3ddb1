"""The local platform runs a worker pod's adapter-loader sidecar as a kubelet would: a worker pod
with the operator's ``adapter-loader`` container (its trust Secret mounted by name) gets a
sidecar answering on podIP:8002 that loads a signed adapter into that pod's own simulator
(listed by it and served under its name), refuses one signed by a key outside that Secret, is
restarted when it dies (and then replaces what the engine kept), and goes away with the pod."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from pathlib import Path
from typing import Any

from test_node_agent_verification import apply, is_ready, remove

from support import adapters, artifact
from support.cluster import Cluster, process_pids, wait_for
from tokenfleet.api import labels

TRUST_DIR = "/etc/tokenfleet/adapter-trust"


def adapter_trust(name: str, public: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"adapters.pem": public.read_text()},
    }


def worker_with_loader(name: str, *, served: str, trust_secret: str) -> dict[str, Any]:
    """A Deployment whose pods are shaped as the operator renders an adapter-serving worker."""
    engine = {
        "name": "vllm",
        "image": "ghcr.io/tokenfleet/worker:vllm-v0.33.0",
        "args": [
            "/models/artifact",
            "--served-model-name",
            served,
            "--enable-lora",
            "--max-loras",
            "2",
            "--max-lora-rank",
            "16",
        ],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {labels.GPU_RESOURCE: "1"}},
        "env": [
            {"name": "TOKENFLEET_ARTIFACT_URI", "value": artifact.MODEL_DIR.as_uri()},
            {"name": "TOKENFLEET_ARTIFACT_DIGEST", "value": artifact.DIGEST},
            {"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": "/etc/tokenfleet/trust/public.pem"},
            {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"},
        ],
        "volumeMounts": [
            {"name": "trust", "mountPath": "/etc/tokenfleet/trust"},
            {"name": "models", "mountPath": "/models"},
        ],
    }
    loader = {
        "name": "adapter-loader",
        "image": "ghcr.io/tokenfleet/worker:vllm-v0.33.0",
        "command": ["python3", "-m", "tokenfleet.worker.adapters"],
        "ports": [{"name": "adapters", "containerPort": 8002}],
        "env": [
            {"name": "TOKENFLEET_ADAPTER_PORT", "value": "8002"},
            {"name": "TOKENFLEET_ENGINE_URL", "value": "http://127.0.0.1:8000"},
            {"name": "TOKENFLEET_ADAPTER_DIR", "value": "/models/adapters"},
            {"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": f"{TRUST_DIR}/adapters.pem"},
        ],
        "volumeMounts": [
            {"name": "models", "mountPath": "/models"},
            {"name": "adapter-trust", "mountPath": TRUST_DIR, "readOnly": True},
        ],
    }
    volumes = [
        {"name": "trust", "secret": {"secretName": artifact.SECRET}},
        {"name": "models", "emptyDir": {}},
        {"name": "adapter-trust", "secret": {"secretName": trust_secret,
                                             "items": [{"key": "adapters.pem",
                                                        "path": "adapters.pem"}]}},
    ]  # fmt: skip
    pod_labels = {"app": name, labels.ROLE: labels.ROLE_WORKER}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [engine, loader], "volumes": volumes},
            },
        },
    }


def ready_pod(cluster: Cluster, ns: str, app: str) -> dict[str, Any] | None:
    for pod in cluster.get("pods", "-n", ns, "-l", f"app={app}")["items"]:
        if not pod["metadata"].get("deletionTimestamp") and is_ready(pod):
            return pod
    return None


def sidecar_pid(ip: str) -> int | None:
    """The adapter-loader process bound to ``ip`` (its environment names the address)."""
    for pid in process_pids("tokenfleet.worker.adapters"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"TOKENFLEET_ADAPTER_ADDRESS={ip}".encode() in environ:
            return pid
    return None


def answers(address: str) -> bool:
    try:
        return adapters.call(f"http://{address}/healthz") == (200, "ok")
    except OSError:
        return False


def test_a_worker_pods_sidecar_loads_a_signed_adapter_into_its_engine(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    private, public = adapters.key_pair(tmp_path / "keys")
    other_private, _ = adapters.key_pair(tmp_path / "other-keys")
    good = adapters.signed_adapter(tmp_path, "acme", private_key=private)
    foreign = adapters.signed_adapter(tmp_path, "mallory", private_key=other_private)
    served = f"base-{uuid.uuid4().hex[:6]}"
    apply(
        cluster,
        ns,
        artifact.trust_secret(ns),
        adapter_trust("acme-adapters", public),
        worker_with_loader("lora", served=served, trust_secret="acme-adapters"),
    )
    pod = wait_for("the worker to be Ready", lambda: ready_pod(cluster, ns, "lora"), timeout=120)
    ip = pod["status"]["podIP"]
    wait_for("the sidecar on podIP:8002", lambda: answers(f"{ip}:8002"), timeout=60)
    engine = f"http://{ip}:8000"
    sidecar = f"http://{ip}:8002"

    body = {"name": "acme-support", "uri": good.uri, "digest": good.digest}
    status, answer = adapters.call(f"{sidecar}/v1/adapters/load", body)
    assert status == 200, answer
    assert answer["verdict"]["reason"] == "Verified"
    assert {served, "acme-support"} <= adapters.engine_models(engine)
    assert adapters.chat_status(engine, "acme-support") == 200

    body = {"name": "mallory", "uri": foreign.uri, "digest": foreign.digest}
    status, answer = adapters.call(f"{sidecar}/v1/adapters/load", body)
    assert status == 422, answer
    assert answer["verdict"]["reason"] in {"UntrustedSigner", "SignatureInvalid"}
    assert "mallory" not in adapters.engine_models(engine)

    pid = sidecar_pid(ip)
    os.kill(pid, signal.SIGKILL)  # a crashed sidecar is restarted, as a kubelet would
    wait_for("a new sidecar", lambda: sidecar_pid(ip) not in (None, pid), timeout=30)
    wait_for("the new sidecar to answer", lambda: answers(f"{ip}:8002"), timeout=30)
    assert adapters.call(f"{sidecar}/v1/adapters") == (200, {"adapters": []})
    body = {"name": "acme-support", "uri": good.uri, "digest": good.digest}
    status, answer = adapters.call(f"{sidecar}/v1/adapters/load", body)  # the engine kept it
    assert status == 200, answer
    assert adapters.chat_status(engine, "acme-support") == 200

    remove(cluster, ns, "lora")
    with socket.socket() as probe:  # the sidecar went with the pod
        probe.settimeout(1)
        assert probe.connect_ex((ip, 8002)) != 0
