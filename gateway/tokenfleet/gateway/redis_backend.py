"""One Redis backend per gateway process: one connection, one health state, every store on it.

The quota, budget, response-cache and usage-ledger stores share one :class:`Backend`: one
pipelined connection (:class:`~tokenfleet.gateway.redis_client.RespClient`, replies in order),
and one answer to "does Redis answer?" — :attr:`Backend.healthy`, which ``/readyz`` and the
``tokenfleet_gateway_quota_backend_up`` gauge show. A store that sees Redis fail says so
(:meth:`Backend.failed`), one that sees it answer says that (:meth:`Backend.answered`); while
nothing asks, a beat pings it twice a second, so the state is current either way. After a
failure the stores leave Redis alone for :data:`RETRY_SECONDS` (:meth:`Backend.usable`): an
outage costs one timeout per window, not one per request.

What a store does while Redis does not answer is declared as data, a :class:`Failure`, and
logged with the outage:

- the **quota** fails open (local limits: each process its share) or closed (503
  ``quota_backend_unavailable``), as ``--quota-failure`` says;
- the **budget** follows the same setting: open counts in this process (as without Redis),
  closed refuses with the same 503 — never a 500;
- the **response cache** misses: the request is served by an engine, with a 200;
- the **usage ledger** buffers: entries wait in memory (bounded) and are written once Redis is
  back, each exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import time
from typing import Any

from tokenfleet.gateway import redis_client

log = logging.getLogger("tokenfleet.gateway.redis")

#: A store's call must never hold a request longer than this: the watchdog fails what waits.
TIMEOUT_SECONDS = 0.5
#: After a failure, Redis is left alone this long (then the next call or beat tries it again).
RETRY_SECONDS = 2.0
#: How often the beat asks Redis how it is while no store has called it.
BEAT_SECONDS = 0.5
#: What a call to Redis may raise: an error reply, a connection that failed, a watchdog timeout.
ERRORS = (redis_client.RespError, OSError, TimeoutError)


class Mode(enum.StrEnum):
    """What a store does while Redis does not answer."""

    OPEN = "open"  # serve without the shared count (this process counts alone)
    CLOSED = "closed"  # refuse: 503 quota_backend_unavailable, with a Retry-After
    MISS = "miss"  # as if nothing were stored: nothing is refused
    BUFFER = "buffer"  # keep the writes in memory (bounded) and replay them once Redis is back


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A store's declared failure mode: what it does, and what a request sees then."""

    store: str
    mode: Mode
    effect: str

    def __str__(self) -> str:
        return f"{self.store} {self.mode.value} ({self.effect})"


class Backend:
    """The process's Redis: one client, its health, and the stores' declared failure modes."""

    def __init__(self, url: str | None, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url
        self._timeout = timeout
        self._client: redis_client.RespClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.healthy = True
        self._down_since = 0.0
        self._last_call = 0.0
        self._beat: asyncio.Task[None] | None = None
        self.failures: list[Failure] = []

    @property
    def configured(self) -> bool:
        """A Redis URL was given (without one every store keeps its state in this process)."""
        return self.url is not None

    def declare(self, failure: Failure) -> Failure:
        """A store says what it does while Redis is down (logged with every outage)."""
        self.failures.append(failure)
        return failure

    @property
    def client(self) -> redis_client.RespClient | None:
        """The connection of the running event loop (a backend may outlive a loop — a test's
        ``asyncio.run`` — and the next loop gets a connection of its own)."""
        if self.url is None:
            return None
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = self._loop
        if self._client is None or loop is not self._loop:
            self._loop = loop
            self._client = redis_client.RespClient(self.url, timeout=self._timeout)
        return self._client

    def usable(self) -> bool:
        """Whether a store should call Redis now: it answered last time, or the retry window
        since the last failure has passed."""
        if self.url is None:
            return False
        return self.healthy or time.monotonic() - self._down_since >= RETRY_SECONDS

    async def call(self, *args: bytes | str | int) -> Any:
        """One command; raises what the client raises (see :data:`ERRORS`)."""
        client = self.client
        if client is None:
            raise redis_client.NotSent("no Redis configured")
        self._last_call = time.monotonic()
        if self._beat is None or self._beat.done():
            self._start_beat()
        return await client.call(*args)

    def script(self, source: str) -> redis_client.Script:
        """A Lua script run over this backend's connection (loaded on first NOSCRIPT)."""
        return redis_client.Script(self, source)

    def answered(self) -> None:
        """A store's call got an answer: Redis is up."""
        if not self.healthy:
            log.info("redis is back: quotas, budgets and the usage ledger are shared again")
        self.healthy = True

    def failed(self, error: BaseException) -> None:
        """A store's call failed: Redis is down for :data:`RETRY_SECONDS` at least."""
        if self.healthy:
            modes = "; ".join(str(f) for f in self.failures) or "no store uses it"
            log.error("redis unreachable (%s): %s", error, modes)
        self._down_since = time.monotonic()
        self.healthy = False

    def _start_beat(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to keep current
            self._beat = asyncio.get_running_loop().create_task(self._keep_current())

    async def _keep_current(self) -> None:
        """While no store calls Redis, ask it how it is (the gauge and /readyz stay current)."""
        while True:
            await asyncio.sleep(BEAT_SECONDS)
            if time.monotonic() - self._last_call < BEAT_SECONDS:
                continue
            self._last_call = time.monotonic()
            client = self.client
            if client is None:
                return
            try:
                await client.call("PING")
            except ERRORS as exc:
                self.failed(exc)
            else:
                self.answered()

    async def close(self) -> None:
        """Stop the beat and close the connection (the stores closed first)."""
        beat, self._beat = self._beat, None
        if beat is not None and not beat.done() and beat.get_loop() is _running_loop():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        if self._client is not None and self._loop is _running_loop():
            await self._client.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
