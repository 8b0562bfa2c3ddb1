"""Many gateway processes share the engines' slots by the count of processes alive (issue 36,
item 1): each registers in the fleet's registry in Redis and divides the slots by what it
counts, so scaling the gateways 1 → 3 → 1 never puts more requests into the engines than they
have slots, and leaves no process's share idle once the others are gone. Real redis-server,
real simulated engines, real gateway processes; bursts sent at once."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import signal
import threading
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
    gateway_metric,
    key_hash,
    running,
    start_gateway,
    start_sim,
    stop,
)

KEY = "tfk-fleet-" + "0" * 30
SEQS = 4  # each engine's slots
ENGINES = 2


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[Sim]]:
    started = [
        start_sim(tmp_path, "m", "--max-num-seqs", str(SEQS), "--inter-token-latency", "25ms")
        for _ in range(ENGINES)
    ]
    yield started
    for s in started:
        s.kill()


def config(sims: list[Sim]) -> dict[str, Any]:
    return {
        "models": [{"name": "m", "endpoints": [s.url for s in sims], "maxConcurrency": SEQS}],
        # one class, nothing reserved: the default classes keep 10 % of the slots for critical,
        # which at a share of 2 slots leaves batch 1 — the engines would then look half idle
        # because of reservations, not because of the fleet's count
        "pools": [
            {
                "name": "default",
                "admission": {
                    "classes": [{"name": "batch", "priority": 100, "maxQueueAgeMs": 30000}]
                },
            }
        ],
        "tenants": [
            {
                "name": "load",
                "apiKeyHashes": [key_hash(KEY)],
                "allowedModels": ["*"],
                "priorityClass": "batch",  # queues (30 s) instead of being refused
            }
        ],
    }


def counted(g: Gateway) -> float:
    return gateway_metric(g, "tokenfleet_gateway_fleet_processes")


def call(g: Gateway, max_tokens: int = 40) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=120)
    body = {"model": "m", "prompt": "go", "max_tokens": max_tokens, "ignore_eos": True}
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    status = conn.getresponse().status
    conn.close()
    return status


class EnginePeak:
    """The most requests the engines held together (running + waiting, summed at one moment,
    give or take a scrape) while the block ran, and each engine's own most: a sum above the
    engines' slots means the gateways together admitted more than the engines can run."""

    def __init__(self, sims: list[Sim]) -> None:
        self.sims, self.peaks, self.total = sims, [0] * len(sims), 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set():
            now = 0
            for i, s in enumerate(self.sims):
                held = s.metric("vllm:num_requests_running") + s.metric("vllm:num_requests_waiting")
                self.peaks[i] = max(self.peaks[i], int(held))
                now += int(held)
            self.total = max(self.total, now)  # at one moment (give or take a scrape)
            time.sleep(0.05)

    def __enter__(self) -> EnginePeak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def burst(gateways: list[Gateway], n: int) -> list[int]:
    """``n`` requests at once, spread over ``gateways``."""
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: call(gateways[i % len(gateways)]), range(n)))


def test_the_slots_are_shared_by_the_processes_alive_as_the_gateways_scale(
    tmp_path: Path, redis: Redis, sims: list[Sim]
) -> None:
    slots = SEQS * ENGINES
    conf = config(sims)
    with running(start_gateway(tmp_path, conf, "--redis", redis.url)) as a:
        assert counted(a) == 1
        with EnginePeak(sims) as alone:
            assert burst([a], 2 * slots) == [200] * (2 * slots)
        # one process: its share is every slot, and a burst of twice that fills them all
        assert alone.total >= slots - 1, (alone.total, alone.peaks)

        b = start_gateway(tmp_path, conf, "--redis", redis.url)
        c = start_gateway(tmp_path, conf, "--redis", redis.url)
        try:
            # B counted 2 until its first beat after C registered: each within a beat
            wait_for(
                "every process to count 3",
                lambda: all(counted(g) == 3 for g in (a, b, c)),
                timeout=5,
                every=0.2,
            )
            with EnginePeak(sims) as three:
                got = burst([a, b, c], 6 * slots)
            assert got == [200] * (6 * slots)  # every request queued and served
            # three processes each admitting all 8 slots would put 24 into 8 slots
            # in flight at one moment, summed over the engines (each engine's own peak may top
            # its 4 when the three processes' routing happens to agree: the fleet bounds the sum)
            assert three.total <= slots, (three.total, three.peaks)
            assert three.total >= 3 * (slots // 3) - 1, three.total  # each its share, used
        finally:
            stop(b.process)
            stop(c.process)
        wait_for("A to count itself alone", lambda: counted(a) == 1, timeout=5, every=0.2)
        with EnginePeak(sims) as again:
            assert burst([a], 2 * slots) == [200] * (2 * slots)
        assert again.total >= slots - 1, again.total  # the others' shares came back to A

        # a process that dies without leaving is dropped once its entry expires (3 s)
        d = start_gateway(tmp_path, conf, "--redis", redis.url)
        wait_for("A to count 2", lambda: counted(a) == 2, timeout=5, every=0.2)
        stop(d.process, signal.SIGKILL)
        started = time.monotonic()
        wait_for("A to drop the dead one", lambda: counted(a) == 1, timeout=8, every=0.2)
        assert time.monotonic() - started < 6.5  # its 3 s TTL, a beat, and a scrape
