"""Tenant status from real usage: a real gateway serves a tenant, the local stack's Prometheus
scrapes the gateway's usage counters, and the operator (its own service account, no grant added)
writes this period's requests and tokens and the budget's state into Tenant.status on the real
API server — the BudgetExceeded condition included once a Notify budget is spent. Priced: a
currency budget's limit, spent and remaining and the period's cost, at the InferencePool's
spec.cost; lastUsed from the gateway's last-served gauge; and the printer columns showing them."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.cluster import Cluster, scraped, wait_for
from support.gateway import Gateway, key_hash, running, start_gateway, start_sim
from support.objects import manifest
from support.operator import SA, SA_NAMESPACE
from tokenfleet.accounting import cost

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


@contextlib.contextmanager
def serving_team(
    cluster: Cluster, ns: str, tmp_path: Path, budget: dict[str, Any], pool: str = ""
) -> Iterator[Gateway]:
    """Tenant ``team`` (with ``budget``) served model ``m`` by a gateway that the stack's
    Prometheus scrapes; ``pool`` names the (priced) pool the model's engine belongs to."""
    spec = {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": ["*"], "budget": budget}
    cluster.apply(manifest("Tenant", "team", ns, spec))
    sim = start_sim(tmp_path, "m", "--max-num-seqs", "4")
    model: dict[str, Any] = {"name": "m", "endpoints": [sim.url]}
    config: dict[str, Any] = {
        "models": [{**model, "pool": f"{ns}/{pool}"} if pool else model],
        # the key the operator reads the counters by: namespace/name, as the catalog names it
        "tenants": [
            {"name": f"{ns}/team", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}
        ],
    }
    if pool:
        config["pools"] = [{"name": f"{ns}/{pool}", "cost": PRICES}]
    try:
        with (
            running(start_gateway(tmp_path, config)) as g,
            scraped(cluster, job="tokenfleet-gateway", port=g.port),
        ):
            yield g
    finally:
        sim.kill()


def test_usage_and_budget_state_reach_tenant_status(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path
) -> None:
    budget = {"period": "Daily", "tokens": BUDGET_TOKENS, "action": "Notify"}
    with serving_team(cluster, ns, tmp_path, budget) as g:
        for _ in range(REQUESTS):
            call(g.port)

        def reported() -> bool:
            usage = status(cluster, ns).get("usage") or {}
            return REQUESTS <= usage.get("requests", 0) <= REQUESTS + 1

        try:
            wait_for("the period's usage in Tenant.status", reported, timeout=90)
        except AssertionError as exc:
            seen = prometheus(cluster, "tokenfleet_usage_requests_total")
            raise AssertionError(f"{exc}; status {status(cluster, ns)}; scraped {seen}") from exc
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


# 1,000 USD per million prompt tokens, 5,000 per million output: 20 output tokens = 0.10 USD, so
# eight answers spend a 0.50 USD budget.
PRICES = {"perGpuHour": 1, "perMillionInputTokens": 1000, "perMillionOutputTokens": 5000}
RATE = cost.Rate(input_per_million=1000, output_per_million=5000)


def _epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def test_cost_currency_budget_and_last_use_reach_tenant_status(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path
) -> None:
    # The pool the gateway serves from, priced; no model claims it, so it runs no workers.
    pool = {"replicas": {"min": 0, "max": 1}, "warm": {"perZone": 0}, "cost": PRICES}
    cluster.apply(manifest("InferencePool", "priced", ns, pool))
    budget = {"period": "Daily", "amount": 0.5, "action": "Notify"}
    with serving_team(cluster, ns, tmp_path, budget, pool="priced") as g:
        started = time.time()
        for _ in range(REQUESTS - 1):
            call(g.port)
        before_last = time.time()
        call(g.port)
        finished = time.time()

        def reported() -> bool:
            got = status(cluster, ns)
            usage, last = got.get("usage") or {}, got.get("lastUsed")
            return (
                REQUESTS <= usage.get("requests", 0) <= REQUESTS + 1
                and bool(usage.get("cost"))
                and last is not None
                and _epoch(last) >= int(before_last)
            )

        try:
            wait_for("the period's cost and last use in Tenant.status", reported, timeout=90)
        except AssertionError as exc:
            seen = prometheus(cluster, "tokenfleet_usage_last_served_timestamp_seconds")
            raise AssertionError(f"{exc}; status {status(cluster, ns)}; {seen}") from exc
        columns = cluster.kubectl("get", "tftenant", "team", "-n", ns, "-o", "wide").stdout
    got = status(cluster, ns)
    usage, spent = got["usage"], got["budget"]
    assert REQUESTS * 20 <= usage["completionTokens"] <= (REQUESTS + 1) * 20, usage
    # The cost is the period's tokens at the pool's price (one pool: no allocation), exact.
    micro = cost.micro(
        prompt_tokens=usage["promptTokens"], completion_tokens=usage["completionTokens"], rate=RATE
    )
    assert usage["cost"] == cost.money(micro, "USD") and micro > 800_000  # 8 × 20 × 5,000
    assert (spent["limit"], spent["spent"], spent["remaining"]) == (
        "0.50 USD",
        usage["cost"],
        "0.00 USD",
    )
    assert spent["state"] == "Exhausted" and spent["usedPercent"] == micro * 100 // 500_000
    assert spent["resetsAt"].endswith("T00:00:00Z")
    exceeded = next(c for c in got["conditions"] if c["type"] == "BudgetExceeded")
    assert (exceeded["status"], exceeded["reason"]) == ("True", "BudgetSpent")
    # lastUsed: when the last answer settled, to the second.
    assert int(before_last) <= _epoch(got["lastUsed"]) <= finished, (got["lastUsed"], started)
    header, row = columns.splitlines()[:2]
    names = "NAME CLASS KEYS TPM BUDGET SPENT COST MODELS LAST-USED READY AGE"
    assert header.split() == names.split(), header
    assert "Exhausted" in row.split() and usage["cost"].split()[0] in row.split(), row
