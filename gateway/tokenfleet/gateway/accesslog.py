"""The access log: one JSON line per request, batched off the request path.

A request only serialises its record (orjson) and appends it to a list; every
:data:`FLUSH_SECONDS` the lines gathered so far go, as one write, to a writer thread that owns
stderr. The event loop never blocks on a slow log pipe, and a burst costs one write, not one
``logging`` call (handler lock, formatter, a write syscall) per request. The lines are those
the ``tokenfleet.gateway.access`` logger used to write, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import orjson

FLUSH_SECONDS = 0.1
MAX_PENDING = 100_000  # lines held before new ones are dropped (a stuck log pipe)


class AccessLog:
    """Lines gathered on the loop, written by one thread."""

    def __init__(self, fd: int | None = None) -> None:
        self._fd = fd
        self._lines: list[bytes] = []
        self._batches: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def write(self, record: dict[str, Any]) -> None:
        """Queue one record (cheap: the request path calls it)."""
        if len(self._lines) >= MAX_PENDING:
            self.dropped += 1
            return
        self._lines.append(orjson.dumps(record))

    def flush(self) -> None:
        """Hand the gathered lines to the writer (written inline if it is not running)."""
        if not self._lines:
            return
        batch = b"\n".join(self._lines) + b"\n"
        self._lines = []
        if self._thread is not None and self._thread.is_alive():
            self._batches.put(batch)
        else:
            self._write(batch)

    def _write(self, batch: bytes) -> None:
        fd = self._fd if self._fd is not None else sys.stderr.fileno()
        view = memoryview(batch)
        with contextlib.suppress(OSError):
            while view:
                view = view[os.write(fd, view) :]

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            self._write(batch)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The writer thread and the periodic flush, for an app's lifetime."""
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
        self._thread.start()

        async def tick() -> None:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                self.flush()

        task = asyncio.create_task(tick())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.flush()
            self._batches.put(None)
            await asyncio.to_thread(self._thread.join, 5)
            self._thread = None


#: The process's access log (one per process; each worker has its own).
ACCESS = AccessLog()
