"""What one admission limit across gateway processes costs: a static share against Redis.

Issue 15 asks to share a pool's slots among gateway processes either by dividing them (each of
P processes admits capacity // P, the shipped choice: ``admission.share``) or by one counter in
Redis that every process takes a slot from and gives it back to. The static share costs nothing
per request; this measures what the Redis counter would cost, with the gateway's own quota
machinery (``QuotaStore``: the per-request path of a tenant's ``maxConcurrent``, one ``EVAL`` to
take a slot and one to give it back — the same round trips a Redis-coordinated pool limit
needs) against a real redis-server, from 1, 2 and 4 processes, each keeping ``--concurrency``
requests in flight that hold their slot for ``--hold-ms``:

- per request: the round trips, the wall time of take + give back (p50 and p99 over every
  process's requests), and the CPU they add: the process's CPU per request less that of the same
  loop on an in-process counter (``QuotaStore`` without Redis), which leaves the round trips'
  cost (the gateway's whole CPU per request is ~0.4 ms: docs/gateway.md "Performance").

What each buys is in docs/gateway.md "Admission": both are exact while every process is up; the
static share is off by one process's share while a replica starts or is gone, the counter is
not. That Redis keeps a counter exact across processes is tested in
tests/integration/test_quota_leases.py.

    .venv/bin/python bench/slot_sharing.py [--seconds 5] [--concurrency 16] [--hold-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _processes import free_port, start, wait_port

from tokenfleet.gateway.policy import quotas
from tokenfleet.gateway.quota_store import QuotaStore, Reservation


@dataclasses.dataclass(frozen=True)
class Job:
    """One process's part of a run."""

    url: str | None  # None: the same loop on an in-process counter (the baseline)
    limit: int
    processes: int
    concurrency: int
    hold: float  # seconds a request holds its slot
    seconds: float


async def _loop_in(job: Job) -> dict[str, Any]:
    # replicas large enough that a lease (10 % of the limit over the replicas) would hold fewer
    # than 2 slots: every request takes the per-request path, one round trip each way
    store = QuotaStore(url=job.url, failure="closed", replicas=job.processes * 8)
    limits = quotas.Limits(max_concurrent=job.limit)
    latencies: list[float] = []
    refused = 0
    stop_at = time.monotonic() + job.seconds

    async def worker() -> None:
        nonlocal refused
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            got = await store.reserve("bench", limits, 1)
            taken = time.perf_counter() - t0
            if not isinstance(got, Reservation):
                refused += 1
                await asyncio.sleep(job.hold)
                continue
            await asyncio.sleep(job.hold)
            t1 = time.perf_counter()
            await store.settle(got, 1)
            latencies.append(taken + time.perf_counter() - t1)

    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(job.concurrency)))
    cpu = time.process_time() - cpu0
    await store.close()
    return {"latencies": latencies, "refused": refused, "cpu": cpu, "calls": store.calls}


def _process(job: Job, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(asyncio.run(_loop_in(job)))


def pct(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


def run(url: str | None, processes: int, ns: argparse.Namespace) -> dict[str, float]:
    """Every process's requests pooled: percentiles over all of them, CPU per request."""
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    job = Job(
        url=url,
        limit=ns.limit,
        processes=processes,
        concurrency=ns.concurrency,
        hold=ns.hold_ms / 1000,
        seconds=ns.seconds,
    )
    procs = [multiprocessing.Process(target=_process, args=(job, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r["latencies"])
    n = max(1, len(latencies))
    return {
        "requests": len(latencies),
        "refused": sum(r["refused"] for r in results),
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "cpu_per_request": sum(r["cpu"] for r in results) / n,
        "round_trips": sum(r["calls"] for r in results) / n,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight per process")
    p.add_argument("--hold-ms", type=float, default=2.0, help="how long a request holds a slot")
    p.add_argument("--limit", type=int, default=64, help="the pool's slots")
    p.add_argument("--processes", default="1,2,4")
    ns = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tf-bench-slots-") as d:
        port = free_port()
        server = shutil.which("redis-server") or "redis-server"
        redis = start([server, "--port", str(port), "--save", ""], Path(d) / "redis.log")
        try:
            wait_port(port)
            url = f"redis://127.0.0.1:{port}/0"
            print(
                f"A pool of {ns.limit} slots shared through one Redis counter; each process keeps "
                f"{ns.concurrency} requests in flight holding a slot {ns.hold_ms:g} ms, for "
                f"{ns.seconds:g} s (a static share: 0 round trips, 0 added time)\n"
                "| processes | requests | round trips per request | take + give back p50 / p99 "
                "| CPU per request, Redis − in-process counter | refused |\n"
                "|---|---|---|---|---|---|"
            )
            for n in [int(x) for x in ns.processes.split(",")]:
                base = run(None, n, ns)  # the same loop and timers, no Redis: what to subtract
                r = run(url, n, ns)
                added = r["cpu_per_request"] - base["cpu_per_request"]
                print(
                    f"| {n} | {r['requests']:.0f} | {r['round_trips']:.2f} | "
                    f"{r['p50'] * 1000:.2f} / {r['p99'] * 1000:.2f} ms | "
                    f"{r['cpu_per_request'] * 1e6:.0f} − {base['cpu_per_request'] * 1e6:.0f} = "
                    f"{added * 1e6:.0f} µs | {r['refused']:.0f} |",
                    flush=True,
                )
        finally:
            redis.kill()
            redis.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
