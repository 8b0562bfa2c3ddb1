"""One Redis backend per gateway process, and what each store on it does while Redis is away: a
real gateway (static mode) on a real redis-server that is killed and started again on its port,
once per configured policy (``--quota-failure open`` and ``closed``), every tenant kind at once.

- quota (declared open or closed, as ``--quota-failure``): while Redis is down, 200 on local
  limits or 503 ``quota_backend_unavailable`` once the lease in hand is spent; shared again once
  it is back;
- budget (the quota's setting): 200 counted in the process, or 503 ``quota_backend_unavailable``
  with a Retry-After — never a 500; counted in Redis again once it is back;
- response cache (a miss): 200 from the engine with ``X-TokenFleet-Cache: miss``; it fills and
  hits again once Redis is back;
- usage ledger (buffer and replay): served requests wait in memory and are written, each once,
  once Redis is back.

A tenant with neither quota nor budget is served throughout, whatever the policy. A budget
tenant's stream that was admitted before Redis went and ends while it is away is settled all
the same: its tokens are counted and its usage ledger entry written once Redis is back, although
its budget hold (taken in Redis) cannot be corrected.
"""

from __future__ import annotations

import datetime
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import wait_for
from support.gateway import (
    Gateway,
    Redis,
    Sim,
    free_port,
    gateway_metric,
    key_hash,
    ledger_entries,
    open_stream,
    redis_get,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.accounting import budget
from tokenfleet.gateway import budget_store
from tokenfleet.gateway.policy import leases
from tokenfleet.signals import gateway as names

KEYS = {name: f"tfk-outage-{name}-" + "0" * 24 for name in ("quota", "budget", "plain")}
UP = "tokenfleet_gateway_quota_backend_up"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-redis-outage")


@pytest.fixture(scope="module")
def sim(tmp: Path) -> Iterator[Sim]:
    s = start_sim(tmp, "m", "--max-num-seqs", "16", "--inter-token-latency", "1ms")
    yield s
    s.kill()


@pytest.fixture(scope="module")
def slow(tmp: Path) -> Iterator[Sim]:
    """A model whose 100-token stream lasts 2 s: long enough to outlive Redis."""
    s = start_sim(tmp, "slow", "--max-num-seqs", "16", "--inter-token-latency", "20ms")
    yield s
    s.kill()


def _config(sim: Sim, slow: Sim) -> dict[str, Any]:
    specs = {
        "quota": {"quotas": {"requestsPerMinute": 1000}},
        "budget": {"budget": {"tokens": 1_000_000, "action": "Reject", "period": "Daily"}},
        "plain": {},
    }
    return {
        "models": [
            {"name": "m", "endpoints": [sim.url], "responseCache": {"enabled": True}},
            {"name": "slow", "endpoints": [slow.url]},
        ],
        "tenants": [
            {"name": t, "apiKeyHashes": [key_hash(KEYS[t])], "allowedModels": ["*"], **spec}
            for t, spec in specs.items()
        ],
    }


def _ask(g: Gateway, tenant: str, prompt: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One greedy chat request (cacheable): status, body, headers."""
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=30)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 8,
        "temperature": 0,
    }
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {KEYS[tenant]}", "Content-Type": "application/json"},
    )
    r = conn.getresponse()
    payload = json.loads(r.read() or b"{}")
    return r.status, payload, dict(r.getheaders())


def _budget_count(redis: Redis) -> int:
    period = budget.period_of("Daily", datetime.datetime.now(datetime.UTC))
    return int(redis_get(redis, budget_store.key("budget", period)) or 0)


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_every_store_keeps_its_declared_failure_mode_through_an_outage(
    tmp: Path, sim: Sim, slow: Sim, policy: str
) -> None:
    own = Redis(port=free_port(), log=tmp / f"redis-{policy}.log")
    own.start()
    served_since_outage = 0
    with running(
        start_gateway(tmp, _config(sim, slow), "--redis", own.url, "--quota-failure", policy)
    ) as g:
        for tenant in KEYS:
            assert _ask(g, tenant, f"warm {tenant}")[0] == 200
        assert _ask(g, "plain", "cached prompt")[2]["X-TokenFleet-Cache"] == "miss"
        assert _ask(g, "plain", "cached prompt")[2]["X-TokenFleet-Cache"] == "hit"
        assert _budget_count(own) > 0  # the budget counts in Redis
        time.sleep(1.0)  # the ledger has written what settled so far (to the Redis about to go)
        conn, stream = open_stream(  # admitted, its budget held in Redis: it ends in the outage
            g, KEYS["budget"], model="slow", max_tokens=100, ignore_eos=True, timeout=30
        )
        assert stream.status == 200

        own.kill()
        wait_for("the gateway to see Redis down", lambda: f"{UP} 0.0" in g.get("/metrics")[1])
        assert b"[DONE]" in stream.read()  # served to its end; settled with Redis away
        conn.close()
        served_since_outage += 1
        wait_for(
            "its tokens in the counters",
            lambda: (
                gateway_metric(g, names.COMPLETION_TOKENS, tenant="budget", model="slow") >= 100
            ),
        )

        # the response cache misses, with a 200; a tenant with neither quota nor budget is served
        status, _, headers = _ask(g, "plain", "cached prompt")
        assert status == 200 and headers["X-TokenFleet-Cache"] == "miss"
        served_since_outage += 1

        # the budget does what the quota does: open counts here, closed refuses (never a 500)
        status, payload, headers = _ask(g, "budget", "during the outage")
        if policy == "open":
            assert status == 200
            served_since_outage += 1
        else:
            assert status == 503, payload
            assert payload["error"]["code"] == "quota_backend_unavailable"
            assert int(headers["Retry-After"]) >= 1

        # the quota: the lease in hand, then the policy
        for _ in range(leases.REQUESTS_PER_LEASE + 1):
            status, payload, _ = _ask(g, "quota", "during the outage")
            if status != 200:
                break
            served_since_outage += 1
        ready_status, ready = g.get("/readyz")
        if policy == "open":
            assert status == 200
            assert ready_status == 200 and json.loads(ready)["quota_mode"] == "fail-open"
        else:
            assert status == 503 and payload["error"]["code"] == "quota_backend_unavailable"
            assert ready_status == 503 and json.loads(ready)["checks"]["quota_backend"] is False

        own.start()  # the same port: the backend's beat finds it within half a second
        wait_for("the gateway to see Redis back", lambda: f"{UP} 1.0" in g.get("/metrics")[1])
        time.sleep(2.1)  # and the stores' retry window since the last failure has passed
        for tenant in ("quota", "budget"):
            assert _ask(g, tenant, "after the outage")[0] == 200
            served_since_outage += 1
        assert _budget_count(own) > 0  # counted in Redis again (a fresh Redis: from here on)
        assert _ask(g, "plain", "a prompt after")[2]["X-TokenFleet-Cache"] == "miss"
        assert _ask(g, "plain", "a prompt after")[2]["X-TokenFleet-Cache"] == "hit"
        served_since_outage += 2
        # the ledger kept what was served while Redis was away, and wrote it once it was back
        wait_for(
            "the buffered usage entries to land",
            lambda: (
                sum(e.requests for e in ledger_entries(own.url) if e.outcome == "served")
                >= served_since_outage
            ),
            timeout=10,
        )
        assert (
            sum(e.requests for e in ledger_entries(own.url) if e.outcome == "served")
            == served_since_outage
        )
    own.kill()
    log = g.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert '"status":500' not in log
