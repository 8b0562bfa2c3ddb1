"""Quota leases serving bursts, against a real Redis (gateway.quota_store, policy.leases).

The matrix: requests sent at once (asyncio.gather) to one process — requests per minute, tokens
per minute and concurrency slots; a burst within the limit, up to the whole limit, and beyond
it — and from six processes at once (3 gateway replicas × 2 workers: six spawned processes,
each with its own QuotaStore, released together by a barrier), within and beyond the limit;
and the same requests one after another, as before. A burst within the limit is admitted in
full; the limit is never exceeded (the bucket's refill while the burst runs aside: requests and
tokens here are settled as reserved, so there is no prompt-estimate overshoot); a burst costs a
round trip or two, not one per request.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from support.gateway import Redis
from support.quota_bursts import Burst, Sent, send_at_once
from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.quota_store import QuotaStore, Reservation

_tenants = itertools.count()
PROCESSES = 6  # 3 gateway replicas × 2 workers


def tenant() -> str:
    return f"burst-{next(_tenants)}"


async def at_once(
    store: QuotaStore, name: str, limits: quotas.Limits, *, size: int, tokens: int
) -> list[Reservation | Rejected]:
    return list(await asyncio.gather(*(store.reserve(name, limits, tokens) for _ in range(size))))


@pytest.mark.parametrize(
    ("limits", "size", "tokens"),
    [
        pytest.param(quotas.Limits(requests_per_minute=100), 50, 10, id="rpm-100-burst-50"),
        pytest.param(quotas.Limits(requests_per_minute=100), 100, 10, id="rpm-100-burst-100"),
        pytest.param(
            quotas.Limits(requests_per_minute=1000, tokens_per_minute=10_000),
            50,
            200,
            id="tpm-10000-burst-of-the-whole-limit",
        ),
        pytest.param(quotas.Limits(max_concurrent=60), 60, 10, id="max-concurrent-60-burst-60"),
    ],
)
def test_a_burst_within_the_limit_sent_at_once_to_one_process_is_admitted_in_full(
    redis: Redis, limits: quotas.Limits, size: int, tokens: int
) -> None:
    async def run() -> tuple[int, int]:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        try:
            taken = await at_once(store, tenant(), limits, size=size, tokens=tokens)
            held = [r for r in taken if isinstance(r, Reservation)]
            assert all(r.leased and not r.local for r in held)
            return len(held), store.calls
        finally:
            await store.close()

    admitted, calls = asyncio.run(run())
    assert admitted == size
    assert calls <= 2, calls  # one grant for the first, one for all that came meanwhile


def test_a_burst_beyond_the_limit_at_once_is_admitted_up_to_the_limit(redis: Redis) -> None:
    limits = quotas.Limits(requests_per_minute=100)

    async def run() -> tuple[int, list[Rejected]]:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        try:
            taken = await at_once(store, tenant(), limits, size=150, tokens=10)
            refused = [r for r in taken if isinstance(r, Rejected)]
            return len(taken) - len(refused), refused
        finally:
            await store.close()

    admitted, refused = asyncio.run(run())
    assert 100 <= admitted <= 101, admitted  # the limit, and what refilled meanwhile
    assert all(r.retry_after is not None and r.retry_after > 0 for r in refused)


def test_requests_one_after_another_are_served_as_before(redis: Redis) -> None:
    limits = quotas.Limits(requests_per_minute=100)

    async def run() -> tuple[int, int]:
        store = QuotaStore(url=redis.url, failure="open", replicas=1)
        name = tenant()
        try:
            admitted = 0
            for _ in range(50):
                taken = await store.reserve(name, limits, 10)
                if isinstance(taken, Reservation):
                    admitted += 1
                    await store.settle(taken, 10)
            return admitted, store.calls
        finally:
            await store.close()

    admitted, calls = asyncio.run(run())
    # a lease of 8 requests per round trip (REQUESTS_PER_LEASE), as before
    assert admitted == 50 and calls == -(-50 // leases.REQUESTS_PER_LEASE), calls


def refilled(sent: list[Sent], per_minute: int) -> float:
    """What the bucket refilled from the first burst's start to the last one's end."""
    return (max(s.ended for s in sent) - min(s.started for s in sent)) * per_minute / 60


@pytest.mark.parametrize(
    ("rpm", "sizes"),
    [
        # a tenth of a sixth of 100 is less than one request: leases are exact, and a burst
        # of the whole limit goes through wherever it lands
        pytest.param(100, [17, 17, 17, 17, 16, 16], id="rpm-100-burst-100"),
        # leases may keep a few requests each for later (at most a tenth of the limit in
        # all): a burst up to the rest of the limit goes through
        pytest.param(600, [90] * PROCESSES, id="rpm-600-burst-540"),
        pytest.param(600, [200, 100, 100, 60, 40, 40], id="rpm-600-burst-540-uneven"),
    ],
)
def test_a_burst_within_the_limit_spread_over_processes_is_admitted_in_full(
    redis: Redis, rpm: int, sizes: list[int]
) -> None:
    name, limits = tenant(), quotas.Limits(requests_per_minute=rpm)
    sent = send_at_once(
        [
            Burst(redis_url=redis.url, processes=PROCESSES, tenant=name, limits=limits, size=n)
            for n in sizes
        ]
    )
    assert sum(s.admitted for s in sent) == sum(sizes), sent
    assert all(s.round_trips <= 2 for s in sent), sent


@pytest.mark.parametrize(
    ("limits", "size", "tokens", "most"),
    [  # most: the requests the limit allows in a minute
        pytest.param(quotas.Limits(requests_per_minute=100), 40, 10, 100, id="rpm-100"),
        pytest.param(quotas.Limits(requests_per_minute=600), 150, 10, 600, id="rpm-600"),
        pytest.param(
            quotas.Limits(requests_per_minute=10_000, tokens_per_minute=6_000),
            20,
            100,
            60,
            id="tpm-6000",
        ),
    ],
)
def test_bursts_from_several_processes_never_pass_the_limit(
    redis: Redis, limits: quotas.Limits, size: int, tokens: int, most: int
) -> None:
    """Six processes each send more than their part at once: together they admit the limit
    (less what their leases keep for later) and never more, the refill aside."""
    name = tenant()
    sent = send_at_once(
        [
            Burst(
                redis_url=redis.url,
                processes=PROCESSES,
                tenant=name,
                limits=limits,
                size=size,
                tokens=tokens,
            )
            for _ in range(PROCESSES)
        ]
    )
    admitted = sum(s.admitted for s in sent)
    kept = leases.SHARE_OF_LIMIT * most  # the leases' top-ups, at most a tenth in all
    assert most - kept <= admitted <= most + refilled(sent, most) + 1, (admitted, sent)
