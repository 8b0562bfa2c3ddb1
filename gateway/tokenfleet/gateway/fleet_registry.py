"""The gateway process's entry in its fleet's registry (policy.fleet): registered at start,
renewed every beat, removed at a graceful stop; each answer is how many processes share the
engines' slots, handed to ``on_count`` when it changes.

Without Redis (static mode, tests) nothing is registered and the configured count stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable

from tokenfleet.gateway import redis_backend
from tokenfleet.gateway.policy import fleet

log = logging.getLogger("tokenfleet.gateway.fleet")


class FleetRegistry:
    """One process's registration, and the count it reads back."""

    def __init__(
        self,
        backend: redis_backend.Backend,
        *,
        fleet_name: str,
        configured: int,
        on_count: Callable[[int], None],
    ) -> None:
        self._backend = backend
        self._key = fleet.key(fleet_name)
        self._script = backend.script(fleet.REGISTER_LUA) if backend.configured else None
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._configured = configured
        self._on_count = on_count
        self.count: int | None = None  # the last answer; None before any

    async def beat(self, *, leaving: bool = False) -> int:
        """Register (or leave) once; the count to use now."""
        counted = None
        if self._script is not None and self._backend.usable():
            ttl_ms = int(fleet.TTL_SECONDS * 1000)
            try:
                counted = int(
                    await self._script(
                        keys=[self._key], args=[self.id, ttl_ms, "1" if leaving else "0"]
                    )
                )
            except redis_backend.ERRORS as exc:
                self._backend.failed(exc)
            else:
                self._backend.answered()
        use = fleet.count_to_use(counted, last=self.count, configured=self._configured)
        if counted is not None:
            self.count = counted
        return use

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Registered from the first beat (awaited: before the catalog, so before Ready) until
        the end, when the entry is removed."""
        if self._script is None:  # no registry: the configured count stands
            self._on_count(self._configured)
            yield
            return
        self._on_count(await self.beat())

        async def keep() -> None:
            while True:
                await asyncio.sleep(fleet.BEAT_SECONDS)
                self._on_count(await self.beat())

        task = asyncio.create_task(keep())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(*redis_backend.ERRORS):
                await self.beat(leaving=True)
            log.info("left the gateway fleet registry (%s)", self._key)
