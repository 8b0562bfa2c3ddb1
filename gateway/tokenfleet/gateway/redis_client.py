"""A minimal pipelined Redis client for the quota script: one connection, replies in order.

redis-py spent a third of the gateway's CPU per request here (connection-pool bookkeeping, an
asyncio.timeout per call, generic command encoding). The quota path runs one command, EVALSHA,
so this speaks just enough RESP2: commands are written back to back on one connection, replies
resolve futures first-in first-out, and one watchdog — not a timer per call — fails everything
pending when Redis stops answering.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import ssl
import time
from typing import Any, Protocol, cast
from urllib.parse import unquote, urlparse


class RespError(Exception):
    """Redis answered with an error reply (for example NOSCRIPT)."""


class NotSent(ConnectionError):
    """The command never left: connecting failed (refused, unreachable, timed out), so Redis
    certainly did not run it. Any other failure of a call — a timeout, a lost connection —
    comes after the write: Redis may or may not have run it."""


class _Incomplete(Exception):
    pass


def encode(*args: bytes | str | int) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def parse(buffer: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """One RESP2 reply starting at ``pos``: (value, position after it); raises _Incomplete."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buffer[pos : pos + 1], bytes(buffer[pos + 1 : end])
    if kind == b"+":
        return line, end + 2
    if kind == b"-":
        return RespError(line.decode(errors="replace")), end + 2
    if kind == b":":
        return int(line), end + 2
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, end + 2
        if len(buffer) < end + 2 + size + 2:
            raise _Incomplete
        return bytes(buffer[end + 2 : end + 2 + size]), end + 4 + size
    if kind == b"*":
        count = int(line)
        items, at = [], end + 2
        for _ in range(max(0, count)):
            item, at = parse(buffer, at)
            items.append(item)
        return (items if count >= 0 else None), at
    raise RespError(f"unexpected reply type {kind!r}")


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.pending: collections.deque[tuple[float, asyncio.Future[Any]]] = collections.deque()
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.outgoing: list[bytes] = []  # commands of this loop iteration, written as one

    def send(self, payload: bytes) -> None:
        """Queue a command; every command queued in one event-loop iteration (many requests'
        reserves and settles under load) goes out in one write: one syscall, not one each."""
        if not self.outgoing:
            asyncio.get_running_loop().call_soon(self.flush)
        self.outgoing.append(payload)

    def flush(self) -> None:
        if self.outgoing and self.transport is not None and not self.lost:
            self.transport.write(b"".join(self.outgoing))
        self.outgoing = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        pos = 0
        while self.pending:
            try:
                value, pos = parse(self.buffer, pos)
            except _Incomplete:
                break
            _, future = self.pending.popleft()
            if not future.done():
                future.set_result(value)
        del self.buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.fail(ConnectionError(f"redis connection lost: {exc}"))

    def fail(self, error: Exception) -> None:
        while self.pending:
            _, future = self.pending.popleft()
            if not future.done():
                future.set_exception(error)


class RespClient:
    """EVALSHA of one script over one pipelined connection, reconnecting when needed."""

    def __init__(self, url: str, *, timeout: float) -> None:
        parsed = urlparse(url)
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 6379
        self._db = int(parsed.path.strip("/") or 0)
        # redis://[user]:password@host: a password-protected Redis (the chart's) answers NOAUTH
        # to every command until AUTH; rediss:// is TLS, verified against the system CAs.
        self._auth = [unquote(p) for p in (parsed.username, parsed.password) if p]
        self._tls = ssl.create_default_context() if parsed.scheme == "rediss" else None
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def _connection(self) -> _Protocol:
        if self._protocol is not None and not self._protocol.lost:
            return self._protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._protocol is None or self._protocol.lost:
                loop = asyncio.get_running_loop()
                async with asyncio.timeout(self._timeout):  # a server that never answers
                    _, protocol = await loop.create_connection(
                        _Protocol, self._host, self._port, ssl=self._tls
                    )
                    if self._auth:
                        await self._authenticate(protocol)
                    if self._db:
                        await self._select(protocol)
                self._protocol = protocol
                if self._watchdog is None or self._watchdog.done():
                    self._watchdog = asyncio.create_task(self._watch())
            return self._protocol

    async def _authenticate(self, protocol: _Protocol) -> None:
        reply = await self._send(protocol, encode("AUTH", *self._auth))
        if isinstance(reply, RespError):  # a wrong password: this connection is useless
            assert protocol.transport is not None
            protocol.transport.close()
            raise reply

    async def _select(self, protocol: _Protocol) -> None:
        reply = await self._send(protocol, encode("SELECT", self._db))
        if isinstance(reply, RespError):  # no such database: writes must not go to db 0
            assert protocol.transport is not None
            protocol.transport.close()
            raise reply

    def _send(self, protocol: _Protocol, payload: bytes) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.pending.append((time.monotonic(), future))
        assert protocol.transport is not None
        protocol.send(payload)
        return future

    async def _watch(self) -> None:
        """Fail every pending call (and drop the connection) when the oldest waits too long."""
        while True:
            await asyncio.sleep(self._timeout / 4)
            protocol = self._protocol
            if protocol is None or protocol.lost:
                return
            if protocol.pending and time.monotonic() - protocol.pending[0][0] > self._timeout:
                protocol.fail(TimeoutError("redis did not answer in time"))
                if protocol.transport is not None:
                    protocol.transport.abort()

    async def call(self, *args: bytes | str | int) -> Any:
        try:
            protocol = await self._connection()
        except (OSError, TimeoutError) as exc:  # an OSError: callers catch it as before
            raise NotSent(f"redis unreachable: {exc!r}") from exc
        reply = await self._send(protocol, encode(*args))
        if isinstance(reply, RespError):
            raise reply
        return reply

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()


class Caller(Protocol):
    """What runs a command: a :class:`RespClient`, or the gateway's shared Redis backend."""

    async def call(self, *args: bytes | str | int) -> Any: ...


class Script:
    """A Lua script run by hash, loaded on first NOSCRIPT."""

    def __init__(self, client: Caller, source: str) -> None:
        self._client = client
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1

    async def __call__(self, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self._client.call("EVALSHA", self._sha, len(keys), *keys, *args)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            return await self._client.call("EVAL", self._source, len(keys), *keys, *args)
