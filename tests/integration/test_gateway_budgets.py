"""Budgets and the usage ledger end to end: two real gateway replicas sharing a real Redis, a
real simulated vLLM per model, the real openai SDK. Each action at its limit — Reject (429 with
the reset time, across replicas), Downgrade (the cheaper model serves, a header says so),
Notify (served, a header says so) — and the ledger agrees with what the clients received,
across a gateway restart. The same three actions for currency budgets, priced per pool from
spec.cost: reserved at the dearest price, settled at the price of the pool that served."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from support.gateway import (
    Gateway,
    Redis,
    Sim,
    key_hash,
    ledger_entries,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.accounting import budget
from tokenfleet.gateway import budget_store, redis_client

TOKEN_TENANTS = ("rejecting", "downgrading", "notified")
MONEY_TENANTS = ("paying-rejecting", "paying-downgrading", "paying-notified")
KEYS = {t: f"tfk-{t}-" + "0" * 30 for t in TOKEN_TENANTS + MONEY_TENANTS}
DOWNGRADE, BUDGET = "X-TokenFleet-Downgraded-From", "X-TokenFleet-Budget"
MESSAGES: Any = [{"role": "user", "content": "Say something about budgets."}]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-budgets")


@pytest.fixture(scope="module")
def sims(tmp: Path) -> Iterator[dict[str, Sim]]:
    made = {m: start_sim(tmp, m, "--max-num-seqs", "8") for m in ("big-model", "small-model")}
    yield made
    for s in made.values():
        s.kill()


def _config(sims: dict[str, Sim]) -> dict[str, Any]:
    # ~26 tokens reserved per request (prompt estimate + max_tokens 16): 60 tokens allow 2.
    budgets = {
        "rejecting": {"tokens": 60, "action": "Reject", "period": "Daily"},
        "downgrading": {"tokens": 60, "action": "Downgrade", "downgradeTo": "small-model"},
        "notified": {"tokens": 60, "action": "Notify"},
    }
    return {
        "models": [{"name": m, "endpoints": [s.url], "pool": "gpus"} for m, s in sims.items()],
        "pools": [{"name": "gpus"}],
        "tenants": [
            {"name": t, "apiKeyHashes": [key_hash(k)], "allowedModels": ["*"], "budget": budgets[t]}
            for t, k in KEYS.items()
            if t in budgets
        ],
    }


def _ask_all(gateways: tuple[Gateway, Gateway], tenant: str, header: str) -> list[Any]:
    """Ask on alternating replicas until ``header`` says the budget acted (at most 12)."""
    replies = []
    for i in range(12):
        replies.append(_ask(gateways[i % 2], tenant))
        if replies[-1].headers.get(header):
            break
    return replies


def _ask(g: Gateway, tenant: str) -> Any:
    c = openai.OpenAI(base_url=g.url + "/v1", api_key=KEYS[tenant], max_retries=0)
    return c.chat.completions.with_raw_response.create(
        model="big-model", messages=MESSAGES, max_tokens=16
    )


def _used(reply: Any) -> int:
    body = reply.parse()
    return int(body.usage.prompt_tokens + body.usage.completion_tokens)


def _spend_until_refused(
    gateways: tuple[Gateway, ...], tenant: str
) -> tuple[list[Any], openai.RateLimitError | None]:
    """Ask through the replicas in turn (the budget spans them) until one refuses."""
    replies: list[Any] = []
    for i in range(12):
        try:
            replies.append(_ask(gateways[i % len(gateways)], tenant))
        except openai.RateLimitError as exc:
            return replies, exc
    return replies, None


def test_each_budget_action_across_replicas_and_the_ledger(
    tmp: Path, redis: Redis, sims: dict[str, Sim]
) -> None:
    config = _config(sims)
    with (
        running(start_gateway(tmp, config, "--redis", redis.url)) as a,
        running(start_gateway(tmp, config, "--redis", redis.url)) as b,
    ):
        replies, refused = _spend_until_refused((a, b), "rejecting")
        rejecting_used, rejecting_served = sum(_used(r) for r in replies), len(replies)
        for tenant, header in (("downgrading", DOWNGRADE), ("notified", BUDGET)):
            replies += _ask_all((a, b), tenant, header)
    assert refused is not None and rejecting_served >= 1
    # Never overspent across replicas: what was served fits the limit (60 tokens).
    assert rejecting_used <= 60
    assert refused.response.status_code == 429
    assert "resets at" in refused.message and "daily budget of 60 tokens" in refused.message
    assert int(refused.response.headers["Retry-After"]) >= 1
    downgraded = [r for r in replies if r.headers.get(DOWNGRADE)]
    assert downgraded and all(r.parse().model == "small-model" for r in downgraded)
    assert all(r.headers[DOWNGRADE] == "big-model" for r in downgraded)
    assert replies[-1].headers.get(BUDGET) == "exceeded"  # Notify: served as asked, told so
    assert replies[-1].parse().model == "big-model"
    # After both gateways stopped (a restart: nothing but Redis remains), the ledger holds
    # exactly what the clients were told they used.
    entries = ledger_entries(redis.url)
    assert sum(e.requests for e in entries if e.outcome == "served") == len(replies)
    told = sum(_used(r) for r in replies)
    assert sum(e.prompt_tokens + e.completion_tokens for e in entries) == told
    assert {e.model for e in entries if e.tenant.endswith("downgrading")} >= {"small-model"}


# Per million tokens, so one token costs this many micro-USD: big-model's pool is 10× dearer.
PRICES = {"big-model": (1000.0, 4000.0), "small-model": (100.0, 400.0)}
AMOUNT = 0.2  # USD: ~74,000 micro-USD reserved per big-model request (~10 prompt + 16 × 4000)


def _money_config(sims: dict[str, Sim]) -> dict[str, Any]:
    budgets = {
        "paying-rejecting": {"amount": AMOUNT, "action": "Reject", "period": "Daily"},
        "paying-downgrading": {
            "amount": AMOUNT,
            "action": "Downgrade",
            "downgradeTo": "small-model",
        },
        "paying-notified": {"amount": AMOUNT, "action": "Notify"},
    }
    pools = [
        {
            "name": f"{m}-gpus",
            "cost": {"perGpuHour": 1, "perMillionInputTokens": i, "perMillionOutputTokens": o},
        }
        for m, (i, o) in PRICES.items()
    ]
    return {
        "models": [{"name": m, "endpoints": [s.url], "pool": f"{m}-gpus"} for m, s in sims.items()],
        "pools": pools,
        "tenants": [
            {"name": t, "apiKeyHashes": [key_hash(KEYS[t])], "allowedModels": ["*"], "budget": b}
            for t, b in budgets.items()
        ],
    }


def _price(reply: Any) -> int:
    """What the client was told it used, priced where it was served, in micro-USD."""
    body = reply.parse()
    per_input, per_output = PRICES[body.model]
    return math.ceil(
        body.usage.prompt_tokens * per_input + body.usage.completion_tokens * per_output
    )


def _budget_count(url: str, tenant: str, spec: dict[str, Any]) -> int:
    """The tenant's budget counter in Redis: what every replica reserved and settled."""
    import datetime

    async def read() -> int:
        client = redis_client.RespClient(url, timeout=2)
        period = budget.period_of(
            spec.get("period", "Monthly"), datetime.datetime.now(datetime.UTC)
        )
        try:
            return int(await client.call("GET", budget_store.key(tenant, period, "USD")) or 0)
        finally:
            await client.close()

    return asyncio.run(read())


def test_each_currency_budget_action_across_replicas(
    tmp: Path, redis: Redis, sims: dict[str, Sim]
) -> None:
    config = _money_config(sims)
    with (
        running(start_gateway(tmp, config, "--redis", redis.url)) as a,
        running(start_gateway(tmp, config, "--redis", redis.url)) as b,
    ):
        rejecting, refused = _spend_until_refused((a, b), "paying-rejecting")
        downgrading = _ask_all((a, b), "paying-downgrading", DOWNGRADE)
        notified = _ask_all((a, b), "paying-notified", BUDGET)
    assert refused is not None and len(rejecting) >= 1
    limit = round(AMOUNT * 1e6)
    assert sum(_price(r) for r in rejecting) <= limit  # never overspent across replicas
    assert refused.response.status_code == 429
    error = refused.response.json()["error"]
    assert error["type"] == "insufficient_quota"
    assert error["message"].startswith("daily budget of 0.20 USD is spent; it resets at ")
    assert error["message"].endswith("T00:00:00Z")
    assert int(refused.response.headers["Retry-After"]) >= 1
    # Downgrade: once spent, the cheaper model serves and the header names the one asked for.
    last = downgrading[-1]
    assert last.headers[DOWNGRADE] == "big-model" and last.parse().model == "small-model"
    assert all(not r.headers.get(DOWNGRADE) for r in downgrading[:-1])
    # Notify: served as asked, past the limit, told so.
    assert notified[-1].headers.get(BUDGET) == "exceeded"
    assert notified[-1].parse().model == "big-model"
    # Settled at the actual: each counter is what its replies cost where they were served
    # (the reservations' worst case given back), across both replicas; a refusal took nothing.
    for tenant, replies in (
        ("paying-rejecting", rejecting),
        ("paying-downgrading", downgrading),
        ("paying-notified", notified),
    ):
        spec = next(t["budget"] for t in config["tenants"] if t["name"] == tenant)
        assert _budget_count(redis.url, tenant, spec) == sum(_price(r) for r in replies), tenant
    assert sum(_price(r) for r in downgrading[:-1]) > 0  # priced: big-model's tokens counted
