"""A stack restarted with pods present keeps pod IPs unique, and a pod the node agent cannot
start says why in its status (issue #21: two Running pods with one IP after `make down/up`).

Many pods share one node on purpose: at a restart the pods of the earlier run are deleted while
their controllers already recreate them, and a pod IP allocator that does not know the earlier
run's addresses hands one out again while its old owner still exists.
"""

from __future__ import annotations

import collections
import socket
from pathlib import Path
from typing import Any

from support.cluster import Cluster, start_stack, stop_stack, wait_for
from tokenfleet.api import labels

NAMESPACE = "restart"
NODE = "gpu-zone-b-0"
PLAIN_PODS = 14  # no engine: cheap, and they take addresses from the node's range like workers
WORKER_PODS = 3  # one simulator each: Ready only once it listens on its pod IP


def deployment(name: str, *, replicas: int, worker: bool, port: int = 8000) -> dict[str, Any]:
    pod_labels = {"app": name, **({labels.ROLE: labels.ROLE_WORKER} if worker else {})}
    container: dict[str, Any] = {"name": "vllm" if worker else "app", "image": "local/none"}
    if worker:
        container["args"] = ["serve", "/models/restart-sim", "--served-model-name", "restart-sim"]
        container["ports"] = [{"name": "http", "containerPort": port}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "nodeSelector": {labels.HOSTNAME: NODE},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def live_pods(cluster: Cluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", NAMESPACE)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def all_ready(cluster: Cluster, count: int) -> list[dict[str, Any]] | None:
    pods = live_pods(cluster)
    return pods if len(pods) == count and all(_ready(p) for p in pods) else None


def shared_ips(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    owners = collections.defaultdict(list)
    for p in pods:
        if ip := p.get("status", {}).get("podIP"):
            owners[ip].append(p["metadata"]["name"])
    return {ip: names for ip, names in owners.items() if len(names) > 1}


def test_pod_ips_stay_unique_after_a_restart_with_pods_present(tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = PLAIN_PODS + WORKER_PODS
    restarted = before + PLAIN_PODS  # with the in-flight Deployment
    cluster = start_stack(state)
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.apply(
            deployment("before", replicas=PLAIN_PODS, worker=False),
            deployment("before-w", replicas=WORKER_PODS, worker=True),
        )
        first = wait_for("the first pods Ready", lambda: all_ready(cluster, before), timeout=120)
        # `make down` during a scale-up: pods bound, unbound and Running when the stack stops.
        cluster.apply(deployment("in-flight", replicas=PLAIN_PODS, worker=False))
    finally:
        assert not stop_stack(cluster)

    cluster = start_stack(state)
    try:
        old = {p["metadata"]["uid"] for p in first}
        wait_for(
            "the earlier run's pods replaced and Ready",
            lambda: (
                (pods := all_ready(cluster, restarted))
                and not old & {p["metadata"]["uid"] for p in pods}
            ),
            timeout=120,
        )
        cluster.apply(
            deployment("after", replicas=PLAIN_PODS, worker=False),
            deployment("after-w", replicas=WORKER_PODS, worker=True),
        )
        # Ready workers listen on their pod IP: with a shared IP one of them never would.
        pods = wait_for(
            "every pod Ready after the restart",
            lambda: all_ready(cluster, restarted + before),
            timeout=120,
        )
        assert shared_ips(pods) == {}
        assert all(p["status"].get("podIP") for p in pods)
    finally:
        assert not stop_stack(cluster)


def test_a_pod_whose_address_is_taken_says_so_in_its_status(tmp_path: Path) -> None:
    """Something else holds the worker's port on every address: the agent cannot listen on the
    pod's IP. The pod must say so (a Ready condition with the reason and an Event), not stay
    NotReady with nothing in its status."""
    cluster = start_stack(tmp_path / "state")
    try:
        with socket.socket() as squatter:
            squatter.bind(("0.0.0.0", 0))  # every address: the pod IP is not known beforehand
            squatter.listen()
            port = squatter.getsockname()[1]
            cluster.kubectl("create", "namespace", NAMESPACE)
            cluster.apply(deployment("squatted", replicas=1, worker=True, port=port))

            def refused() -> dict[str, Any] | None:
                pods = live_pods(cluster)
                conditions = pods[0]["status"].get("conditions", []) if pods else []
                ready = next((c for c in conditions if c["type"] == "Ready"), {})
                return ready if ready.get("reason") == "CannotListen" else None

            ready = wait_for("the pod to report CannotListen", refused, timeout=60)
            assert ready["status"] == "False"
            assert f":{port}" in ready["message"] and "in use" in ready["message"]
            events = cluster.get(
                "events", "-n", NAMESPACE, "--field-selector", "reason=CannotListen"
            )["items"]
            assert events and events[0]["type"] == "Warning"
        # The squatter is gone: the agent's next attempt (after its back-off) starts the engine.
        wait_for("the pod Ready once its port is free", lambda: all_ready(cluster, 1), timeout=90)
    finally:
        assert not stop_stack(cluster)
