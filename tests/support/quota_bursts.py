"""Bursts of quota reservations from separate processes, each with its own QuotaStore (the whole
of one gateway process's quota state), released at once by a barrier."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import multiprocessing.synchronize
import time
from multiprocessing.queues import Queue

from tokenfleet.gateway.policy import quotas
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.quota_store import QuotaStore, Reservation


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Burst:
    """What one process sends: ``size`` reservations of ``tokens`` at once, for ``tenant``."""

    redis_url: str
    processes: int  # the QuotaStore's replicas: every gateway process sharing the quotas
    tenant: str
    limits: quotas.Limits
    size: int
    tokens: int = 10


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """What one process's burst came to, and when it was sent and answered (wall clock)."""

    admitted: int
    refused: int
    round_trips: int
    started: float
    ended: float


async def _burst(burst: Burst, barrier: multiprocessing.synchronize.Barrier) -> Sent:
    store = QuotaStore(url=burst.redis_url, failure="open", replicas=burst.processes)
    try:
        assert store._redis is not None
        await store._redis.call("PING")  # connected before the barrier: the burst is all sent
        calls = store.calls
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
        started = time.time()
        answers = await asyncio.gather(
            *(store.reserve(burst.tenant, burst.limits, burst.tokens) for _ in range(burst.size))
        )
        ended = time.time()
        assert all(isinstance(a, Reservation | Rejected) for a in answers), answers
        admitted = [a for a in answers if isinstance(a, Reservation)]
        assert not any(r.local for r in admitted), "a reservation bypassed Redis"
        round_trips = store.calls - calls
        for reservation in admitted:
            await store.settle(reservation, burst.tokens)
        return Sent(
            admitted=len(admitted),
            refused=len(answers) - len(admitted),
            round_trips=round_trips,
            started=started,
            ended=ended,
        )
    finally:
        await store.close()


def _child(burst: Burst, barrier: multiprocessing.synchronize.Barrier, out: Queue[Sent]) -> None:
    out.put(asyncio.run(_burst(burst, barrier)))


def send_at_once(bursts: list[Burst], *, timeout: float = 60.0) -> list[Sent]:
    """Every burst from a process of its own (spawned: nothing shared but Redis), all released
    at the same moment; what each came to."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(bursts))
    out: Queue[Sent] = context.Queue()
    children = [context.Process(target=_child, args=(b, barrier, out)) for b in bursts]
    for child in children:
        child.start()
    try:
        sent = [out.get(timeout=timeout) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()
    assert all(child.exitcode == 0 for child in children), [c.exitcode for c in children]
    return sent
