"""Simulated GPU nodes behave like real ones to a Kubernetes user and to an OpenAI client.

A GPU Deployment with a zone topology spread lands one pod per zone on the kwok nodes, Running
with loopback pod IPs and Ready only once its simulated vLLM answers; the real `openai` SDK
talks to those pod IPs; vLLM metrics are served; simulators stop with their pod or their node.
"""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from typing import Any

import openai
import pytest
import yaml

from support.cluster import Cluster, process_pids, wait_for
from tokenfleet.api import labels


def worker_deployment(name: str, model: str, replicas: int = 3, **pod_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, labels.ROLE: labels.ROLE_WORKER}},
                "spec": {
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": labels.TOPOLOGY_ZONE,
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": name}},
                        }
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.0",
                            "args": ["serve", f"/models/{model}", "--served-model-name", model],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {"limits": {labels.GPU_RESOURCE: "1"}},
                        }
                    ],
                    **pod_spec,
                },
            },
        },
    }


def ready_pods(cluster: Cluster, ns: str, app: str, count: int) -> list[dict[str, Any]] | None:
    pods = cluster.get("pods", "-n", ns, "-l", f"app={app}")["items"]
    ready = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    ]
    return ready if len(ready) == count else None


def refuses(ip: str, port: int = 8000) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((ip, port)) != 0


def zone_of(cluster: Cluster, node: str) -> str:
    return str(cluster.get("node", node)["metadata"]["labels"][labels.TOPOLOGY_ZONE])


@pytest.fixture
def model() -> str:
    return f"sim-{uuid.uuid4().hex[:8]}"


def test_gpu_deployment_spreads_one_pod_per_zone_and_serves_openai(
    cluster: Cluster, ns: str, model: str
) -> None:
    cluster.kubectl(
        "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(worker_deployment("spread", model))
    )
    pods = wait_for("3 Ready worker pods", lambda: ready_pods(cluster, ns, "spread", 3))

    assert sorted(zone_of(cluster, p["spec"]["nodeName"]) for p in pods) == [
        "zone-a",
        "zone-b",
        "zone-c",
    ]
    for p in pods:
        assert p["status"]["phase"] == "Running"
        assert p["status"]["podIP"].startswith(cluster.pod_prefix), p["status"]["podIP"]
        assert p["spec"]["containers"][0]["resources"]["limits"][labels.GPU_RESOURCE] == "1"

    ip = pods[0]["status"]["podIP"]
    client = openai.OpenAI(base_url=f"http://{ip}:8000/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens >= 1

    chunks = list(
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) >= 2 and text

    assert [m.id for m in client.models.list().data] == [model]

    metrics = urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=5).read().decode()
    assert f'vllm:num_requests_running{{model_name="{model}"}}' in metrics
    assert "vllm:kv_cache_usage_perc" in metrics


async def test_async_client_streams_from_a_pod(cluster: Cluster, ns: str, model: str) -> None:
    cluster.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin=yaml.safe_dump(worker_deployment("one", model, replicas=1)),
    )
    pods = wait_for("a Ready worker pod", lambda: ready_pods(cluster, ns, "one", 1))
    client = openai.AsyncOpenAI(
        base_url=f"http://{pods[0]['status']['podIP']}:8000/v1", api_key="x"
    )
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True
    )
    deltas = [c.choices[0].delta.content async for c in stream if c.choices]
    assert "".join(d or "" for d in deltas)
    await client.close()


def test_deleting_the_deployment_stops_its_simulators(
    cluster: Cluster, ns: str, model: str
) -> None:
    cluster.kubectl(
        "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(worker_deployment("gone", model))
    )
    pods = wait_for("3 Ready worker pods", lambda: ready_pods(cluster, ns, "gone", 3))
    assert len(process_pids(f"--model /models/{model}")) == 3
    cluster.kubectl("delete", "deployment", "gone", "-n", ns)
    wait_for("simulators to stop", lambda: not process_pids(f"--model /models/{model}"), timeout=30)
    for p in pods:
        assert wait_for(
            f"{p['status']['podIP']}:8000 to refuse", lambda ip=p["status"]["podIP"]: refuses(ip)
        )


def test_losing_a_node_takes_its_simulator_down(cluster: Cluster, ns: str, model: str) -> None:
    """A node of the test's own (tainted so only this test's pod lands there) is deleted."""
    node = f"gpu-test-{ns[-5:]}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {
                    labels.HOSTNAME: node,
                    labels.TOPOLOGY_ZONE: "zone-c",
                    labels.SIMULATED_NODE: "true",
                },
            },
            "spec": {
                "podCIDR": f"{cluster.pod_prefix}250.0/24",
                "taints": [{"key": "test", "value": ns, "effect": "NoSchedule"}],
            },
        }
    )
    capacity = {"cpu": "8", "memory": "64Gi", labels.GPU_RESOURCE: "1", "pods": "10"}
    cluster.kubectl(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"capacity": capacity, "allocatable": capacity}}),
    )
    try:
        deployment = worker_deployment(
            "pinned",
            model,
            replicas=1,
            nodeSelector={labels.HOSTNAME: node},
            tolerations=[{"key": "test", "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
        )
        deployment["spec"]["template"]["spec"].pop("topologySpreadConstraints")
        cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(deployment))
        pods = wait_for("the pinned pod Ready", lambda: ready_pods(cluster, ns, "pinned", 1))
        ip = pods[0]["status"]["podIP"]
        assert ip.startswith(f"{cluster.pod_prefix}250.")
        assert not refuses(ip)
        cluster.kubectl("delete", "node", node)
        wait_for(
            "the simulator to stop",
            lambda: not process_pids(f"--model /models/{model}"),
            timeout=30,
        )
        assert refuses(ip)
    finally:
        cluster.kubectl("delete", "node", node, "--ignore-not-found")
