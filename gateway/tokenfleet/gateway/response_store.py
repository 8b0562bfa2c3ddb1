"""Cached answers in Redis (the gateway's own Redis): GET on lookup, SET with a TTL on store.

The cache is an optimisation, never a dependency: its declared failure mode is a miss. Every
failure (no Redis configured, a refused connection, a slow answer) raises :class:`Unavailable`,
which the caller turns into a miss. After a failure Redis is not asked again for the backend's
retry window (2 s), so an outage costs one timeout per window, not one per request; a lookup
slower than :data:`TIMEOUT_SECONDS` is a miss too, and holds this store off the same while.
"""

from __future__ import annotations

import asyncio
import time

from tokenfleet.gateway import redis_backend

#: A lookup sits on every cacheable request's path before admission: a Redis that does not
#: answer in this long costs less than a miss would save, and is treated as one.
TIMEOUT_SECONDS = 0.25
RETRY_SECONDS = redis_backend.RETRY_SECONDS

FAILURE = redis_backend.Failure(
    store="response cache", mode=redis_backend.Mode.MISS, effect="served by an engine, a 200"
)


class Unavailable(Exception):
    """The store did not answer: treat the request as a miss (and count an error)."""


class ResponseStore:
    """GET and SET of cached answers over the process's shared Redis connection."""

    def __init__(
        self, url: str | None = None, *, backend: redis_backend.Backend | None = None
    ) -> None:
        """``backend``: the process's shared Redis (else one of its own on ``url``)."""
        self._owns_backend = backend is None
        self._backend = backend or redis_backend.Backend(url)
        self.failure = self._backend.declare(FAILURE)
        self._slow_until = 0.0  # a lookup timed out: this store leaves Redis alone until then

    async def get(self, key: str) -> bytes | None:
        """The entry under ``key``, None when there is none; Unavailable when Redis is not."""
        reply = await self._call("GET", key)
        return reply if isinstance(reply, bytes) else None

    async def put(self, key: str, entry: bytes, *, ttl_seconds: int) -> None:
        """Keep ``entry`` under ``key`` for ``ttl_seconds``; Unavailable when Redis is not."""
        await self._call("SET", key, entry, "EX", ttl_seconds)

    async def _call(self, *args: bytes | str | int) -> object:
        backend = self._backend
        if not backend.configured:
            raise Unavailable("no Redis configured")
        if not backend.usable() or time.monotonic() < self._slow_until:
            raise Unavailable("redis failed recently")
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                reply: object = await backend.call(*args)
        except TimeoutError as exc:  # slower than a miss is worth (Redis may be fine for others)
            self._slow_until = time.monotonic() + RETRY_SECONDS
            raise Unavailable("redis answered too slowly") from exc
        except redis_backend.ERRORS as exc:
            backend.failed(exc)
            raise Unavailable(str(exc)) from exc
        backend.answered()
        return reply

    async def close(self) -> None:
        if self._owns_backend:
            await self._backend.close()
