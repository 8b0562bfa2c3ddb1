"""Every example's README, followed literally on the platform `make up` leaves (the chart's
operator, gateway and Redis as pods on the real node, Prometheus discovering them), reaches
the state it documents — the configuration users run is the configuration tested here.

One platform for the whole module, started as `make up` starts it (real node, chart), then
each example in order, as its README says (tests/support/readme.py: the only rewrites are the
test platform's state folder and ports). Throughout, every network namespace on the host is
watched for a TCP connection touching the machine's own interface address (nothing of ours may
dial it; a host-network pod's IP is that address), and at the end every Prometheus target of
the shipped jobs is up on loopback or the platform's bridge.

While developing, ``TOKENFLEET_E2E_PLATFORM=.tokenfleet`` runs the journeys against a running
`make up` instead of starting one (the address watch then covers the journeys only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import netwatch
from support.cluster import BIN_DIR, REPO, wait_for
from support.readme import Platform, Readme
from tokenfleet.devstack import realnode

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.timeout(600)


def devstack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenfleet.devstack", *args, "--bin-dir", str(BIN_DIR)],
        capture_output=True, text=True, timeout=540, check=False, cwd=REPO,
    )  # fmt: skip


@pytest.fixture(scope="module")
def watch() -> Iterator[netwatch.TcpWatch]:
    bad = netwatch.forbidden(
        netwatch.host_addresses(), [netwatch.ipaddress.ip_network(realnode.SUBNET)]
    )
    assert bad, "this host has no interface address to guard"
    with netwatch.TcpWatch(bad) as watching:
        yield watching


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, watch: netwatch.TcpWatch
) -> Iterator[Platform]:
    reuse = os.environ.get("TOKENFLEET_E2E_PLATFORM")
    if reuse:
        state = Path(reuse).resolve()
        info = json.loads((state / "stack.json").read_text())
        yield Platform(
            state=state,
            gateway=f"http://127.0.0.1:{info['ports']['gateway']}",
            prometheus=info["prometheus"],
        )
        return
    state = tmp_path_factory.mktemp("make-up") / "state"
    up = devstack(
        "up", "--state-dir", str(state), "--ports", "auto", "--pod-octet", "auto", "--real-node"
    )
    assert up.returncode == 0, up.stdout + up.stderr
    info = json.loads((state / "stack.json").read_text())
    try:
        ready = Platform(
            state=state,
            gateway=f"http://127.0.0.1:{info['ports']['gateway']}",
            prometheus=info["prometheus"],
        )
        wait_for("the chart's gateway Ready", lambda: gateway_ready(ready), timeout=180, every=2)
        yield ready
    finally:
        down = devstack("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stdout + down.stderr


def gateway_ready(platform: Platform) -> bool:
    pods = kubectl(platform, "get", "pods", "-n", "tokenfleet-system", "-o", "json")
    return any(
        p["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p.get("status", {}).get("conditions", [])
        )
        for p in pods["items"]
    )


def kubectl(platform: Platform, *args: str) -> Any:
    """kubectl as the printed PATH and KUBECONFIG give it; JSON decoded when asked for."""
    done = subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, env=platform.env(), check=True
    )
    return json.loads(done.stdout) if "json" in args else done.stdout


def readme(platform: Platform, example: str, tmp_path: Path, *carry: str) -> Readme:
    return Readme(
        path=EXAMPLES / example / "README.md", platform=platform, logs=tmp_path, carry=carry
    )


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def status(platform: Platform, kind: str, name: str, ns: str = "default") -> dict[str, Any]:
    return dict(kubectl(platform, "get", kind, name, "-n", ns, "-o", "json"))


# --- the examples, in order ---------------------------------------------------------------------


def test_01_the_pool_is_placed_over_three_zones(platform: Platform, tmp_path: Path) -> None:
    """make up applied 01 and 02; the README's apply changes nothing and its pool holds nine
    Ready replicas, three per zone (18 during the Monday schedule), sized for a zone loss."""
    steps = readme(platform, "01-three-zone-pool", tmp_path)
    printed = steps.run(0)
    assert "chat-h100" in printed

    def placed() -> dict[str, Any] | None:
        pool = status(platform, "tfpool", "chat-h100")
        s = pool.get("status", {})
        ready = s.get("readyReplicas", 0)
        return pool if ready and ready == s.get("replicas") and ready >= 9 else None

    pool = wait_for("chat-h100 placed and Ready", placed, timeout=180, every=2)
    zones = {z["name"]: z.get("ready", 0) for z in pool["status"]["zones"]}
    assert set(zones) == {"zone-a", "zone-b", "zone-c"}
    assert len(set(zones.values())) == 1, zones
    assert condition(pool, "Ready")["status"] == "True"


def test_01_the_load_demo_scales_on_the_load_it_sheds_and_comes_back(
    platform: Platform, tmp_path: Path
) -> None:
    """The README's "Watch it scale" section: three one-sequence workers under 24 streaming
    clients. The gateways refuse what the pool cannot start in time and queue the rest; the
    pool scales past 3 within 60 s with QueueAge among the recommendations; after the load
    stops it comes back down within its 30 s window (plus the step pace)."""
    steps = readme(platform, "01-three-zone-pool", tmp_path)
    steps.run(1)  # apply the demo and wait until its three workers are Ready
    started = time.monotonic()
    steps.run(2)  # the load, in the background
    try:
        grown = wait_for(
            "the demo pool to scale past 3",
            lambda: (
                (s := status(platform, "tfpool", "load-demo")["status"]).get("replicas", 0) > 3
                and s
            ),
            timeout=60,
            every=1,
        )
        reacted = time.monotonic() - started
        seen: set[str] = set()

        def queue_age_recommends() -> bool:
            recs = status(platform, "tfpool", "load-demo")["status"]["autoscaling"]
            seen.update(recs.get("recommendations", {}))
            return recs.get("recommendations", {}).get("QueueAge", 0) > 3

        wait_for("QueueAge among the recommendations", queue_age_recommends, timeout=60, every=1)
        assert {"QueueAge", "Shedding"} <= seen, seen
        print(f"load-demo: 3 -> {grown['replicas']} replicas {reacted:.1f} s after the load")
    finally:
        steps.run(3)  # stop the load
        steps.stop()
    wait_for(
        "the demo pool back to 3 after its window",
        lambda: status(platform, "tfpool", "load-demo")["status"].get("replicas") == 3,
        timeout=240,
        every=2,
    )
    steps.run(4)  # clean up


def test_02_the_model_is_verified_and_available(platform: Platform, tmp_path: Path) -> None:
    steps = readme(platform, "02-model-deployment", tmp_path)
    printed = steps.run(0)
    assert "verified, signed by key:sha256:" in printed  # the Verified message
    verdict = steps.run(1)
    assert '"reason":"Verified"' in verdict.replace(" ", "")
    model = status(platform, "tfmodel", "llama-chat")
    assert condition(model, "Verified")["status"] == "True"
    assert condition(model, "Available")["status"] == "True"


def test_03_tenants_show_usage_cost_and_budget_after_traffic(
    platform: Platform, tmp_path: Path
) -> None:
    steps = readme(platform, "03-two-tenants", tmp_path, "KEY")
    steps.run(0)
    answered = steps.run(1)  # a key, then traffic with it
    assert answered.count("200") >= 10, answered

    def accounted() -> dict[str, Any] | None:
        tenant = status(platform, "tftenant", "search-team")["status"]
        usage, budget = tenant.get("usage") or {}, tenant.get("budget") or {}
        return tenant if usage.get("requests", 0) >= 10 and budget.get("state") else None

    tenant = wait_for("search-team's usage in status", accounted, timeout=90, every=2)
    assert tenant["budget"]["state"] == "WithinBudget"
    assert float(tenant["budget"].get("spent", "0").split()[0]) > 0
    printed = steps.run(2)  # kubectl get tftenant; tokenfleet usage
    assert "search-team" in printed and "USD" in printed


def test_07_the_bad_canary_is_rolled_back_and_the_good_one_promoted(
    platform: Platform, tmp_path: Path
) -> None:
    steps = readme(platform, "07-quality-canary", tmp_path)
    try:
        steps.run(0, timeout=240)  # setup: Promoted first revision, traffic in the background

        def rollout() -> dict[str, Any]:
            return dict(status(platform, "tfmodel", "support-bot")["status"].get("rollout", {}))

        steps.run(1)  # the bad quantization
        wait_for(
            "the bad canary rolled back on quality",
            lambda: (
                condition(status(platform, "tfmodel", "support-bot"), "RolledBack").get("reason")
                == "QualityRegression"
            ),
            timeout=180,
            every=2,
        )
        first = status(platform, "tfmodel", "support-bot")["status"]["stableRevision"]
        steps.run(2)  # the good one
        promoted = wait_for(
            "the good canary promoted by a passing analysis",
            lambda: (
                (r := rollout()).get("phase") == "Promoted"
                and status(platform, "tfmodel", "support-bot")["status"]["stableRevision"] != first
                and r
            ),
            timeout=240,
            every=2,
        )
        assert "canary within thresholds" in promoted.get("lastAnalysis", "")
    finally:
        steps.stop()


# --- the platform as a whole, after the journeys ------------------------------------------------


def test_every_target_is_up_on_loopback_or_the_bridge(platform: Platform) -> None:
    with urllib.request.urlopen(f"{platform.prometheus}/api/v1/targets?state=active") as resp:
        targets = json.load(resp)["data"]["activeTargets"]
    by_job: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        by_job.setdefault(t["labels"]["job"], []).append(t)
    assert {"vllm", "tokenfleet-gateway", "tokenfleet-operator"} <= set(by_job), set(by_job)
    for job, found in by_job.items():
        for t in found:
            host = t["scrapeUrl"].split("//")[1].split(":")[0]
            assert host.startswith(("127.", "10.250.0.")), (job, t["scrapeUrl"])
        down = [(t["scrapeUrl"], t["lastError"]) for t in found if t["health"] != "up"]
        assert not down, (job, down)


def test_nothing_dialled_the_machines_own_address(watch: netwatch.TcpWatch) -> None:
    """Last: every connection of the whole module, in every network namespace."""
    assert watch.samples > 10
    assert not watch.seen, sorted(watch.seen, key=str)
