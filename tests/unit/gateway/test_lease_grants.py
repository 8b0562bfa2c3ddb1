"""The queue of requests waiting for their lease's grant (gateway.lease_grants), with a grant
that stands for Redis in memory (quotas.Buckets): one grant for all that wait at once, the next
for those that came meanwhile; a refusal that looks at the lease again; requests that leave
before or just after their turn; a grant that fails or is not asked."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any

import pytest

from tokenfleet.gateway import lease_grants
from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.gateway.policy.rejections import Rejected

RPM = quotas.Limits(requests_per_minute=100)
CONC = quotas.Limits(max_concurrent=1000)
A, REFUSED, PER = leases.Turn.ADMITTED, leases.Turn.REFUSED, leases.Turn.PER_REQUEST


@dataclasses.dataclass
class Redis:
    """Grants from a Buckets, the clock standing still; a grant waits for ``gate`` when set."""

    limits: quotas.Limits
    shared: quotas.Buckets = dataclasses.field(default_factory=quotas.Buckets)
    asked: list[leases.Ask] = dataclasses.field(default_factory=list)
    gate: asyncio.Event | None = None
    lost: bool = False  # the answer was lost (the store's _grant says UNANSWERED)
    broken: bool = False  # the grant raises (a bug): nobody may be left waiting

    async def grant(
        self, _tenant: str, lease: leases.Lease, asked: leases.Ask
    ) -> tuple[leases.Grant, lease_grants.Refusal | None]:
        self.asked.append(asked)
        if self.gate is not None:
            await self.gate.wait()
        if self.broken:
            raise RuntimeError("a bug")
        if self.lost:
            return leases.Grant.UNANSWERED, None
        got = self.shared.lease(
            self.limits,
            requests=asked.requests,
            tokens=asked.tokens,
            slots=asked.slots,
            extra_requests=asked.extra_requests,
            extra_tokens=asked.extra_tokens,
            extra_slots=asked.extra_slots,
            now=0.0,
        )
        if isinstance(got, Rejected):
            return leases.Grant.REFUSED, lease_grants.Refusal("requests_per_minute", 600)
        lease.add(got[0], got[1], now=0.0, slots=got[2])
        return leases.Grant.GRANTED, None


def queue_for(
    redis: Redis, *, can_ask: bool = True, tasks: list[asyncio.Task[None]] | None = None
) -> lease_grants.GrantQueue:
    def detach(round_trip: Coroutine[Any, Any, None]) -> object:
        task = asyncio.get_running_loop().create_task(round_trip)
        (tasks if tasks is not None else []).append(task)
        return task

    return lease_grants.GrantQueue(grant=redis.grant, can_ask=lambda: can_ask, detach=detach)


def waiting(limits: quotas.Limits, tokens: int = 0) -> leases.Waiting:
    return leases.Waiting(tokens=tokens, limits=limits)


async def test_a_burst_waits_for_one_grant_asked_for_all_of_it() -> None:
    redis = Redis(RPM)
    queue, lease = queue_for(redis), leases.Lease(limits=RPM)
    told = await asyncio.gather(*(queue.wait("t", lease, waiting(RPM)) for _ in range(50)))
    assert told == [(A, None)] * 50
    assert len(redis.asked) == 1 and redis.asked[0].extra_requests == 49 + 7
    assert lease.requests == 7  # the top-up, once


async def test_those_that_come_while_a_grant_is_under_way_go_in_the_next() -> None:
    redis = Redis(RPM, gate=asyncio.Event())
    queue, lease = queue_for(redis), leases.Lease(limits=RPM)
    first = asyncio.create_task(queue.wait("t", lease, waiting(RPM)))
    while not redis.asked:
        await asyncio.sleep(0)
    later = [asyncio.create_task(queue.wait("t", lease, waiting(RPM))) for _ in range(20)]
    assert redis.gate is not None
    redis.gate.set()
    assert [await t for t in (first, *later)] == [(A, None)] * 21
    # the first grant brought 8: 7 of the later ones drew them at once; one more grant for
    # the other 13, and the top-up
    assert [(a.requests, a.extra_requests) for a in redis.asked] == [(1, 7), (1, 12 + 7)]


async def test_a_refused_grant_looks_at_the_lease_again() -> None:
    limits = quotas.Limits(max_concurrent=20)  # slots: 2 a lease at most
    redis = Redis(limits, gate=asyncio.Event())
    redis.shared.concurrent = 20  # every slot runs elsewhere
    queue, lease = queue_for(redis), leases.Lease(limits=limits, requests=5)
    told = asyncio.gather(*(queue.wait("t", lease, waiting(limits)) for _ in range(3)))
    while not redis.asked:
        await asyncio.sleep(0)
    assert not lease.settle(0, now=0.0, slot_of=limits)  # a request of ours finished meanwhile
    assert redis.gate is not None
    redis.gate.set()
    refusal = lease_grants.Refusal("requests_per_minute", 600)
    assert await told == [(A, None), (REFUSED, refusal), (REFUSED, refusal)]


async def test_a_request_that_leaves_while_it_waits_is_skipped_and_the_grant_kept() -> None:
    redis = Redis(CONC, gate=asyncio.Event())
    queue, lease = queue_for(redis), leases.Lease(limits=CONC)
    leaving = asyncio.create_task(queue.wait("t", lease, waiting(CONC)))
    while not redis.asked:
        await asyncio.sleep(0)
    leaving.cancel()
    assert redis.gate is not None
    redis.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await asyncio.sleep(0)
    assert (lease.requests, lease.free_slots) == (8, 8)  # all of it, for the next request


async def test_a_request_that_leaves_once_admitted_puts_what_it_drew_back() -> None:
    redis = Redis(CONC, gate=asyncio.Event())
    queue, lease = queue_for(redis), leases.Lease(limits=CONC)
    leaving = asyncio.create_task(queue.wait("t", lease, waiting(CONC, tokens=5)))
    while not redis.asked:
        await asyncio.sleep(0)
    assert redis.gate is not None
    redis.gate.set()
    await asyncio.sleep(0)  # the grant lands and hands the request its turn...
    assert (lease.requests, lease.free_slots) == (7, 7)
    leaving.cancel()  # ...which it leaves before it reads it
    with pytest.raises(asyncio.CancelledError):
        await leaving
    granted = redis.asked[0].tokens + redis.asked[0].extra_tokens
    assert (lease.requests, lease.tokens, lease.free_slots) == (8, granted, 8)


@pytest.mark.parametrize(
    ("redis", "can_ask", "asked"),
    [
        pytest.param(Redis(RPM, lost=True), True, 1, id="the-answer-was-lost"),
        pytest.param(Redis(RPM), False, 0, id="redis-down-not-asked"),
    ],
)
async def test_without_a_grant_every_waiting_request_goes_per_request(
    redis: Redis, can_ask: bool, asked: int
) -> None:
    queue, lease = queue_for(redis, can_ask=can_ask), leases.Lease(limits=RPM, requests=1)
    told = await asyncio.gather(*(queue.wait("t", lease, waiting(RPM)) for _ in range(3)))
    assert told == [(A, None), (PER, None), (PER, None)]  # the one the lease held goes
    assert len(redis.asked) == asked


async def test_a_grant_that_breaks_leaves_nobody_waiting() -> None:
    redis, tasks = Redis(RPM, broken=True), []
    queue, lease = queue_for(redis, tasks=tasks), leases.Lease(limits=RPM)
    told = await asyncio.gather(*(queue.wait("t", lease, waiting(RPM)) for _ in range(3)))
    assert told == [(PER, None)] * 3
    assert await queue.wait("t", lease, waiting(RPM)) == (PER, None)  # and grants go on
    assert len(redis.asked) == 2
    assert all(isinstance(t.exception(), RuntimeError) for t in tasks)
