"""Operator at scale on the local cluster: 50 ModelDeployments x 4 replicas (200 pods, 3 zones).

Measures (1) time from applying everything to all 200 pods Ready and all pools Ready, (2) the
operator's CPU and resident memory at rest with them, (3) time from losing zone-b to full
capacity (200 Ready pods) in zone-a and zone-c. Runs its own stack (free ports, its own pod
network) with enough 8-GPU nodes that two zones can hold every replica, beside `make up`.

    .venv/bin/python bench/operator_scale.py [--models 50] [--replicas 4]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _processes import cpu_seconds, devstack_run, kubectl

REPO = Path(__file__).resolve().parents[1]


#: Example 02's signed tiny artifact: the node agent verifies every worker's artifact before
#: its engine starts, so time to Ready includes one real verification per pod.
EXAMPLE_02 = REPO / "examples" / "02-model-deployment"


def objects(models: int, replicas: int, ns: str) -> list[dict[str, Any]]:
    trust = yaml.safe_load((EXAMPLE_02 / "trust-secret.yaml").read_text())
    artifact = yaml.safe_load((EXAMPLE_02 / "modeldeployment.yaml").read_text())["spec"]["artifact"]
    artifact["uri"] = (EXAMPLE_02 / "tiny-chat").as_uri()
    out: list[dict[str, Any]] = [{**trust, "metadata": {**trust["metadata"], "namespace": ns}}]
    for i in range(models):
        out.append(
            {
                "apiVersion": "tokenfleet.io/v1alpha1",
                "kind": "InferencePool",
                "metadata": {"name": f"pool-{i}", "namespace": ns},
                "spec": {
                    "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
                    "warm": {"perZone": 0},
                    "replicas": {"min": replicas, "max": replicas * 2},
                },
            }
        )
        out.append(
            {
                "apiVersion": "tokenfleet.io/v1alpha1",
                "kind": "ModelDeployment",
                "metadata": {"name": f"model-{i}", "namespace": ns},
                "spec": {
                    "model": {"name": f"model-{i}"},
                    "pools": [f"pool-{i}"],
                    "artifact": artifact,
                },
            }
        )
    return out


def ready_pods(env: dict[str, str], ns: str, outside: str = "") -> int:
    """Ready pods, optionally only those outside zone ``outside``."""
    pods = json.loads(kubectl(env, "get", "pods", "-n", ns, "-o", "json"))["items"]
    return sum(
        1
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["labels"].get("tokenfleet.io/zone") != outside
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    )


def ready_pools(env: dict[str, str], ns: str) -> int:
    pools = json.loads(kubectl(env, "get", "tfpool", "-n", ns, "-o", "json"))["items"]
    return sum(
        1
        for p in pools
        for c in p.get("status", {}).get("conditions", [])
        if c["type"] == "Ready" and c["status"] == "True"
    )


def wait(label: str, probe: Any, target: int, timeout: float = 600) -> float:
    start = time.monotonic()
    last = -1
    while time.monotonic() - start < timeout:
        value = probe()
        if value != last:
            print(f"  {label}: {value}/{target} at {time.monotonic() - start:5.1f} s", flush=True)
            last = value
        if value >= target:
            return time.monotonic() - start
        time.sleep(1.0)
    raise SystemExit(f"{label} did not reach {target} in {timeout:.0f} s")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--rest-seconds", type=float, default=30.0)
    args = parser.parse_args()
    total = args.models * args.replicas
    # Two zones must hold every replica after the third is lost: 8 GPUs per node.
    per_zone = -(-total // (2 * 8))
    state = Path(tempfile.mkdtemp(prefix="tf-bench-"))
    print(f"starting a stack ({3 * per_zone} simulated nodes x 8 GPUs) in {state} ...", flush=True)
    stack, info = devstack_run(state, "--nodes-per-zone", str(per_zone), "--operator")
    try:
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"]}
        operator_pid = info["children"]["tokenfleet-operator"]
        kubectl(env, "create", "namespace", "bench")
        print(
            f"applying {args.models} pools + {args.models} models ({total} replicas) ...",
            flush=True,
        )
        started = time.monotonic()
        kubectl(
            env,
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(objects(args.models, args.replicas, "bench")),
        )
        to_pods = wait("ready pods", lambda: ready_pods(env, "bench"), total)
        to_pools = wait("ready pools", lambda: ready_pools(env, "bench"), args.models) + to_pods
        applied_in = time.monotonic() - started
        print(f"at rest for {args.rest_seconds:.0f} s ...", flush=True)
        time.sleep(5)
        cpu0, t0 = cpu_seconds(operator_pid), time.monotonic()
        time.sleep(args.rest_seconds)
        cpu_at_rest = (cpu_seconds(operator_pid) - cpu0) / (time.monotonic() - t0)
        memory = rss_mib(operator_pid)
        print("losing zone-b ...", flush=True)
        zone_b = [
            n
            for n in kubectl(
                env, "get", "nodes", "-l", "topology.kubernetes.io/zone=zone-b", "-o", "name"
            ).split()
        ]
        lost = time.monotonic()
        kubectl(env, "label", *zone_b, "tokenfleet.io/simulated-outage=true")
        wait("ready pods outside zone-b", lambda: ready_pods(env, "bench", outside="zone-b"), total)
        recovered_in = time.monotonic() - lost
        print()
        print(f"{'figure':58} {'value':>12}")
        print(f"{'-' * 58} {'-' * 12}")
        rows = [
            (
                f"apply {args.models} models x {args.replicas} replicas -> {total} pods Ready",
                f"{to_pods:.1f} s",
            ),
            (f"  ... -> all {args.models} pools report Ready=True", f"{to_pools:.1f} s"),
            ("operator CPU at rest (share of one core)", f"{cpu_at_rest * 100:.1f} %"),
            ("operator resident memory at rest", f"{memory:.0f} MiB"),
            (f"zone-b lost -> {total} pods Ready in zone-a and zone-c", f"{recovered_in:.1f} s"),
        ]
        for name, value in rows:
            print(f"{name:58} {value:>12}")
        del applied_in
    finally:
        stack.terminate()
        stack.wait(timeout=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
