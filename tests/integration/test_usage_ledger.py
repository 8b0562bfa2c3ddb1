"""The durable usage ledger against a real redis-server: what one gateway process recorded is
read back by another (a restart loses nothing settled), entries recorded while Redis is down
are written once it is back, and the Prometheus counters agree with the ledger."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from support.gateway import Redis, free_port
from tokenfleet.gateway import redis_client, usage_ledger
from tokenfleet.signals import usage

NOW = datetime.datetime(2026, 12, 1, 11, 20, tzinfo=datetime.UTC)


@pytest.fixture()
def redis(tmp_path: Path) -> Iterator[Redis]:
    r = Redis(port=free_port(), log=tmp_path / "redis.log")
    r.start()
    yield r
    r.kill()


async def _record_mix(ledger: usage_ledger.UsageLedger) -> None:
    await ledger.record(
        tenant="t/a",
        model="m",
        pool="t/p",
        outcome="served",
        prompt_tokens=100,
        cached_prompt_tokens=64,
        completion_tokens=20,
        now=NOW,
    )
    await ledger.record(
        tenant="t/a",
        model="m",
        pool="t/p",
        outcome="served",
        prompt_tokens=50,
        completion_tokens=10,
        now=NOW,
    )
    await ledger.record(
        tenant="t/b",
        model="m",
        pool="t/p",
        outcome="cancelled",
        prompt_tokens=3000,
        completion_tokens=7,
        now=NOW,
    )


async def _read(url: str) -> list[usage.Entry]:
    client = redis_client.RespClient(url, timeout=2)
    try:
        hours = await usage_ledger.read(client, since=NOW, until=NOW)
        return [e for _, entries in hours for e in entries]
    finally:
        await client.close()


def test_a_new_process_reads_what_the_last_one_recorded(redis: Redis) -> None:
    async def scenario() -> tuple[list[usage.Entry], float]:
        registry = CollectorRegistry()
        ledger = usage_ledger.UsageLedger(redis.url, registry=registry)
        await _record_mix(ledger)
        await ledger.close()  # the gateway process ends; only Redis remains
        counted = registry.get_sample_value(
            usage.USAGE_PROMPT_TOKENS,
            {"tenant": "t/a", "model": "m", "pool": "t/p", "outcome": "served"},
        )
        return await _read(redis.url), counted or 0.0

    entries, counted = asyncio.run(scenario())
    assert entries == [
        usage.Entry(
            tenant="t/a",
            model="m",
            pool="t/p",
            outcome="served",
            requests=2,
            prompt_tokens=150,
            cached_prompt_tokens=64,
            completion_tokens=30,
        ),
        usage.Entry(
            tenant="t/b",
            model="m",
            pool="t/p",
            outcome="cancelled",
            requests=1,
            prompt_tokens=3000,
            completion_tokens=7,
        ),
    ]
    assert counted == 150  # Prometheus and the ledger agree


def test_entries_wait_for_redis_and_land_once(tmp_path: Path) -> None:
    port = free_port()
    down = Redis(port=port, log=tmp_path / "redis.log")

    async def scenario() -> list[usage.Entry]:
        ledger = usage_ledger.UsageLedger(down.url, registry=CollectorRegistry())
        await _record_mix(ledger)  # Redis is not running: nothing raises, all three wait
        down.start()
        assert await ledger.flush()
        await ledger.close()
        return await _read(down.url)

    try:
        entries = asyncio.run(scenario())
    finally:
        down.kill()
    assert [(e.tenant, e.requests) for e in entries] == [("t/a", 2), ("t/b", 1)]
