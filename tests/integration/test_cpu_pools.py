"""CPU pools through the operator on the real control plane (simulated nodes, no real kubelet).

A CPU pool's workers are rendered for vLLM's CPU build — CPU image, KV cache from the memory
request, thread binding, shutdown wait, no GPU — and serve; the ModelDeployment says what it runs
on. A GPU image pointed at the CPU pool is held (the running revision keeps serving, no new
worker Deployment), explained on both objects with one Warning Event, and released by the fix.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from support import artifact
from support.cluster import Cluster, wait_for
from support.objects import manifest
from tokenfleet.api import labels
from tokenfleet.api.deployment import CPU_IMAGE, GPU_IMAGE

GIB = 2**30


@pytest.fixture(autouse=True)
def trusted_key(cluster: Cluster, ns: str) -> None:
    cluster.apply(artifact.trust_secret(ns))


def cpu_pool(ns: str) -> dict[str, Any]:
    spec = {
        "accelerator": {"kind": "CPU", "cpu": "2", "memory": "6Gi"},
        "zones": {"names": ["zone-a"]},
        "warm": {"perZone": 1},
        "replicas": {"min": 1, "max": 2},
        "drain": {"maxGenerationSeconds": 45},
    }
    return manifest("InferencePool", "cpu", ns, spec)


def tiny(ns: str, **engine: Any) -> dict[str, Any]:
    spec = {"model": {"name": "tiny"}, "pools": ["cpu"], "artifact": artifact.spec()}
    return manifest("ModelDeployment", "tiny", ns, {**spec, "engine": engine})


def cond(cluster: Cluster, kind: str, ns: str, name: str, kind_of: str) -> dict[str, Any]:
    found = cluster.get(kind, name, "-n", ns).get("status", {}).get("conditions", [])
    return next((c for c in found if c["type"] == kind_of), {})


def workers(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(cluster.get("deployments", "-n", ns, "-l", f"{labels.POOL}=cpu")["items"])


def test_a_cpu_pool_serves_and_a_gpu_image_is_held_then_released(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(cpu_pool(ns), tiny(ns))
    [deployment] = wait_for("one CPU worker Deployment", lambda: workers(cluster, ns) or None)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args, env = container["args"], {e["name"]: e["value"] for e in container["env"]}
    assert container["image"] == CPU_IMAGE
    assert "--gpu-memory-utilization" not in args
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(2 * GIB)  # 6Gi − 4 GiB
    assert args[args.index("--shutdown-timeout") + 1] == "45"
    assert (env["TOKENFLEET_POOL_DEVICE"], env["OMP_NUM_THREADS"]) == ("cpu", "1")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "6Gi"},
        "limits": {"memory": "6Gi"},
    }
    wait_for(
        "the CPU worker Ready (simulated engine)",
        lambda: (
            cluster.get("tfmodel", "tiny", "-n", ns).get("status", {}).get("phase") == "Available"
        ),
        timeout=90,
    )
    fits = cond(cluster, "tfmodel", ns, "tiny", "Compatible")
    assert (fits["status"], fits["reason"]) == ("True", "PoolsFit")
    assert "KV cache 2 GiB" in fits["message"] and CPU_IMAGE in fits["message"]

    cluster.apply(tiny(ns, image=GPU_IMAGE))  # the GPU image on a CPU pool
    misfit = wait_for(
        "ImageDeviceMismatch",
        lambda: (
            (c := cond(cluster, "tfmodel", ns, "tiny", "Compatible")).get("reason")
            == "ImageDeviceMismatch"
            and c
        ),
    )
    assert "remove engine.image" in misfit["message"]
    ready = wait_for(
        "the pool says why it holds",
        lambda: (
            (c := cond(cluster, "tfpool", ns, "cpu", "Ready")).get("reason")
            == "ImageDeviceMismatch"
            and c
        ),
    )
    assert ready["status"] == "False"
    time.sleep(3)  # a few passes: still held, told once
    assert [d["metadata"]["name"] for d in workers(cluster, ns)] == [deployment["metadata"]["name"]]
    warned = [
        e
        for e in cluster.get("events", "-n", ns)["items"]
        if e["involvedObject"]["name"] == "tiny" and e["reason"] == "ImageDeviceMismatch"
    ]
    assert len(warned) == 1 and warned[0]["type"] == "Warning" and warned[0]["count"] == 1
    assert cluster.get("tfmodel", "tiny", "-n", ns)["status"]["phase"] == "Available"

    cluster.apply(tiny(ns))  # the fix: the pool's default image again
    wait_for(
        "Compatible again",
        lambda: cond(cluster, "tfmodel", ns, "tiny", "Compatible").get("status") == "True",
    )
