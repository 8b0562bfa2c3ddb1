"""Budgets and the usage ledger end to end: two real gateway replicas sharing a real Redis, a
real simulated vLLM per model, the real openai SDK. Each action at its limit — Reject (429 with
the reset time, across replicas), Downgrade (the cheaper model serves, a header says so),
Notify (served, a header says so) — and the ledger agrees with what the clients received,
across a gateway restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from support.gateway import (
    Gateway,
    Redis,
    Sim,
    free_port,
    key_hash,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.gateway import redis_client, usage_ledger
from tokenfleet.signals import usage

KEYS = {t: f"tfk-{t}-" + "0" * 30 for t in ("rejecting", "downgrading", "notified")}
DOWNGRADE, BUDGET = "X-TokenFleet-Downgraded-From", "X-TokenFleet-Budget"
MESSAGES: Any = [{"role": "user", "content": "Say something about budgets."}]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-budgets")


@pytest.fixture(scope="module")
def redis(tmp: Path) -> Iterator[Redis]:
    r = Redis(port=free_port(), log=tmp / "redis.log")
    r.start()
    yield r
    r.kill()


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
        ],
    }


def _ask(g: Gateway, tenant: str) -> Any:
    c = openai.OpenAI(base_url=g.url + "/v1", api_key=KEYS[tenant], max_retries=0)
    return c.chat.completions.with_raw_response.create(
        model="big-model", messages=MESSAGES, max_tokens=16
    )


def _used(reply: Any) -> int:
    body = reply.parse()
    return int(body.usage.prompt_tokens + body.usage.completion_tokens)


def _ledger(url: str) -> list[usage.Entry]:
    async def read() -> list[usage.Entry]:
        import datetime

        client = redis_client.RespClient(url, timeout=2)
        now = datetime.datetime.now(datetime.UTC)
        try:
            hours = await usage_ledger.read(
                client, since=now - datetime.timedelta(hours=1), until=now
            )
        finally:
            await client.close()
        return usage.entries(
            dict(f for e in entries for f in usage.fields(e)) for _, entries in hours
        )

    return asyncio.run(read())


def test_each_budget_action_across_replicas_and_the_ledger(
    tmp: Path, redis: Redis, sims: dict[str, Sim]
) -> None:
    config = _config(sims)
    with (
        running(start_gateway(tmp, config, "--redis", redis.url)) as a,
        running(start_gateway(tmp, config, "--redis", redis.url)) as b,
    ):
        replies, refused = [], None
        for i in range(12):  # alternate replicas: the budget spans both
            try:
                replies.append(_ask((a, b)[i % 2], "rejecting"))
            except openai.RateLimitError as exc:
                refused = exc
                break
        rejecting_used, rejecting_served = sum(_used(r) for r in replies), len(replies)
        for tenant, header in (("downgrading", DOWNGRADE), ("notified", BUDGET)):
            for i in range(12):
                replies.append(_ask((a, b)[i % 2], tenant))
                if replies[-1].headers.get(header):
                    break
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
    entries = _ledger(redis.url)
    assert sum(e.requests for e in entries if e.outcome == "served") == len(replies)
    told = sum(_used(r) for r in replies)
    assert sum(e.prompt_tokens + e.completion_tokens for e in entries) == told
    assert {e.model for e in entries if e.tenant.endswith("downgrading")} >= {"small-model"}
