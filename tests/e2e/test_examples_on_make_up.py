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

import base64
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import netwatch
from support.cluster import BIN_DIR, REPO, wait_for
from support.readme import Platform, Readme, kubectl, made_up, shown
from tokenfleet.api import labels
from tokenfleet.signing import keys, verdict

EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, watch: netwatch.TcpWatch
) -> Iterator[Platform]:
    state = tmp_path_factory.mktemp("make-up") / "state"
    with made_up(state, BIN_DIR, "--real-node", timeout=540) as (ready, _):
        wait_for("the chart's gateway Ready", lambda: gateway_ready(ready), timeout=180, every=2)
        yield ready


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


def test_01_the_tpot_demo_scales_on_its_objective_and_comes_back(
    platform: Platform, tmp_path: Path
) -> None:
    """The README's "Scale on time per output token" section: three 8-sequence workers whose
    tokens slow with their batch, 15 streaming clients through the gateway. Nothing queues or
    waits; the p95 TPOT objective (40 ms) is missed, status says so with what it measured, and
    the pool grows with TPOTObjective as the reason; after the load it comes back to 3."""
    steps = readme(platform, "01-three-zone-pool", tmp_path)
    steps.run(5)  # apply the demo and wait until its three workers are Ready
    steps.run(6)  # the load, in the background
    try:

        def missed() -> dict[str, Any] | None:
            auto = status(platform, "tfpool", "tpot-demo")["status"].get("autoscaling") or {}
            (tpot,) = auto.get("objectives") or [{}]
            return auto if auto.get("demand", 0) > 3 and tpot.get("met") is False else None

        auto = wait_for("the TPOT objective to scale the pool", missed, timeout=120, every=2)
        (tpot,) = auto["objectives"]
        assert tpot["name"] == "tpot" and tpot["observedMs"] > 40, tpot
        raised = next(d for d in auto["decisions"] if d["replicas"] > 3)
        assert "TPOTObjective" in raised["message"], raised
        assert raised["reason"] in ("TPOTObjective", "StepLimited", "ScaleUpStabilized"), raised
        # what the README says sees nothing to do — queue age, waiting requests, KV usage —
        # asked for no more: the objective saw the contention. (OfferedLoad may speak for a
        # moment as the load starts: arrivals lead completions while a brief queue forms in one
        # of the two gateway processes — a fresh platform's run showed OfferedLoad 6 beside
        # QueueAge, QueueWaitP95, WaitingRequests and KVCacheUsage all 0.)
        quiet = ("QueueAge", "QueueWaitP95", "WaitingRequests", "KVCacheUsage")
        others = {k: v for k, v in auto["recommendations"].items() if k in quiet}
        assert others and all(v <= 3 for v in others.values()), auto["recommendations"]
        print(f"tpot-demo: {tpot} -> demand {auto['demand']}")
    finally:
        steps.run(7)  # stop the load
        steps.stop()
    wait_for(
        "the TPOT demo pool back to 3 after its window",
        lambda: status(platform, "tfpool", "tpot-demo")["status"].get("replicas") == 3,
        timeout=240,
        every=2,
    )
    steps.run(8)  # clean up


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


#: Where 04's README keeps its key and its copies of the model.
DIR_04 = Path("/tmp/tokenfleet-examples/04-signed-artifact")


@pytest.fixture(scope="module")
def readme_04(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Readme]:
    """04's README as one shell session across its sections: its canary traffic runs from the
    canary section until the clean-up."""
    steps = readme(platform, "04-signed-artifact", tmp_path_factory.mktemp("04"), "DIR", "KEY")
    try:
        yield steps
    finally:
        steps.stop()


def pods_of(platform: Platform, model: str) -> list[dict[str, Any]]:
    """The model's worker pods, those being deleted left out."""
    pods = kubectl(platform, "get", "pods", "-l", f"{labels.MODEL}={model}", "-o", "json")
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def pod_verdict(pod: dict[str, Any]) -> verdict.Verdict | None:
    return verdict.parse((pod["metadata"].get("annotations") or {}).get(labels.VERDICT, ""))


def test_04_the_signed_model_serves_verified_by_its_own_key(
    platform: Platform, readme_04: Readme
) -> None:
    """Keygen, sign, verify, trust (04's own Secret: make up's model-signing-key keeps example
    02's key) and deploy: three Ready workers whose verdicts name the new key, Verified=True
    naming it, the first revision promoted at once."""
    printed = readme_04.run(0)
    pinned = "sha256:984644f6bc6f25e9d7cd7869cb7680359ddf4d5a6267d850a3bcc86b320ce1f5"
    assert pinned in printed and '"reason":"Verified"' in printed.replace(" ", ""), printed
    signer = keys.signer_name((DIR_04 / "keys/public.pem").read_bytes())

    def serving() -> list[dict[str, Any]] | None:
        pods = pods_of(platform, "tiny-signed")
        return pods if len(pods) == 3 and all(pod_ready(p) for p in pods) else None

    for pod in wait_for("tiny-signed's three workers Ready", serving, timeout=120, every=2):
        seen = pod_verdict(pod)
        assert seen is not None and seen.verified and seen.signer == signer, pod["metadata"]
    model = status(platform, "tfmodel", "tiny-signed")
    assert condition(model, "Verified")["status"] == "True"
    assert signer in condition(model, "Verified")["message"]
    assert model["status"]["rollout"]["phase"] == "Promoted"
    assert readme_04.run(1).startswith("Promoted ")
    # example 02's trust is untouched
    trusted = kubectl(platform, "get", "secret", "model-signing-key", "-o", "json")
    shipped = (EXAMPLES / "02-model-deployment/public.pem").read_bytes()
    assert base64.b64decode(trusted["data"]["public.pem"]) == shipped


def test_04_a_canary_is_promoted_and_a_slow_one_rolled_back(
    platform: Platform, readme_04: Readme
) -> None:
    """With traffic, an engine change steps 34 % → 67 % → Promoted on its measurements; the
    next one, with a 1.5 s first token, is RolledBack on TTFT p99 and stable keeps 100 %."""
    first = status(platform, "tfmodel", "tiny-signed")["status"]["stableRevision"]
    readme_04.run(2)  # traffic in the background; --seed 7

    def promoted() -> dict[str, Any] | None:
        s = status(platform, "tfmodel", "tiny-signed")["status"]
        moved = s["rollout"].get("phase") == "Promoted" and s["stableRevision"] != first
        return s if moved else None

    s = wait_for("the --seed 7 canary promoted", promoted, timeout=300, every=2)
    assert [r["weight"] for r in s["revisions"] if r["name"] == s["stableRevision"]] == [100]
    followed = readme_04.run(3)
    assert "Promoted" in followed and "CanaryStepPassed" in followed, followed
    second = s["stableRevision"]

    readme_04.run(4)  # a slow first token; --seed 8

    def rolled_back() -> dict[str, Any] | None:
        model = status(platform, "tfmodel", "tiny-signed")
        return model if condition(model, "RolledBack").get("status") == "True" else None

    model = wait_for("the slow canary rolled back", rolled_back, timeout=300, every=2)
    assert model["status"]["rollout"]["phase"] == "RolledBack"
    judged = re.search(
        r"TTFT p99 (\d+) ms > 1\.5 × stable (\d+) ms", condition(model, "RolledBack")["message"]
    )
    assert judged, model["status"]
    # the canary's engines wait 1.5 s for a first token, stable's (not re-rendered) do not
    assert int(judged[1]) >= 1500 > int(judged[2]), judged[0]
    assert model["status"]["stableRevision"] == second
    weights = {r["name"]: r["weight"] for r in model["status"]["revisions"]}
    assert weights[second] == 100 and sum(weights.values()) == 100, weights
    wait_for(
        "the canary's workers deleted",
        lambda: (
            {p["metadata"]["labels"][labels.REVISION] for p in pods_of(platform, "tiny-signed")}
            == {second}
        ),
        timeout=120,
        every=2,
    )
    assert "RolledBack" in readme_04.run(3)


def test_04_a_tampered_canary_is_blocked_and_tampered_files_are_refused(
    platform: Platform, readme_04: Readme
) -> None:
    """A revision pointed at a changed copy: its pod refused with DigestMismatch, the rollout
    Blocked with Verified=False, a VerificationFailed Event, stable still 100 %. Then the
    stable revision's own files changed: every restarted pod refused, none Ready. Then the
    README's clean-up."""
    stable = status(platform, "tfmodel", "tiny-signed")["status"]["stableRevision"]
    readme_04.run(5)

    def blocked() -> dict[str, Any] | None:
        model = status(platform, "tfmodel", "tiny-signed")
        refused = condition(model, "Verified")
        phase = model["status"].get("rollout", {}).get("phase")
        return model if phase == "Blocked" and refused.get("status") == "False" else None

    model = wait_for("the tampered canary Blocked", blocked, timeout=180, every=2)
    assert condition(model, "Verified")["reason"] == "DigestMismatch", model["status"]
    weights = {r["name"]: r["weight"] for r in model["status"]["revisions"]}
    assert weights[stable] == 100 and sum(weights.values()) == 100, weights
    canary = [p for p in pods_of(platform, "tiny-signed")
              if p["metadata"]["labels"][labels.REVISION] != stable]  # fmt: skip
    for pod in canary:
        seen = pod_verdict(pod)
        assert seen is None or (seen.reason == "DigestMismatch" and not pod_ready(pod)), seen
    assert "VerificationFailed" in readme_04.run(3)

    old = {p["metadata"]["uid"] for p in pods_of(platform, "tiny-signed")}
    readme_04.run(6)  # change the stable revision's files, restart its pods

    def refused() -> list[dict[str, Any]] | None:
        fresh = [p for p in pods_of(platform, "tiny-signed") if p["metadata"]["uid"] not in old]
        judged = [p for p in fresh if pod_verdict(p) is not None]
        return judged if len(judged) >= 3 and len(judged) == len(fresh) else None

    for pod in wait_for("the restarted pods refused", refused, timeout=180, every=2):
        seen = pod_verdict(pod)
        assert seen is not None and seen.reason == "DigestMismatch", seen
        assert "Hash mismatch for 'config.json'" in seen.message, seen
        assert not pod_ready(pod), pod["status"]

    readme_04.run(7)  # clean up
    readme_04.stop()
    wait_for("04's workers gone", lambda: not pods_of(platform, "tiny-signed"), timeout=120)


def in_order(line: str, *columns: str) -> bool:
    """Whether a table's header line names these columns, left to right."""
    at = 0
    for column in columns:
        at = line.find(column, at)
        if at < 0:
            return False
        at += len(column)
    return True


def test_05_a_quick_simulation_prints_its_documented_columns(
    platform: Platform, tmp_path: Path
) -> None:
    """The README's quick look: both policies the baseline names, side by side, with the
    columns it documents, then each run's details, and the results where it says."""
    printed = readme(platform, "05-simulations", tmp_path).run(0)
    lines = printed.splitlines()
    head = next(line for line in lines if line.startswith("scaler "))
    assert in_order(head, "scaler", "interactive SLO", "shed+timeout", "GPU-h", "x oracle", "$",
                    "$/M in", "$/M out"), head  # fmt: skip
    rows = lines[lines.index(head) + 1 : lines.index(head) + 3]
    assert [r.split()[0] for r in rows] == ["tokenfleet", "static-peak"], rows
    assert all(re.search(r" \d+\.\d\d% ", r) for r in rows), rows
    detail = [line for line in lines if line.startswith("class ")]
    assert len(detail) == 2, lines
    assert in_order(detail[0], "class", "arrived", "within SLO", "served", "shed", "timed out",
                    "failed", "TTFT p50", "TTFT p99", "ITL p99"), detail  # fmt: skip
    assert sum(line.startswith("  interactive ") for line in lines) == 2, lines
    assert (REPO / ".tokenfleet/sim/steady-10k/results.json").is_file()
    assert (REPO / ".tokenfleet/sim/steady-10k/timeline.png").is_file()


def test_06_the_plan_prints_what_the_readme_shows(platform: Platform, tmp_path: Path) -> None:
    path = EXAMPLES / "06-capacity-plan/README.md"
    printed = readme(platform, "06-capacity-plan", tmp_path).run(0)
    assert printed.rstrip("\n") == shown(path, "It prints:").rstrip("\n"), (
        "06's README shows stale output: paste the new one"
    )


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


def test_08_each_tenant_is_served_its_own_adapter_and_refused_the_other(
    platform: Platform, tmp_path: Path
) -> None:
    """Both adapters verified and Ready; acme's request answered from its adapter, globex's
    refused with 403; acme-support's status says where it is loaded and what it served; a
    changed byte in globex's adapter refused by the loading replica's sidecar (503,
    DigestMismatch), and loaded once the file is back. (That step needs a replica that has not
    loaded globex-legal yet, as on a fresh make up: nothing asks for it before.)"""
    steps = readme(platform, "08-lora-adapters", tmp_path, "ACME_KEY", "GLOBEX_KEY")
    listed = steps.run(0)  # files, apply, keys, wait for the adapters
    pinned = {
        doc["metadata"]["name"]: doc["spec"]["artifact"]["digest"]
        for doc in yaml.safe_load_all((EXAMPLES / "08-lora-adapters/adapters.yaml").read_text())
    }
    for name, digest in pinned.items():
        adapter = status(platform, "tfadapter", name)
        assert condition(adapter, "Verified")["status"] == "True", adapter["status"]
        assert condition(adapter, "Ready")["status"] == "True", adapter["status"]
        assert adapter["status"]["digest"] == digest
        assert name in listed
    answered = steps.run(1)  # acme asks for acme-support, then globex does
    *acme, globex, code = answered.splitlines()  # acme's headers and body; globex's body, code
    assert re.search(r"^x-tokenfleet-model: acme-support\r?$", "\n".join(acme), re.I | re.M), acme
    assert '"model":"acme-support"' in acme[-1].replace(" ", ""), acme
    assert code == "403" and "model_not_allowed" in globex, (globex, code)

    workers = {p["metadata"]["name"] for p in pods_of(platform, "llama-3.1-8b-base")}

    def reported() -> dict[str, Any] | None:
        s = status(platform, "tfadapter", "acme-support")["status"]
        return s if s.get("requestsServed", 0) >= 1 and s.get("loadedOn") else None

    s = wait_for("acme-support's placement and requests in status", reported, timeout=90)
    assert set(s["loadedOn"]) <= workers and s["loadedReplicas"] == len(s["loadedOn"]), s
    shown_yaml = yaml.safe_load(steps.run(2))["status"]
    assert shown_yaml["loadedOn"] and shown_yaml["requestsServed"] >= 1, shown_yaml

    # a changed byte in globex's adapter, globex asks for it; the file put back, it asks again
    refused, refused_code, served, served_code = steps.run(3).splitlines()
    assert refused_code == "503" and "DigestMismatch" in refused, refused
    assert served_code == "200" and '"model":"globex-legal"' in served, served


def prometheus_query(platform: Platform, query: str) -> list[dict[str, Any]]:
    url = f"{platform.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url) as resp:
        return list(json.load(resp)["data"]["result"])


def test_09_chat_auto_routes_by_rule_once_its_models_are_served(
    platform: Platform, tmp_path: Path
) -> None:
    """The route alone: Ready=False TargetNotFound naming both targets, RemotesReady=True (make
    up made the remotes' key Secrets), and a request refused with 503 route_target_not_found.
    With models/ served: Ready=True TargetsFound; a short question, a hard one and one with a
    tool go to chat-small, chat-large, chat-large by rules short-without-tools, hard-prompts and
    the default, as the headers and the decision counter say. The README's training command
    rewrites the shipped classifier byte for byte. The "Elsewhere" block (key Secrets and a
    helm upgrade for another cluster) is not for make up's platform and is not run."""
    steps = readme(platform, "09-model-routes", tmp_path)
    assert "chat-auto" in steps.run(0)  # the classifier and the route

    def route(kind: str) -> dict[str, Any]:
        return condition(status(platform, "tfroute", "chat-auto"), kind)

    ready = wait_for("chat-auto reported", lambda: route("Ready").get("reason") and route("Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound"), ready
    assert "chat-large, chat-small" in ready["message"], ready
    remotes = route("RemotesReady")
    assert (remotes["status"], remotes["reason"]) == ("True", "KeysFound"), remotes
    refused = wait_for(
        "the gateway to know the route",
        lambda: "route_target_not_found" in (out := steps.run(1)) and out,
        timeout=60,
        every=2,
    )
    assert "chat-auto/short-without-tools" in refused, refused

    steps.run(2)  # serve chat-small and chat-large; wait until both are Available
    ready = wait_for(
        "chat-auto Ready", lambda: route("Ready").get("status") == "True" and route("Ready")
    )
    assert ready["reason"] == "TargetsFound", ready
    assert ready["message"] == "routes to chat-large, chat-small", ready

    lines = [line.strip().lower() for line in steps.run(3).splitlines()]
    answers = [dict(h.split(": ", 1) for h in lines[i : i + 2]) for i in range(0, len(lines), 2)]
    assert answers == [
        {"x-tokenfleet-route": "chat-auto/short-without-tools", "x-tokenfleet-model": "chat-small"},
        {"x-tokenfleet-route": "chat-auto/hard-prompts", "x-tokenfleet-model": "chat-large"},
        {"x-tokenfleet-route": "chat-auto/default", "x-tokenfleet-model": "chat-large"},
    ], lines

    def counted() -> set[tuple[str, str]] | None:
        found = prometheus_query(
            platform, 'tokenfleet_gateway_route_decisions_total{route="chat-auto"} > 0'
        )
        seen = {(r["metric"]["rule"], r["metric"]["target"]) for r in found}
        return seen if len(seen) >= 3 else None

    decided = wait_for("the route's decisions in Prometheus", counted, timeout=30, every=1)
    assert {
        ("short-without-tools", "chat-small"),
        ("hard-prompts", "chat-large"),
        ("default", "chat-large"),
    } <= decided, decided
    classifier = prometheus_query(
        platform, 'tokenfleet_gateway_route_classifier_ready{route="chat-auto"}'
    )
    assert classifier and all(r["value"][1] == "1" for r in classifier), classifier

    shipped = (EXAMPLES / "09-model-routes/classifier-configmap.yaml").read_bytes()
    trained = steps.run(5)  # tokenfleet route train-classifier, into the shipped file
    recorded = json.loads(yaml.safe_load(shipped)["data"]["weights.json"])["about"]["heldOut"]
    assert recorded in trained.splitlines(), (recorded, trained)
    assert (EXAMPLES / "09-model-routes/classifier-configmap.yaml").read_bytes() == shipped

    steps.run(6)  # clean up


# --- the platform as a whole, after the journeys ------------------------------------------------


def test_every_target_is_up_on_loopback_or_the_bridge(platform: Platform) -> None:
    """Every target of the shipped jobs is scraped on loopback or the bridge, and every one
    whose pod runs is up. The journeys just created and deleted pods: a target still being
    discovered (health unknown) or whose pod is gone is not judged, and discovery gets a
    minute to settle."""

    def targets() -> list[dict[str, Any]]:
        url = f"{platform.prometheus}/api/v1/targets?state=active"
        with urllib.request.urlopen(url) as resp:
            return list(json.load(resp)["data"]["activeTargets"])

    def running() -> set[tuple[str, str]]:
        pods = kubectl(platform, "get", "pods", "-A", "-o", "json")["items"]
        return {
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in pods
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        }

    last: list[tuple[str, str, str]] = []

    def settled() -> list[dict[str, Any]] | None:
        found, alive = targets(), running()
        judged = [
            t
            for t in found
            if t["health"] != "unknown"
            and (t["labels"].get("namespace"), t["labels"].get("pod")) in alive
        ]
        last[:] = [
            (t["labels"]["job"], t["scrapeUrl"], t["lastError"])
            for t in judged
            if t["health"] != "up"
        ]
        return None if last else found

    try:
        found = wait_for("every running target up", settled, timeout=60, every=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; down: {last}") from None
    jobs = {t["labels"]["job"] for t in found}
    assert {"vllm", "tokenfleet-gateway", "tokenfleet-operator"} <= jobs, jobs
    for t in found:
        host = t["scrapeUrl"].split("//")[1].split(":")[0]
        assert host.startswith(("127.", "10.250.0.")), (t["labels"]["job"], t["scrapeUrl"])


def test_nothing_dialled_the_machines_own_address(watch: netwatch.TcpWatch) -> None:
    """Last: every connection of the whole module, in every network namespace."""
    assert watch.samples > 10
    assert not watch.seen, sorted(watch.seen, key=str)
