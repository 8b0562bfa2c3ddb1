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


def deploy(cluster: Cluster, ns: str, cold_start: float = 0, down_window: int = 6) -> None:
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
                    "scaleDownStabilizationSeconds": down_window,
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
                "annotations": {
                    labels.SIM_ARGS: "--inter-token-latency 60ms",
                    labels.SIM_COLD_START: str(cold_start),
                },
            },
        },
    )


def load(cluster: Cluster, ns: str, streams: int, seconds: float = 0) -> int:
    """Streams straight at the Ready pods (each repeating for ``seconds``); returns how many
    completed. A pod removed by a scale-down cuts its stream (no gateway stops routing to it)."""
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=auto")["items"]
    ips = [
        p["status"]["podIP"]
        for p in pods
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    ]

    def one(i: int) -> int:
        client = openai.OpenAI(
            base_url=f"http://{ips[i % len(ips)]}:8000/v1", api_key="x", max_retries=0, timeout=60
        )
        done, until = 0, time.monotonic() + seconds
        while True:
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
                return done
            done += 1
            if time.monotonic() >= until:
                return done

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


def test_a_scale_up_does_not_overshoot_while_its_replicas_are_starting(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    # Every replica takes 12 s to load. Sustained load that 5 replicas absorb keeps recommending
    # 5 for the whole cold start; decisions every second must not add more on top of the
    # replicas already starting (an incremental "add what is missing" controller would).
    deploy(cluster, ns, cold_start=12, down_window=120)
    wait_for("3 ready", lambda: pool_status(cluster, ns).get("readyReplicas") == 3, timeout=90)
    seen: list[tuple[int, int]] = []
    with concurrent.futures.ThreadPoolExecutor(1) as background:
        running = background.submit(load, cluster, ns, 8, 30)
        wait_for(
            "a scale-up",
            lambda: (s := pool_status(cluster, ns)).get("replicas", 0) > 3 and s,
            timeout=20,
            every=0.1,
        )
        deadline = time.monotonic() + 25  # the cold start, and well past it
        while time.monotonic() < deadline:
            s = pool_status(cluster, ns)
            seen.append((s.get("replicas", 0), s.get("readyReplicas", 0)))
            time.sleep(0.5)
        assert running.result(timeout=120) >= 8
    peak = max(r for r, _ in seen)
    assert peak == 5, seen  # 8 streams on 3 one-sequence engines: 5 waiting, 1 per replica
    assert any(ready == peak for _, ready in seen), seen  # and the starting ones did arrive
    starting = [(r, ready) for r, ready in seen if ready < r]
    assert starting and all(r == starting[0][0] for r, _ in starting), seen
