"""The routing shell: the per-process state the pure routing core reads and the gateway updates.

It holds the prefix index, each endpoint's health (outlier ejection), the retry budget, the
in-flight counts and the last scrape of every endpoint's ``/metrics`` (``vllm:num_requests_
waiting``, ``vllm:kv_cache_usage_perc``), and it reports routing metrics. The decisions
themselves are :mod:`tokenfleet.gateway.policy.routing`, ``prefix`` and ``resilience``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web

from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.metrics import RoutingMetrics
from tokenfleet.gateway.policy import adapter_loads, prefix, resilience, routing
from tokenfleet.signals import vllm

log = logging.getLogger("tokenfleet.gateway.router")
#: Uncompressed: a few KB on a local network, and gzip would cost CPU on both ends every second.
PLAIN = {"Accept-Encoding": "identity"}


class Router:
    """Routing state of one gateway process (touched only from its event loop)."""

    def __init__(self, settings: Settings, metrics: RoutingMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.rng = random.Random(settings.seed)
        self.index = prefix.PrefixIndex(settings.prefix_index_entries)
        self.in_flight: dict[str, int] = {}  # requests this process has running, per endpoint
        self.scraped: dict[str, routing.Load] = {}
        self.lora_busy: dict[str, tuple[float, frozenset[str]]] = {}
        """(when scraped, adapters with requests running or waiting) per LoRA engine: any
        gateway's requests."""
        self.health: dict[str, resilience.Health] = {}
        self.budget = resilience.Budget()
        self.budget_policy = resilience.BudgetPolicy(
            ratio=settings.retry_budget_ratio, min_retries=settings.retry_budget_min
        )
        self.ejection_policy = resilience.EjectionPolicy(base_ejection=settings.ejection_seconds)
        self._ejected: set[str] = set()  # endpoints whose health says ejected or probing
        self._sequence = itertools.count()
        self.processes = settings.processes
        """Gateway processes routing to the same endpoints (this one included)."""

    def ejected(self, now: float) -> frozenset[str]:
        return resilience.ejected({u: self.health[u] for u in self._ejected}, now=now)

    def choose(
        self,
        group: routing.Group,
        *,
        model: str,
        policy: routing.Policy,
        match: prefix.Match,
        tried: frozenset[str],
    ) -> routing.Choice | None:
        """Pick an endpoint for one attempt and count it as in flight there."""
        now = time.monotonic()
        ask = routing.ask(
            policy=policy,
            match=match,
            zone=self.settings.zone,
            tried=tried,
            ejected=self.ejected(now) if self._ejected else frozenset(),
            sequence=next(self._sequence),
        )
        choice = routing.pick(
            group,
            in_flight=self.in_flight,
            loads=self.scraped,
            ask=ask,
            policy=policy,
            now=now,
            rng=self.rng,
            processes=self.processes,
        )
        if choice is None:
            return None
        url = choice.endpoint.url
        if url in self._ejected:
            self.health[url] = resilience.chosen(self.health[url], now=now)
        self.in_flight[url] = self.in_flight.get(url, 0) + 1
        self.metrics.routing_decisions.labels(model, choice.why.value).inc()
        if match.total and not tried:
            self.metrics.prefix_blocks.labels(model).inc(match.total)
            self.metrics.prefix_hit_blocks.labels(model).inc(choice.prefix_blocks)
        return choice

    def take(self, endpoint: routing.Endpoint, *, model: str, why: str) -> None:
        """An endpoint chosen elsewhere (adapter placement) is in flight like a picked one."""
        url = endpoint.url
        if url in self._ejected:
            self.health[url] = resilience.chosen(self.health[url], now=time.monotonic())
        self.in_flight[url] = self.in_flight.get(url, 0) + 1
        self.metrics.routing_decisions.labels(model, why).inc()

    def done(self, endpoint: routing.Endpoint, *, ok: bool | None) -> None:
        """The attempt ended: ``ok`` False counts against the endpoint, None is neutral."""
        url = endpoint.url
        self.in_flight[url] -= 1
        if not self.in_flight[url]:
            del self.in_flight[url]  # keep the map as small as the busy set
        if ok is None:
            return
        health = self.health.get(url, resilience.HEALTHY)
        if ok and health is resilience.HEALTHY:
            return  # the common case: nothing to remember
        health, event = resilience.observe(
            health, ok=ok, now=time.monotonic(), policy=self.ejection_policy
        )
        self.health[url] = health
        if event is resilience.Event.EJECTED:
            self._ejected.add(url)
            log.warning(
                "ejected %s for %.0f s", url, (health.ejected_until or 0) - time.monotonic()
            )
        elif event is resilience.Event.READMITTED:
            self._ejected.discard(url)
            log.info("readmitted %s", url)
        if event is not resilience.Event.NONE:
            self.metrics.ejections.labels(endpoint.pool, event.value).inc()
            self.metrics.ejected_endpoints.set(len(self._ejected))

    def count_request(self) -> None:
        self.budget = resilience.count_request(
            self.budget, now=time.monotonic(), policy=self.budget_policy
        )

    def try_retry(self, model: str) -> bool:
        spent = resilience.try_retry(self.budget, now=time.monotonic(), policy=self.budget_policy)
        if spent is None:
            self.metrics.retry_budget_exhausted.labels(model).inc()
            return False
        self.budget = spent
        return True

    def backoff(self, attempt: int) -> float:
        return resilience.backoff(attempt, rng=self.rng)

    def record(self, hashes: tuple[bytes, ...], endpoint: routing.Endpoint) -> None:
        if hashes:
            self.index.record(hashes, endpoint.url)

    def forget_gone(self, live: frozenset[str]) -> None:
        """Drop health and scrapes of endpoints no longer in the catalog.

        The prefix index is left alone: forgetting costs a walk over all its entries per
        endpoint (a rollout would stall the loop), while a stale holder is harmless — routing
        ignores URLs outside the snapshot, and the LRU ages them out.
        """
        for url in [u for u in self.health if u not in live]:
            self.health.pop(url, None)
            self._ejected.discard(url)
        for url in [u for u in self.scraped if u not in live]:
            del self.scraped[url]
        for url in [u for u in self.lora_busy if u not in live]:
            del self.lora_busy[url]


#: The largest waiting/running figure believed; a page claiming more is malformed.
MAX_SAMPLE = 1e9
#: The most of a worker's /metrics page read: vLLM's is tens of KiB; a bigger one is cut.
MAX_PAGE_BYTES = 4 * 1024 * 1024


def parse_load(text: str, now: float, *, own: int = 0) -> routing.Load:
    """Waiting and running requests and KV usage from a vLLM /metrics page (summed over
    engines); ``own``: this gateway's requests at the endpoint as the page was read."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end < 0:
            continue
        name = line[:name_end]
        if name in vllm.WAITING or name in vllm.KV_CACHE_USAGE or name in vllm.RUNNING:
            with contextlib.suppress(ValueError):
                value = float(line.rsplit(" ", 1)[1])
                # NaN, infinities and negatives are no load figure: a page with them once
                # raised out of int() and stopped the scraper for every worker (issue 35)
                if math.isfinite(value) and 0 <= value <= MAX_SAMPLE:
                    samples[name] = samples.get(name, 0.0) + value
    waiting = vllm.first_present(samples, vllm.WAITING)
    kv = vllm.first_present(samples, vllm.KV_CACHE_USAGE)
    running = vllm.first_present(samples, vllm.RUNNING)
    return routing.Load(
        waiting=int(waiting or 0),
        kv_usage=min(1.0, kv or 0.0),
        scraped_at=now,
        running=int(running or 0),
        own=own,
    )


async def scrape_forever(
    router: Router,
    session: aiohttp.ClientSession,
    endpoints: Callable[[], Sequence[routing.Endpoint]],
) -> None:
    """Every ``scrape_seconds``, read each endpoint's /metrics; a failed scrape just goes stale."""
    interval = router.settings.scrape_seconds
    timeout = aiohttp.ClientTimeout(total=max(0.2, interval))

    async def one(url: str) -> None:
        try:
            async with session.get(url + "/metrics", timeout=timeout, headers=PLAIN) as r:
                if r.status == 200:
                    page = await r.content.read(MAX_PAGE_BYTES)
                    text, now = page.decode("utf-8", "replace"), time.monotonic()
                    own = router.in_flight.get(url, 0)
                    router.scraped[url] = parse_load(text, now, own=own)
                    busy = adapter_loads.busy(text)
                    if busy is not None:
                        router.lora_busy[url] = (now, busy)
        except (aiohttp.ClientError, TimeoutError):
            pass
        except Exception as exc:  # one worker's page must never stop the scraper (issue 35)
            log.warning("scraping %s/metrics failed (%r): its load goes stale", url, exc)

    while True:
        urls = [e.url for e in endpoints()]
        await asyncio.gather(*(one(u) for u in urls))
        await asyncio.sleep(interval)


def scraping(
    router_of: Callable[[web.Application], Router],
    endpoints_of: Callable[[web.Application], Sequence[routing.Endpoint]],
) -> Any:
    """A cleanup context running :func:`scrape_forever` for the app's lifetime."""

    async def run(app: web.Application) -> Any:
        router = router_of(app)
        if router.settings.scrape_seconds <= 0:
            yield
            return
        # One short connection per scrape: idle keep-alive sockets to every worker would only
        # hold file descriptors (and confuse anyone counting a worker's connections).
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        task = asyncio.create_task(scrape_forever(router, session, lambda: endpoints_of(app)))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.close()

    return run
