"""Autoscaling on the real stack: simulated vLLM under load → Prometheus → the operator's
decision → more replicas; back down only after the window; Prometheus frozen → hold."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from typing import Any

import openai

from support.cluster import Cluster, wait_for
from support.objects import manifest
from tokenfleet.api import labels


def pool_status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("tfpool", "auto", "-n", ns).get("status", {}))


def deploy(cluster: Cluster, ns: str) -> None:
    cluster.apply(
        manifest(
            "InferencePool",
            "auto",
            ns,
            {
                "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
                "warm": {"perZone": 1},
                "replicas": {"min": 3, "max": 12},
                "autoscaling": {
                    "targetWaitingPerReplica": 1,
                    "scaleUpStabilizationSeconds": 0,
                    "scaleDownStabilizationSeconds": 6,
                    "maxScaleUpStep": 6,
                    "readinessDelaySeconds": 30,
                },
            },
        ),
        {
            **manifest(
                "ModelDeployment",
                "auto-model",
                ns,
                {
                    "model": {"name": "auto-model"},
                    "pools": ["auto"],
                    "engine": {"maxNumSeqs": 1},
                    "artifact": {
                        "uri": "file:///m",
                        "digest": "sha256:" + "a1" * 32,
                        "trust": {"publicKey": {"name": "k"}},
                    },
                },
            ),
            "metadata": {
                "name": "auto-model",
                "namespace": ns,
                "annotations": {labels.SIM_ARGS: "--inter-token-latency 60ms"},
            },
        },
    )


def load(cluster: Cluster, ns: str, streams: int) -> int:
    """Streams straight at the Ready pods; returns how many completed. A pod removed by a
    scale-down cuts its stream (there is no gateway in front to stop routing to it)."""
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=auto")["items"]
    ips = [
        p["status"]["podIP"]
        for p in pods
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    ]

    def one(i: int) -> bool:
        client = openai.OpenAI(
            base_url=f"http://{ips[i % len(ips)]}:8000/v1", api_key="x", max_retries=0, timeout=60
        )
        try:
            list(
                client.completions.create(
                    model="auto-model",
                    prompt="go",
                    max_tokens=60,
                    stream=True,
                    extra_body={"ignore_eos": True},
                )
            )
        except openai.APIConnectionError:
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        return sum(pool.map(one, range(streams)))


def test_waiting_requests_scale_up_then_down_after_the_window(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    deploy(cluster, ns)
    wait_for("3 ready", lambda: pool_status(cluster, ns).get("readyReplicas") == 3, timeout=60)
    with concurrent.futures.ThreadPoolExecutor(1) as background:
        started = time.monotonic()
        running = background.submit(load, cluster, ns, 15)
        grown = wait_for(
            "a scale-up",
            lambda: (s := pool_status(cluster, ns)).get("replicas", 0) > 3 and s,
            timeout=20,
            every=0.1,
        )
        reacted = time.monotonic() - started
        print(f"scale-up {reacted:.1f} s after the load began")
        # Two scrape-plus-decision intervals are 4 s here (1 s each); allow for a loaded CI host.
        assert reacted < 6
        assert grown["autoscaling"]["reason"] in ("WaitingRequests", "StepLimited")
        assert grown["autoscaling"]["recommendations"]["WaitingRequests"] > 3
        assert grown["lastScaling"]["reason"] in ("WaitingRequests", "StepLimited")
        assert running.result(timeout=120) >= 12  # the load really ran
    peak_decisions = pool_status(cluster, ns)["autoscaling"]["decisions"]
    wait_for("back to 3", lambda: pool_status(cluster, ns).get("replicas") == 3, timeout=90)
    decisions = pool_status(cluster, ns)["autoscaling"]["decisions"]

    def stamp(d: dict[str, Any]) -> float:
        return time.mktime(time.strptime(d["time"], "%Y-%m-%dT%H:%M:%SZ"))

    peak = max(peak_decisions, key=lambda d: (d["replicas"], -stamp(d)))
    assert peak["replicas"] > 3
    first_fall = next(
        d for d in decisions if stamp(d) >= stamp(peak) and d["replicas"] < peak["replicas"]
    )
    assert stamp(first_fall) - stamp(peak) >= 5  # the down window held the replicas
    assert decisions[-1]["replicas"] == 3


def test_prometheus_frozen_holds_replicas_and_says_so(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    deploy(cluster, ns)
    wait_for("3 ready", lambda: pool_status(cluster, ns).get("readyReplicas") == 3, timeout=60)
    prometheus = cluster.children()["prometheus"]
    os.kill(prometheus, signal.SIGSTOP)
    try:
        condition = wait_for(
            "MetricsUnavailable",
            lambda: next(
                (
                    c
                    for c in pool_status(cluster, ns).get("conditions", [])
                    if c["type"] == "MetricsUnavailable" and c["status"] == "True"
                ),
                None,
            ),
            timeout=30,
        )
        assert "never scaling down on silence" in condition["message"]
        assert pool_status(cluster, ns)["replicas"] == 3
    finally:
        os.kill(prometheus, signal.SIGCONT)
    wait_for(
        "fresh again",
        lambda: any(
            c["type"] == "MetricsUnavailable" and c["status"] == "False"
            for c in pool_status(cluster, ns).get("conditions", [])
        ),
        timeout=30,
    )
