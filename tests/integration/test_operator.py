"""The operator on the real control plane, running with its own least-privilege account.

Placement (exact zone counts, warm floor), zone loss and return (moves within 30 s, never below
the floor on the way back), restarts without duplicates, clean deletion, specs the schema
cannot catch (missing pool, accelerator no node offers, two models on one pool) and RBAC.
"""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from support import artifact
from support.cluster import Cluster, wait_for
from support.objects import manifest
from support.operator import SA, SA_NAMESPACE, running_operator
from tokenfleet.api import labels

ZONES = ["zone-a", "zone-b", "zone-c"]


@pytest.fixture(autouse=True)
def trusted_key(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    """The shipped artifact's trust Secret in each test's namespace: the local platform
    verifies every ModelDeployment's artifact before an engine starts."""
    if "ns" in request.fixturenames:
        cluster.apply(artifact.trust_secret(request.getfixturevalue("ns")))


def pool(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    body = {
        "accelerator": {"product": "NVIDIA-H100-80GB-HBM3"},
        "zones": {"names": ZONES},
        "warm": {"perZone": 1},
        "replicas": {"min": 6, "max": 24},
    }
    return manifest("InferencePool", name, ns, {**body, **spec})


def model(name: str, ns: str, pools: list[str], served: str | None = None) -> dict[str, Any]:
    return manifest(
        "ModelDeployment",
        name,
        ns,
        {
            "model": {"name": served or name},
            "pools": pools,
            "artifact": artifact.spec(),
            "engine": {"maxNumSeqs": 16},
        },
    )


def ready_per_zone(cluster: Cluster, ns: str, pool_name: str) -> dict[str, int]:
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}={pool_name}")["items"]
    counts: dict[str, int] = collections.Counter()
    for p in pods:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
        if ready and not p["metadata"].get("deletionTimestamp"):
            counts[p["metadata"]["labels"][labels.ZONE]] += 1
    return dict(counts)


def status(cluster: Cluster, kind: str, name: str, ns: str) -> dict[str, Any]:
    return dict(cluster.get(kind, name, "-n", ns).get("status", {}))


def cond(obj_status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj_status.get("conditions", []) if c["type"] == kind), {})


def events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [
        e for e in cluster.get("events", "-n", ns)["items"] if e["involvedObject"]["name"] == name
    ]


def test_pool_and_model_give_exact_placement_with_truthful_status(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(pool("chat", ns), model("llama", ns, ["chat"]))
    wait_for(
        "2 Ready pods per zone",
        lambda: ready_per_zone(cluster, ns, "chat") == dict.fromkeys(ZONES, 2),
    )
    st = wait_for(
        "status to catch up",
        lambda: (s := status(cluster, "tfpool", "chat", ns)).get("readyReplicas") == 6 and s,
    )
    assert st["replicas"] == 6 and st["observedGeneration"] == 1
    assert [(z["name"], z["desired"], z["ready"], z["healthy"]) for z in st["zones"]] == [
        (z, 2, 2, True) for z in ZONES
    ]
    assert cond(st, "Ready")["status"] == "True" and cond(st, "Degraded")["status"] == "False"
    row = cluster.kubectl("get", "tfpool", "chat", "-n", ns, "--no-headers").stdout.split()
    assert row[1:6] == ["NVIDIA-H100-80GB-HBM3", "6", "24", "6", "6"]
    md = wait_for(
        "model Available",
        lambda: (s := status(cluster, "tfmodel", "llama", ns)).get("phase") == "Available" and s,
    )
    assert md["revisions"][0]["readyReplicas"] == 6

    deployments = cluster.get("deployments", "-n", ns)["items"]
    assert sorted(d["metadata"]["labels"][labels.ZONE] for d in deployments) == ZONES
    for d in deployments:
        pod_spec = d["spec"]["template"]["spec"]
        assert (
            pod_spec["nodeSelector"][labels.TOPOLOGY_ZONE] == d["metadata"]["labels"][labels.ZONE]
        )
        assert (
            "exec" in pod_spec["containers"][0]["readinessProbe"]
        )  # a real inference, not /health
        assert d["metadata"]["ownerReferences"][0]["kind"] == "InferencePool"
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=chat")["items"]
    for p in pods:  # every worker answers through its simulated vLLM
        client = openai.OpenAI(
            base_url=f"http://{p['status']['podIP']}:8000/v1", api_key="x", max_retries=0
        )
        assert client.completions.create(model="llama", prompt="hi", max_tokens=2).choices
    assert cluster.get("pdb", "chat-workers", "-n", ns)["spec"]["maxUnavailable"] == 1
    assert cluster.get("service", "chat-workers", "-n", ns)["spec"]["clusterIP"] == "None"


def test_uneven_minimum_and_the_warm_floor(cluster: Cluster, ns: str, operator: Any) -> None:
    cluster.apply(pool("p", ns, replicas={"min": 7, "max": 24}), model("m", ns, ["p"]))
    wait_for("3/2/2", lambda: sorted(ready_per_zone(cluster, ns, "p").values()) == [2, 2, 3])
    cluster.apply(pool("p", ns, replicas={"min": 2, "max": 24}))
    wait_for(
        "1/1/1", lambda: ready_per_zone(cluster, ns, "p") == dict.fromkeys(ZONES, 1), timeout=60
    )
    last = wait_for(
        "the warm floor to be the reason",
        lambda: (
            (s := status(cluster, "tfpool", "p", ns)).get("lastScaling", {}).get("reason")
            == "WarmFloor"
            and s
        ),
    )
    assert last["replicas"] == 3 and "warm floor" in last["lastScaling"]["message"]
    row = cluster.kubectl("get", "tfpool", "p", "-n", ns, "--no-headers").stdout
    assert "WarmFloor" in row


def _outage(cluster: Cluster, zone: str, down: bool) -> None:
    nodes = cluster.get(
        "nodes", "-l", f"{labels.TOPOLOGY_ZONE}={zone},{labels.SIMULATED_NODE}=true"
    )["items"]
    names = [n["metadata"]["name"] for n in nodes]
    label = f"{labels.SIMULATED_OUTAGE}=true" if down else f"{labels.SIMULATED_OUTAGE}-"
    cluster.kubectl("label", "node", *names, label, "--overwrite")


def test_zone_loss_moves_replicas_and_the_return_never_dips_below_the_floor(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(pool("z", ns), model("zm", ns, ["z"]))
    wait_for("2/2/2", lambda: ready_per_zone(cluster, ns, "z") == dict.fromkeys(ZONES, 2))
    lost_at = time.monotonic()
    _outage(cluster, "zone-b", down=True)
    try:
        wait_for(
            "zone-a and zone-c to take zone-b's share",
            lambda: ready_per_zone(cluster, ns, "z") == {"zone-a": 3, "zone-c": 3},
            timeout=30,
        )
        moved_in = time.monotonic() - lost_at
        degraded = wait_for(
            "Degraded=True",
            lambda: (
                cond(status(cluster, "tfpool", "z", ns), "Degraded").get("status") == "True"
                and cond(status(cluster, "tfpool", "z", ns), "Degraded")
            ),
        )
        assert degraded["reason"] == "ZoneLost"
        assert (
            "zone-b lost" in degraded["message"]
            and "moved to zone-a and zone-c" in degraded["message"]
        )
        assert any(e["reason"] == "ZoneLost" for e in events(cluster, ns, "z"))
        assert moved_in < 30
    finally:
        _outage(cluster, "zone-b", down=False)
    samples = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = ready_per_zone(cluster, ns, "z")
        samples.append(counts)
        if counts == dict.fromkeys(ZONES, 2):
            break
        time.sleep(0.3)
    assert samples[-1] == dict.fromkeys(ZONES, 2), samples[-5:]
    for (
        counts
    ) in samples:  # the surviving zones never drop below their floor, nor the total below min
        assert counts.get("zone-a", 0) >= 1 and counts.get("zone-c", 0) >= 1, samples
        assert sum(counts.values()) >= 6, samples
    wait_for(
        "Degraded=False",
        lambda: cond(status(cluster, "tfpool", "z", ns), "Degraded").get("status") == "False",
    )
    assert any(e["reason"] == "ZoneRecovered" for e in events(cluster, ns, "z"))


def test_operator_killed_mid_reconcile_leaves_no_duplicates_or_orphans(
    cluster: Cluster, ns: str, operator_kubeconfig: Path, tmp_path: Path, operator: Any
) -> None:
    operator.send_signal(signal.SIGSTOP)  # the shared operator must not race the one under test
    try:
        with running_operator(operator_kubeconfig, tmp_path / "first.log") as first:
            cluster.apply(pool("r", ns), model("rm", ns, ["r"]))
            wait_for(
                "the first children",
                lambda: cluster.get("deployments", "-n", ns)["items"],
                timeout=30,
            )
            first.kill()
        with running_operator(operator_kubeconfig, tmp_path / "second.log"):
            wait_for(
                "2/2/2 after restart",
                lambda: ready_per_zone(cluster, ns, "r") == dict.fromkeys(ZONES, 2),
            )
            time.sleep(3)  # a few more passes: nothing new may appear
            deployments = cluster.get("deployments", "-n", ns)["items"]
            assert sorted(d["metadata"]["name"] for d in deployments) == sorted(
                {d["metadata"]["name"] for d in deployments}
            )
            assert len(deployments) == 3
            assert sum(ready_per_zone(cluster, ns, "r").values()) == 6
            assert len(cluster.get("pods", "-n", ns)["items"]) == 6
    finally:
        operator.send_signal(signal.SIGCONT)


def test_deleting_model_then_pool_removes_children_and_the_namespace_deletes(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(pool("d", ns, replicas={"min": 3, "max": 6}), model("dm", ns, ["d"]))
    wait_for("3 ready", lambda: sum(ready_per_zone(cluster, ns, "d").values()) == 3)
    assert not cluster.get("tfpool", "d", "-n", ns)["metadata"].get("finalizers")
    cluster.kubectl("delete", "tfmodel", "dm", "-n", ns)
    wait_for("workers gone", lambda: not cluster.get("deployments", "-n", ns)["items"], timeout=30)
    wait_for(
        "pool says it waits for a model",
        lambda: (
            cond(status(cluster, "tfpool", "d", ns), "Ready").get("reason") == "NoModelDeployment"
        ),
    )
    cluster.kubectl("delete", "tfpool", "d", "-n", ns)
    wait_for(
        "pool children collected",
        lambda: not cluster.get("pdb,services", "-n", ns)["items"],
        timeout=60,
    )
    cluster.kubectl("delete", "namespace", ns, "--timeout=60s")
    gone = cluster.kubectl("get", "namespace", ns, check=False)
    assert gone.returncode != 0


def test_model_pointing_at_a_missing_pool_recovers_when_the_pool_appears(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(model("early", ns, ["later"]))
    available = wait_for(
        "PoolNotFound",
        lambda: (
            (c := cond(status(cluster, "tfmodel", "early", ns), "Available")).get("reason")
            == "PoolNotFound"
            and c
        ),
    )
    assert "later" in available["message"] and "does not exist" in available["message"]
    time.sleep(3)  # no hot loop: one event, not one per pass
    warnings = [e for e in events(cluster, ns, "early") if e["reason"] == "PoolNotFound"]
    assert len(warnings) == 1 and warnings[0]["count"] == 1
    cluster.apply(pool("later", ns, replicas={"min": 3, "max": 6}))
    wait_for(
        "Available once the pool exists",
        lambda: status(cluster, "tfmodel", "early", ns).get("phase") == "Available",
        timeout=60,
    )


def test_accelerator_no_node_offers_is_reported_then_fixed(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(
        pool("b200", ns, accelerator={"product": "NVIDIA-B200"}, replicas={"min": 3, "max": 6}),
        model("bm", ns, ["b200"]),
    )
    ready = wait_for(
        "NoHealthyZone",
        lambda: (
            (c := cond(status(cluster, "tfpool", "b200", ns), "Ready")).get("reason")
            == "NoHealthyZone"
            and c
        ),
    )
    assert "no node offers the accelerator" in ready["message"]
    assert not cluster.get("deployments", "-n", ns)["items"]
    assert any(e["reason"] == "NoHealthyZone" for e in events(cluster, ns, "b200"))
    cluster.apply(pool("b200", ns, replicas={"min": 3, "max": 6}))  # fix the spec: H100 again
    wait_for(
        "3 ready after the fix", lambda: sum(ready_per_zone(cluster, ns, "b200").values()) == 3
    )


def test_two_models_on_one_pool_the_older_wins_and_the_other_is_told(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(pool("shared", ns, replicas={"min": 3, "max": 6}), model("first", ns, ["shared"]))
    wait_for(
        "first Available",
        lambda: status(cluster, "tfmodel", "first", ns).get("phase") == "Available",
    )
    cluster.apply(model("second", ns, ["shared"]))
    claimed = wait_for(
        "PoolClaimed",
        lambda: (
            (c := cond(status(cluster, "tfmodel", "second", ns), "Available")).get("reason")
            == "PoolClaimed"
            and c
        ),
    )
    assert "first" in claimed["message"]
    degraded = wait_for(
        "pool Degraded",
        lambda: (
            (c := cond(status(cluster, "tfpool", "shared", ns), "Degraded")).get("reason")
            == "PoolClaimedTwice"
            and c
        ),
    )
    assert "second" in degraded["message"]
    pods = cluster.get("pods", "-n", ns)["items"]
    assert {p["metadata"]["labels"][labels.MODEL] for p in pods} == {"first"}
    cluster.kubectl("delete", "tfmodel", "second", "-n", ns)
    wait_for(
        "pool healthy again",
        lambda: cond(status(cluster, "tfpool", "shared", ns), "Degraded").get("status") == "False",
    )


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("list", "inferencepools.tokenfleet.io", True),
        ("patch", "inferencepools.tokenfleet.io/status", True),
        ("patch", "inferencepools.tokenfleet.io", False),
        ("create", "deployments.apps", True),
        ("get", "secrets", False),
        ("delete", "pods", False),
        ("patch", "nodes", False),
        ("create", "clusterroles.rbac.authorization.k8s.io", False),
    ],
)
def test_operator_account_has_only_what_it_uses(
    cluster: Cluster, operator_kubeconfig: Path, verb: str, resource: str, allowed: bool
) -> None:
    answer = cluster.kubectl(
        "auth",
        "can-i",
        verb,
        resource.split("/", maxsplit=1)[0],
        *(["--subresource=" + resource.split("/")[1]] if "/" in resource else []),
        "--as",
        f"system:serviceaccount:{SA_NAMESPACE}:{SA}",
        "-A",
        check=False,
    )
    assert answer.stdout.strip() == ("yes" if allowed else "no"), answer.stdout + answer.stderr
