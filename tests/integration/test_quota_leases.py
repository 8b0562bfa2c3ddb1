"""Quota leases against a real Redis (gateway.quota_store, policy.leases): fewer round trips,
one shared limit held exactly across replicas, and every unspent share back in Redis when a
tenant goes quiet, when a replica stops, or (for the per-minute buckets) by refill when it dies.

Two QuotaStore objects stand for two gateway replicas (each the whole of one process's quota
state); the Redis balances are read directly.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from support.gateway import Redis
from tokenfleet.gateway import redis_client
from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.quota_store import HOUSEKEEPING_SECONDS, QuotaStore, Reservation

_tenants = itertools.count()


def tenant() -> str:
    return f"leased-{next(_tenants)}"


async def levels(url: str, name: str, limits: quotas.Limits) -> tuple[float, float, int]:
    """The shared balances as of now (Redis's clock, the script's refill): requests and tokens
    left this minute, tokens used today."""
    client = redis_client.RespClient(url, timeout=5.0)
    try:
        day, _ = quotas.day_of(time.time())
        rpm_key, tpm_key, tpd_key, _ = quotas.keys(name, day)
        seconds, micros = await client.call("TIME")
        now = float(seconds) + float(micros) / 1e6
        found = []
        for key, cap in (
            (rpm_key, limits.requests_per_minute),
            (tpm_key, limits.tokens_per_minute),
        ):
            level, at = await client.call("HMGET", key, "level", "at")
            if cap is None or level is None:
                found.append(float(cap or 0))
            else:
                found.append(min(cap, float(level) + (now - float(at)) * cap / 60))
        used = await client.call("GET", tpd_key)
        return found[0], found[1], int(used or 0)
    finally:
        await client.close()


async def serve(
    store: QuotaStore, name: str, limits: quotas.Limits, *, tokens: int, used: int
) -> bool:
    """One request: reserved, then settled with ``used`` tokens; whether it was admitted."""
    taken = await store.reserve(name, limits, tokens)
    if isinstance(taken, Rejected):
        return False
    assert isinstance(taken, Reservation)
    await store.settle(taken, used)
    return True


def test_a_busy_tenant_costs_one_round_trip_per_lease_and_none_to_settle(redis: Redis) -> None:
    limits = quotas.Limits(requests_per_minute=6000, tokens_per_minute=1_000_000)

    async def run() -> int:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        try:
            name = tenant()
            assert all([await serve(store, name, limits, tokens=100, used=60) for _ in range(40)])
            return store.calls
        finally:
            await store.close()

    calls = asyncio.run(run())
    # 40 requests: 2 round trips each without leases; the refunds make the tokens go further
    assert calls <= 40 // leases.REQUESTS_PER_LEASE, calls


def test_two_replicas_hold_one_shared_limit_exactly(redis: Redis) -> None:
    """Both replicas draw on one RPM of 100 at once: never more than 100 admitted (plus what
    refills meanwhile), and leases are not a reason to refuse while the limit has room."""
    limits = quotas.Limits(requests_per_minute=100, tokens_per_minute=1_000_000)

    async def run() -> tuple[int, float]:
        a, b = (QuotaStore(url=redis.url, failure="open", replicas=2) for _ in range(2))
        name = tenant()
        started = time.monotonic()
        try:
            admitted = 0
            for i in range(300):
                admitted += await serve(a if i % 2 else b, name, limits, tokens=10, used=10)
            return admitted, time.monotonic() - started
        finally:
            await a.close()
            await b.close()

    admitted, took = asyncio.run(run())
    refilled = took * 100 / 60
    assert 100 <= admitted <= 100 + refilled + 1, (admitted, took)


def test_an_idle_share_goes_back_and_a_stop_returns_everything(redis: Redis) -> None:
    limits = quotas.Limits(requests_per_minute=600, tokens_per_minute=100_000, tokens_per_day=10**7)

    async def run() -> None:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            assert await serve(store, name, limits, tokens=1000, used=400)
            requests, tokens, today = await levels(redis.url, name, limits)
            assert requests <= 600 - leases.REQUESTS_PER_LEASE + 1  # a lease of several
            assert today > 400 and tokens < 100_000 - 400  # more than the one request used
            # quiet for IDLE_SECONDS (and a housekeeping beat): the unspent share is back
            await asyncio.sleep(leases.IDLE_SECONDS + 2 * HOUSEKEEPING_SECONDS)
            requests, tokens, today = await levels(redis.url, name, limits)
            assert today == 400 and tokens == pytest.approx(100_000, abs=1)
            assert requests == pytest.approx(600, abs=1)
            # busy again, then stopped: close() gives the share back at once
            assert await serve(store, name, limits, tokens=1000, used=300)
        finally:
            await store.close()
        _, _, today = await levels(redis.url, name, limits)
        assert today == 700

    asyncio.run(run())


def test_a_replica_that_dies_loses_at_most_its_share(redis: Redis) -> None:
    """No close (SIGKILL): the per-minute buckets refill the share by themselves; tokens per
    day keep it for the day, at most SHARE_OF_DAY of the limit."""
    tpd = 10_000_000
    limits = quotas.Limits(requests_per_minute=600, tokens_per_day=tpd)

    async def run() -> tuple[float, int]:
        name = tenant()
        dead = QuotaStore(url=redis.url, failure="open", replicas=1)
        assert await serve(dead, name, limits, tokens=500, used=500)
        if dead._housekeeping is not None:
            dead._housekeeping.cancel()  # it never runs again
        await asyncio.sleep(leases.SHARE_OF_LIMIT * 60 * leases.REQUESTS_PER_LEASE / 60 + 0.5)
        requests, _, today = await levels(redis.url, name, limits)
        return requests, today

    requests, today = asyncio.run(run())
    assert requests == pytest.approx(600, abs=1)  # refilled
    assert 500 <= today <= 500 + leases.SHARE_OF_DAY * tpd


def test_a_tenant_with_a_concurrency_limit_is_counted_per_request(redis: Redis) -> None:
    limits = quotas.Limits(requests_per_minute=6000, max_concurrent=1)

    async def run() -> tuple[bool, bool, int]:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            first = await store.reserve(name, limits, 10)
            second = await store.reserve(name, limits, 10)  # the one slot is taken
            assert isinstance(first, Reservation)
            await store.settle(first, 10)
            return (
                isinstance(second, Rejected),
                await serve(store, name, limits, tokens=10, used=10),
                store.calls,
            )
        finally:
            await store.close()

    refused, then_admitted, calls = asyncio.run(run())
    assert refused and then_admitted and calls == 5  # reserve ×3 (one refused), settle ×2
