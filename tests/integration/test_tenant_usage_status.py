"""Tenant status from real usage: a real gateway serves a tenant, the local stack's Prometheus
scrapes the gateway's usage counters, and the operator (its own service account, no grant added)
writes this period's requests and tokens and the budget's state into Tenant.status on the real
API server — the BudgetExceeded condition included once a Notify budget is spent."""

from __future__ import annotations

import http.client
import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from support.cluster import Cluster, scraped, wait_for
from support.gateway import key_hash, running, start_gateway, start_sim
from support.objects import manifest
from support.operator import SA, SA_NAMESPACE

KEY = "tfk-usage-" + "0" * 30
REQUESTS = 8
BUDGET_TOKENS = 200  # each answer is 20 tokens plus the prompt: spent within the requests


def call(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "count my tokens please"}],
        "max_tokens": 20,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
    response = conn.getresponse()
    assert response.status == 200, response.read()
    response.read()
    conn.close()


def prometheus(cluster: Cluster, promql: str) -> Any:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{cluster.info['prometheus']}/api/v1/query?{query}") as r:
        return json.loads(r.read())["data"]["result"]


def status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return cluster.get("tftenant", "team", "-n", ns).get("status") or {}


def test_usage_and_budget_state_reach_tenant_status(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path
) -> None:
    budget = {"period": "Daily", "tokens": BUDGET_TOKENS, "action": "Notify"}
    spec = {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": ["*"], "budget": budget}
    cluster.apply(manifest("Tenant", "team", ns, spec))
    sim = start_sim(tmp_path, "m", "--max-num-seqs", "4")
    config = {
        "models": [{"name": "m", "endpoints": [sim.url]}],
        # the key the operator reads the counters by: namespace/name, as the catalog names it
        "tenants": [
            {"name": f"{ns}/team", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}
        ],
    }
    try:
        with (
            running(start_gateway(tmp_path, config)) as g,
            scraped(cluster, job="tokenfleet-gateway", port=g.port),
        ):
            for _ in range(REQUESTS):
                call(g.port)

            def reported() -> bool:
                usage = status(cluster, ns).get("usage") or {}
                return REQUESTS <= usage.get("requests", 0) <= REQUESTS + 1

            try:
                wait_for("the period's usage in Tenant.status", reported, timeout=90)
            except AssertionError as exc:
                seen = prometheus(cluster, "tokenfleet_usage_requests_total")
                raise AssertionError(
                    f"{exc}; status {status(cluster, ns)}; scraped {seen}"
                ) from exc
    finally:
        sim.kill()
    got = status(cluster, ns)
    usage = got["usage"]
    assert usage["periodStart"].endswith("T00:00:00Z")
    # increase() extrapolates a little past the samples; the engine's answers are exact
    assert REQUESTS * 20 <= usage["completionTokens"] <= (REQUESTS + 1) * 20, usage
    assert usage["promptTokens"] > 0
    assert got["budget"]["state"] == "Exhausted" and got["budget"]["usedPercent"] >= 100
    spent = next(c for c in got["conditions"] if c["type"] == "BudgetExceeded")
    assert (spent["status"], spent["reason"]) == ("True", "BudgetSpent")


def test_the_operator_needs_no_redis_and_no_new_grant(cluster: Cluster, operator: Any) -> None:
    """Its account reads Tenant and writes status as before; it still cannot read a Secret."""
    who = ["--as", f"system:serviceaccount:{SA_NAMESPACE}:{SA}", "-A"]
    for args, allowed in (
        (["patch", "tenants.tokenfleet.io", "--subresource=status"], "yes"),
        (["patch", "tenants.tokenfleet.io"], "no"),
        (["get", "secrets"], "no"),
    ):
        answer = cluster.kubectl("auth", "can-i", *args, *who, check=False)
        assert answer.stdout.strip() == allowed, (args, answer.stdout, answer.stderr)
