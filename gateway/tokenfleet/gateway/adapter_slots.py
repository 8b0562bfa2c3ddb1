"""The adapter shell: what this gateway believes each worker holds, and the loads it asks for.

Per endpoint with an adapter-loader it keeps the adapters loaded (least recently used first),
those loading, and those with requests running; :meth:`AdapterSlots.place` hands that, with the
router's in-flight counts, to the pure :func:`tokenfleet.gateway.policy.adapters.place`.
:meth:`AdapterSlots.ensure` makes the placement true: one load per (endpoint, adapter) at a time
(single flight: concurrent requests await the same task), after unloading the victim the
placement named; a request waits at most the base's ``load_timeout_seconds`` (and its deadline),
and the load itself goes on for later requests (up to twice that). A worker whose verification
refused a digest is not asked again for it for a while (policy.adapter_loads).
:func:`refresh_forever` merges every loader's listing into the view every
``adapter_listing_seconds``, so other gateways' loads and evictions are seen within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import aiohttp

from tokenfleet.gateway.adapter_catalog import Adapter, Loader
from tokenfleet.gateway.engine_keys import EngineKeys
from tokenfleet.gateway.metrics import AdapterMetrics
from tokenfleet.gateway.policy import adapter_loads, routing
from tokenfleet.gateway.policy import adapters as placement
from tokenfleet.gateway.policy.adapter_loads import Outcome, Result
from tokenfleet.gateway.policy.rejections import Reason, Rejected

log = logging.getLogger("tokenfleet.gateway.adapters")
#: A load may run this many times a request's wait (``load_timeout_seconds``) before it is
#: abandoned: a request that gave up leaves it to finish for the next one, but a loader that
#: hangs must not keep the slot "loading" (and every request for the adapter waiting) for long.
LOAD_PATIENCE = 2.0
#: An unload is a dictionary delete in the engine: this is generous.
UNLOAD_TIMEOUT_SECONDS = 10.0


@dataclasses.dataclass(slots=True, kw_only=True)
class Replica:
    """One worker's adapters as this gateway believes them."""

    loader: Loader
    namespace: str
    lru: dict[str, str] = dataclasses.field(default_factory=dict)
    """Adapter → digest ("" unknown), least recently used first (dicts keep insertion order)."""
    loading: set[str] = dataclasses.field(default_factory=set)
    running: dict[str, int] = dataclasses.field(default_factory=dict)
    finished: dict[str, float] = dataclasses.field(default_factory=dict)
    """When this gateway's last request on each adapter ended (monotonic)."""
    loaded_at: dict[str, float] = dataclasses.field(default_factory=dict)

    def touch(self, name: str) -> None:
        """``name`` is the most recently used now."""
        if name in self.lru:
            self.lru[name] = self.lru.pop(name)

    def in_use(self, engine: tuple[float, frozenset[str]] | None) -> frozenset[str]:
        """Adapters no load may evict: those this gateway runs, and those the engine last
        reported running or waiting (``engine``: when scraped, names) — except ones whose
        request here ended after that scrape: the engine may only have seen this gateway's."""
        ours = frozenset(n for n, c in self.running.items() if c)
        if engine is None:
            return ours
        seen_at, names = engine
        return ours | {n for n in names if self.finished.get(n, float("-inf")) < seen_at}

    def held(self) -> tuple[str, ...]:
        """Loaded or loading, least recently used first (a load under way is the newest)."""
        return (*self.lru, *(n for n in sorted(self.loading) if n not in self.lru))


class AdapterSlots:
    """Adapter state of one gateway process (touched only from its event loop)."""

    def __init__(self, metrics: AdapterMetrics, *, engine_keys: EngineKeys | None = None) -> None:
        self.metrics = metrics
        self.engine_keys = engine_keys or EngineKeys()
        """The sidecars require their namespace's engine key, as their engines do."""
        self.session: aiohttp.ClientSession | None = None
        """What loads go through (the app makes it at start: a session needs the loop)."""
        self.replicas: dict[str, Replica] = {}  # endpoint URL → its adapters
        self.loads: dict[tuple[str, str], asyncio.Task[Outcome]] = {}
        self.refused: dict[tuple[str, str], float] = {}  # (endpoint, digest) → until (monotonic)
        self._tie = itertools.count()

    def replica(self, url: str, loader: Loader, namespace: str) -> Replica:
        found = self.replicas.get(url)
        if found is None or found.loader != loader:
            found = self.replicas[url] = Replica(loader=loader, namespace=namespace)
        return found

    def place(
        self,
        endpoints: Sequence[routing.Endpoint],
        *,
        adapter: Adapter,
        loaders: Mapping[str, Loader],
        in_flight: Mapping[str, int],
        busy: Mapping[str, tuple[float, frozenset[str]]],
        now: float,
    ) -> placement.Placement | None:
        """Where a request for ``adapter`` goes among ``endpoints`` (its routable candidates);
        ``busy``: per endpoint, when scraped and the adapters its engine reported running or
        waiting (any gateway's requests)."""
        candidates = []
        for e in endpoints:
            loader = loaders.get(e.url)
            if loader is None or self.refused.get((e.url, adapter.artifact.digest), 0.0) > now:
                continue
            r = self.replica(e.url, loader, adapter.namespace)
            candidates.append(
                placement.Holder(
                    url=e.url,
                    load=in_flight.get(e.url, 0),
                    adapters=r.held(),
                    in_use=r.in_use(busy.get(e.url)),
                    loading=frozenset(r.loading),
                    slots=adapter.slots,
                )
            )
        return placement.place(
            adapter=adapter.name, candidates=candidates, policy=adapter.policy, tie=next(self._tie)
        )

    async def ensure(
        self,
        url: str,
        *,
        adapter: Adapter,
        evict: str | None,
        session: aiohttp.ClientSession,
        due: float,
    ) -> Rejected | None:
        """The adapter loaded at ``url`` (loading it, or joining its load); None once it is."""
        r = self.replicas[url]
        if r.lru.get(adapter.name) == adapter.artifact.digest and adapter.name not in r.loading:
            return None
        key = (url, adapter.name)
        task = self.loads.get(key)
        if task is None:  # (an older digest under the name: the loader replaces it itself)
            r.loading.add(adapter.name)
            task = self.loads[key] = asyncio.create_task(
                self._load(r, url=url, adapter=adapter, evict=evict, session=session)
            )
            task.add_done_callback(lambda _: self.loads.pop(key, None))
        wait = min(adapter.load_timeout_seconds, due - time.monotonic())
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout=max(0.0, wait))
        except TimeoutError:
            return Rejected(
                reason=Reason.ADAPTER_LOAD_TIMEOUT,
                retry_after=adapter.load_timeout_seconds,
                message=f"adapter '{adapter.name}' did not load within {max(0.0, wait):.3g} s; "
                "try again shortly",
            )
        return self._answer(outcome, adapter=adapter, url=url)

    def _answer(self, outcome: Outcome, *, adapter: Adapter, url: str) -> Rejected | None:
        if outcome.result is Result.LOADED:
            return None
        if outcome.result is Result.REFUSED:
            return Rejected(
                reason=Reason.ADAPTER_REFUSED,
                message=f"the worker refused adapter '{adapter.name}' ({outcome.reason}); see "
                f"`kubectl describe modeladapter {adapter.resource}"
                + (f" -n {adapter.namespace}`" if adapter.namespace else "`"),
            )
        if outcome.result is Result.TIMEOUT:
            return Rejected(
                reason=Reason.ADAPTER_LOAD_TIMEOUT,
                retry_after=adapter.load_timeout_seconds,
                message=f"adapter '{adapter.name}' did not load in time; try again shortly",
            )
        return Rejected(
            reason=Reason.ADAPTER_LOAD_FAILED,
            retry_after=1.0,
            message=f"adapter '{adapter.name}' could not be loaded: {outcome.reason}",
        )

    async def _load(
        self,
        r: Replica,
        *,
        url: str,
        adapter: Adapter,
        evict: str | None,
        session: aiohttp.ClientSession,
    ) -> Outcome:
        """Unload the victim, load the adapter, and record what happened."""
        name = adapter.name
        if evict is not None and evict in r.lru:
            await self._unload(r, evict, session=session)
        r.lru[name] = adapter.artifact.digest  # it takes its slot now, most recently used
        started = time.monotonic()
        body = {
            "name": name,
            "uri": adapter.artifact.uri,
            "digest": adapter.artifact.digest,
            "signatureUri": adapter.artifact.signature_uri,
        }
        timeout = aiohttp.ClientTimeout(total=LOAD_PATIENCE * adapter.load_timeout_seconds)
        try:
            async with session.post(
                r.loader.url + "/v1/adapters/load",
                json=body,
                timeout=timeout,
                headers=self.engine_keys.headers(r.namespace),
            ) as answer:
                outcome = adapter_loads.judge(answer.status, await answer.read())
        except TimeoutError:
            outcome = Outcome(result=Result.TIMEOUT)
        except aiohttp.ClientError as exc:
            outcome = Outcome(result=Result.FAILED, reason=f"{type(exc).__name__} from the loader")
        except asyncio.CancelledError:  # shutting down: whatever the engine did, forget it
            self._drop(r, name)
            raise
        finally:
            r.loading.discard(name)
        self.metrics.load_seconds.observe(time.monotonic() - started)
        self._record(r, outcome, url=url, adapter=adapter)
        return outcome

    def _record(self, r: Replica, outcome: Outcome, *, url: str, adapter: Adapter) -> None:
        """A load's outcome in the view and the metrics; a refusal keeps the worker out."""
        name, m = adapter.name, self.metrics
        m.loads.labels(adapter.namespace, name, outcome.result.value).inc()
        if outcome.result is Result.LOADED:
            r.loaded_at[name] = time.monotonic()
            m.loaded.labels(adapter.namespace, name, r.loader.pod).set(1)
            return
        self._drop(r, name)
        if outcome.result is Result.REFUSED:
            until = time.monotonic() + adapter_loads.REFUSED_COOLDOWN_SECONDS
            self.refused[(url, adapter.artifact.digest)] = until
        log.warning(
            "adapter %s on %s: %s %s",
            adapter.key,
            r.loader.pod,
            outcome.result.value,
            outcome.reason,
        )

    async def _unload(self, r: Replica, name: str, *, session: aiohttp.ClientSession) -> None:
        """Free ``name``'s slot (a 404 means it was gone already: just as good)."""
        timeout = aiohttp.ClientTimeout(total=UNLOAD_TIMEOUT_SECONDS)
        try:
            async with session.post(
                r.loader.url + "/v1/adapters/unload",
                json={"name": name},
                timeout=timeout,
                headers=self.engine_keys.headers(r.namespace),
            ) as answer:
                gone = answer.status in (200, 404)
        except (TimeoutError, aiohttp.ClientError):
            gone = False
        if gone:
            self._drop(r, name)
            self.metrics.evictions.labels(r.namespace, name).inc()

    def _drop(self, r: Replica, name: str) -> None:
        if r.lru.pop(name, None) is not None or name in r.loaded_at:
            with contextlib.suppress(KeyError):
                self.metrics.loaded.remove(r.namespace, name, r.loader.pod)
        r.loaded_at.pop(name, None)
        r.finished.pop(name, None)

    def forget(self, url: str, name: str) -> None:
        """The engine does not have ``name`` (another gateway evicted it): load it next time."""
        r = self.replicas.get(url)
        if r is not None and name not in r.loading:
            self._drop(r, name)

    @contextlib.contextmanager
    def using(self, url: str, name: str) -> Iterator[None]:
        """A request runs on ``name`` at ``url``: it is the most recently used, and no load
        may evict it meanwhile."""
        r = self.replicas[url]
        r.touch(name)
        r.running[name] = r.running.get(name, 0) + 1
        try:
            yield
        finally:
            r.running[name] -= 1
            if not r.running[name]:
                del r.running[name]
            r.finished[name] = time.monotonic()

    def merge(self, url: str, listing: Mapping[str, str], *, asked_at: float) -> None:
        """A loader's listing, asked for at ``asked_at`` (monotonic), into the view."""
        r = self.replicas.get(url)
        if r is None:
            return
        keep = r.loading | {n for n, at in r.loaded_at.items() if at >= asked_at}
        order = adapter_loads.merged(known=tuple(r.lru), listing=listing, keep=keep)
        for gone in [n for n in r.lru if n not in order]:
            self._drop(r, gone)
        r.lru = {n: listing.get(n) or r.lru.get(n, "") for n in order}
        for n in order:
            if n not in r.loading:
                self.metrics.loaded.labels(r.namespace, n, r.loader.pod).set(1)

    def retire(self, live: Mapping[str, Loader], *, now: float) -> None:
        """Forget endpoints that left the catalog (and their loaded series), and refusals
        whose cooldown is over."""
        for url in [u for u, r in self.replicas.items() if live.get(u) != r.loader]:
            r = self.replicas.pop(url)
            for name in list(r.lru):
                self._drop(r, name)
        for key in [k for k, until in self.refused.items() if until <= now]:
            del self.refused[key]


async def refresh_forever(
    slots: AdapterSlots,
    session: aiohttp.ClientSession,
    loaders: Callable[[], Mapping[str, tuple[Loader, str]]],
    *,
    interval: float,
) -> None:
    """Every ``interval`` seconds, read each loader's ``GET /v1/adapters``; ``loaders``:
    endpoint URL → (its loader, its namespace), as the current catalog has them."""
    timeout = aiohttp.ClientTimeout(total=max(0.5, interval))

    async def one(url: str, replica: Replica) -> None:
        asked_at = time.monotonic()
        auth = slots.engine_keys.headers(replica.namespace)
        try:
            async with session.get(
                replica.loader.url + "/v1/adapters", timeout=timeout, headers=auth
            ) as r:
                listing = adapter_loads.listed(await r.read()) if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return
        if listing is not None:
            slots.merge(url, listing, asked_at=asked_at)

    while True:
        live = loaders()
        slots.retire({u: loader for u, (loader, _) in live.items()}, now=time.monotonic())
        for url, (loader, namespace) in live.items():
            slots.replica(url, loader, namespace)
        await asyncio.gather(*(one(u, r) for u, r in list(slots.replicas.items())))
        await asyncio.sleep(interval)
