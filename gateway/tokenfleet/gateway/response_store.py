"""Cached answers in Redis (the gateway's own Redis): GET on lookup, SET with a TTL on store.

The cache is an optimisation, never a dependency: every failure (no Redis configured, a refused
connection, a slow answer) raises :class:`Unavailable`, which the caller turns into a miss. After
a failure the store is not asked again for ``RETRY_SECONDS``, so an outage costs one timeout per
retry window, not one per request.
"""

from __future__ import annotations

import time

from tokenfleet.gateway import redis_client

#: A lookup sits on every cacheable request's path before admission: a Redis that does not
#: answer in this long costs less than a miss would save, and is treated as one.
TIMEOUT_SECONDS = 0.25
RETRY_SECONDS = 2.0


class Unavailable(Exception):
    """The store did not answer: treat the request as a miss (and count an error)."""


class ResponseStore:
    """GET and SET of cached answers over one pipelined connection."""

    def __init__(self, url: str | None) -> None:
        self._redis = redis_client.RespClient(url, timeout=TIMEOUT_SECONDS) if url else None
        self._down_until = 0.0

    async def get(self, key: str) -> bytes | None:
        """The entry under ``key``, None when there is none; Unavailable when Redis is not."""
        reply = await self._call("GET", key)
        return reply if isinstance(reply, bytes) else None

    async def put(self, key: str, entry: bytes, *, ttl_seconds: int) -> None:
        """Keep ``entry`` under ``key`` for ``ttl_seconds``; Unavailable when Redis is not."""
        await self._call("SET", key, entry, "EX", ttl_seconds)

    async def _call(self, *args: bytes | str | int) -> object:
        if self._redis is None:
            raise Unavailable("no Redis configured")
        if time.monotonic() < self._down_until:
            raise Unavailable("redis failed recently")
        try:
            reply: object = await self._redis.call(*args)
        except (redis_client.RespError, OSError, TimeoutError) as exc:
            self._down_until = time.monotonic() + RETRY_SECONDS
            raise Unavailable(str(exc)) from exc
        return reply

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.close()
