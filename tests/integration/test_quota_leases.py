"""Quota leases against a real Redis (gateway.quota_store, policy.leases): fewer round trips,
one shared limit held exactly across replicas — concurrency limits too — and every unspent share
back in Redis when a tenant goes quiet, when a replica stops, or (for the per-minute buckets) by
refill when it dies.

Two QuotaStore objects stand for two gateway replicas (each the whole of one process's quota
state); the Redis balances are read directly.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from support.gateway import Redis, free_port
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


async def running(url: str, name: str) -> tuple[int, int]:
    """The shared concurrency counter (slots taken: requests in flight plus the leases' free
    slots) and its key's time to live."""
    client = redis_client.RespClient(url, timeout=5.0)
    try:
        key = quotas.keys(name, 0)[3]
        return int(await client.call("GET", key) or 0), int(await client.call("TTL", key))
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


def test_a_tenant_with_a_small_concurrency_limit_is_counted_per_request(redis: Redis) -> None:
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


BENCH = quotas.Limits(  # bench/gateway_overhead.py's tenant
    requests_per_minute=10**8, tokens_per_minute=10**10, max_concurrent=10**6
)


def test_two_replicas_never_run_more_than_max_concurrent(redis: Redis) -> None:
    """Two replicas admit at once from one maxConcurrent of 60 (leased: 3 slots a lease at
    most): never more than 60 in flight — first flooded with requests that do not finish, then
    with requests that come and go — and once all settled and went idle, the counter is 0."""
    limit = 60
    limits = quotas.Limits(max_concurrent=limit)
    assert leases.leasable(limits, share=0.5) and leases.slot_share(limits, 0.5) == 3

    async def run() -> None:
        a, b = (QuotaStore(url=redis.url, failure="open", replicas=2) for _ in range(2))
        name = tenant()
        try:
            # a flood that never settles: at most the limit, and leases refuse no more than
            # the slots the replicas hold free (a lease's cap less one each)
            flood = await asyncio.gather(
                *((a if i % 2 else b).reserve(name, limits, 10) for i in range(3 * limit))
            )
            held = [r for r in flood if isinstance(r, Reservation)]
            assert all(r.leased for r in held)
            counted, _ = await running(redis.url, name)
            assert limit - 2 * 2 <= len(held) <= limit and len(held) <= counted <= limit
            for i, r in enumerate(flood):
                if isinstance(r, Reservation):
                    await (a if i % 2 else b).settle(r, 10)
            # requests that come and go on both replicas: a shared count of what runs
            in_flight, most = 0, 0

            async def one(store: QuotaStore, hold: float) -> None:
                nonlocal in_flight, most
                taken = await store.reserve(name, limits, 10)
                if isinstance(taken, Rejected):
                    return
                in_flight += 1
                most = max(most, in_flight)
                await asyncio.sleep(hold)
                in_flight -= 1
                await store.settle(taken, 10)

            await asyncio.gather(*(one(a if i % 3 else b, (i % 7) / 200) for i in range(600)))
            assert limit - 2 * 3 <= most <= limit, most  # reached, never passed
            # everything settled: what the replicas hold free goes back once idle
            await asyncio.sleep(leases.IDLE_SECONDS + 2 * HOUSEKEEPING_SECONDS)
            assert (await running(redis.url, name))[0] == 0
        finally:
            await a.close()
            await b.close()

    asyncio.run(run())


def test_a_leased_concurrency_limit_costs_few_round_trips(redis: Redis) -> None:
    async def run() -> tuple[int, int]:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            assert leases.leasable(BENCH, share=1.0)
            assert all([await serve(store, name, BENCH, tokens=100, used=60) for _ in range(40)])
            sequential = store.calls
            gate = asyncio.Semaphore(16)  # then 400 requests, 16 at a time

            async def one() -> bool:
                async with gate:
                    taken = await store.reserve(name, BENCH, 100)
                    assert isinstance(taken, Reservation) and taken.leased
                    await asyncio.sleep(0.001)
                    await store.settle(taken, 60)
                    return True

            assert all(await asyncio.gather(*(one() for _ in range(400))))
            counted, ttl = await running(redis.url, name)
            assert 0 < counted <= 16 + leases.REQUESTS_PER_LEASE and 0 < ttl <= 3600
            return sequential, store.calls - sequential
        finally:
            await store.close()

    sequential, concurrent = asyncio.run(run())
    # without leases: 2 round trips per request (80 and 800)
    assert sequential <= 40 // leases.REQUESTS_PER_LEASE, sequential
    # the first 16 ask at once; then one grant per REQUESTS_PER_LEASE requests
    assert concurrent <= 16 + 400 // leases.REQUESTS_PER_LEASE, concurrent


def test_a_small_concurrency_limit_frees_a_slot_for_the_other_replica_at_once(
    redis: Redis,
) -> None:
    limits = quotas.Limits(max_concurrent=3)
    assert not leases.leasable(limits, share=0.5)

    async def run() -> None:
        a, b = (QuotaStore(url=redis.url, failure="open", replicas=2) for _ in range(2))
        name = tenant()
        try:
            taken = [await a.reserve(name, limits, 1) for _ in range(3)]
            assert all(isinstance(r, Reservation) and not r.leased for r in taken)
            assert isinstance(await b.reserve(name, limits, 1), Rejected)  # all 3 run on a
            first = taken[0]
            assert isinstance(first, Reservation)
            await a.settle(first, 1)
            assert isinstance(await b.reserve(name, limits, 1), Reservation)  # at once
            assert a.calls == 4 and b.calls == 2  # per request, as without leases
            assert (await running(redis.url, name))[0] == 3
        finally:
            await a.close()
            await b.close()

    asyncio.run(run())


def test_a_stopping_replica_returns_its_free_slots_and_keeps_the_running_ones(
    redis: Redis,
) -> None:
    async def run() -> None:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        assert await serve(store, name, BENCH, tokens=10, used=10)
        running_one = await store.reserve(name, BENCH, 10)
        assert isinstance(running_one, Reservation) and running_one.leased
        counted, ttl = await running(redis.url, name)
        assert counted == leases.REQUESTS_PER_LEASE and 3500 < ttl <= 3600  # a lease of slots
        await store.close()
        # the free slots are back; the one still running stays counted, as without leases
        assert (await running(redis.url, name))[0] == 1

    asyncio.run(run())


def test_a_replica_that_dies_keeps_at_most_a_lease_of_slots_until_the_key_expires(
    redis: Redis,
) -> None:
    async def run() -> None:
        name = tenant()
        dead = QuotaStore(url=redis.url, failure="open", replicas=1)
        taken = await dead.reserve(name, BENCH, 10)
        assert isinstance(taken, Reservation)
        if dead._housekeeping is not None:
            dead._housekeeping.cancel()  # it never runs again, nor settles
        counted, ttl = await running(redis.url, name)
        assert counted == leases.slot_share(BENCH, 1.0) and 0 < ttl <= 3600

    asyncio.run(run())


class AppliedButTimedOut:
    """A store's lease script, except that the first ``op`` call is answered by a timeout after
    Redis ran it: what the client sees when the watchdog fails a call Redis then executes."""

    def __init__(self, script: redis_client.Script, op: str) -> None:
        self.script, self.op, self.armed = script, op, True

    async def __call__(self, keys: list[str], args: list[object]) -> object:
        answer = await self.script(keys=keys, args=args)
        if self.armed and args[0] == self.op:
            self.armed = False
            raise TimeoutError("redis did not answer in time")
        return answer


async def _warm(store: QuotaStore) -> None:
    """One request of another tenant: the connection is up, so a call is written before its
    first suspension."""
    assert await serve(store, tenant(), BENCH, tokens=10, used=10)


def test_a_grant_whose_request_left_still_lands_in_the_lease(redis: Redis) -> None:
    """The client leaves (its task is cancelled) while its grant is in flight: Redis counts the
    grant's slots, so they must reach the lease — drawn by the next request, given back at the
    end — or the tenant's maxConcurrent shrinks for as long as it stays busy."""

    async def run() -> None:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            await _warm(store)
            before = store.calls
            asking = asyncio.create_task(store.reserve(name, BENCH, 10))
            while store.calls == before:  # until the grant's EVALSHA is written
                await asyncio.sleep(0)
            asking.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asking
            await asyncio.sleep(0.05)  # Redis answers the grant meanwhile
            granted = leases.slot_share(BENCH, 1.0)
            assert (await running(redis.url, name))[0] == granted
            calls = store.calls
            assert await serve(store, name, BENCH, tokens=10, used=10)  # from the landed grant
            assert store.calls == calls
        finally:
            await store.close()
        assert (await running(redis.url, name))[0] == 0  # every slot went back

    asyncio.run(run())


def test_a_timed_out_grant_is_not_credited(redis: Redis) -> None:
    """A grant Redis ran but answered too late is not added to the lease (it may as well not
    have run): the bound holds, and its slots stay counted until the key expires."""

    async def run() -> None:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            await _warm(store)
            assert store._lease_script is not None
            store._lease_script = AppliedButTimedOut(store._lease_script, "lease")  # type: ignore[assignment]
            taken = await store.reserve(name, BENCH, 10)
            assert isinstance(taken, Reservation) and taken.local  # fail-open, not the grant
            assert not store._lease_of(name, BENCH).holds()
        finally:
            await store.close()
        assert (await running(redis.url, name))[0] == leases.slot_share(BENCH, 1.0)

    asyncio.run(run())


def test_a_give_back_redis_ran_but_answered_late_is_not_given_back_twice(redis: Redis) -> None:
    """Replica a gives its free slots back and the answer times out after Redis ran it: a must
    not give them back again, or the counter drops below what replica b holds and the replicas
    together can run more than maxConcurrent."""

    async def run() -> None:
        a, b = (QuotaStore(url=redis.url, failure="open", replicas=1) for _ in range(2))
        name = tenant()
        share = leases.slot_share(BENCH, 1.0)
        try:
            assert await serve(a, name, BENCH, tokens=10, used=10)  # a holds a lease of slots
            held = await b.reserve(name, BENCH, 10)  # b runs one and holds the rest free
            assert isinstance(held, Reservation) and held.leased
            assert (await running(redis.url, name))[0] == 2 * share
            assert a._lease_script is not None
            a._lease_script = AppliedButTimedOut(a._lease_script, "return")  # type: ignore[assignment]
            await a._give_back(lambda _lease: True)  # housekeeping: the answer times out
            await a._give_back(lambda _lease: True)  # and its next beat
            assert (await running(redis.url, name))[0] == share  # b's, counted once
            await a.close()
            assert (await running(redis.url, name))[0] == share
        finally:
            await a.close()
            await b.close()
        assert (await running(redis.url, name))[0] == 1  # b's request still runs

    asyncio.run(run())


def test_a_give_back_that_never_reached_redis_is_kept_and_given_back_later(
    redis: Redis,
) -> None:
    async def run() -> None:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        share = leases.slot_share(BENCH, 1.0)
        try:
            assert await serve(store, name, BENCH, tokens=10, used=10)
            client = store._redis
            assert client is not None and client._protocol is not None
            assert client._protocol.transport is not None
            port = client._port
            client._protocol.transport.abort()  # the connection drops, and the port refuses
            client._port = free_port()
            await asyncio.sleep(0.05)
            await store._give_back(lambda _lease: True)
            assert (await running(redis.url, name))[0] == share
            assert store._lease_of(name, BENCH).free_slots == share  # kept
            client._port = port
        finally:
            await store.close()
        assert (await running(redis.url, name))[0] == 0

    asyncio.run(run())
