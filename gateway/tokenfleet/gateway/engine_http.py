"""The gateway's HTTP/1.1 client for engines and remote gateways: one request per exchange on
pooled keep-alive connections, built on an asyncio protocol.

Why not aiohttp's client, which the gateway used before: per request it builds a request and a
response object, a stream reader and (on Python 3.11) a task to write the body; per streamed
chunk it wakes the relaying task through that reader. Here a request goes out in one write, and
a stream's pieces reach the relay's sink straight from ``data_received``, so relaying a token
costs a parse and a write, not a task switch (``bench/gateway_overhead.py`` measures both).

Exchanges end in one of two ways. Read to the end, the connection goes back to the pool
(unless the engine said ``Connection: close``). Left early — the client went away, the deadline
passed, a sink failed — the connection is closed, which is what makes vLLM abort the request and
free its KV cache.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import cast

from tokenfleet.gateway.engine_keys import EngineKeys
from tokenfleet.gateway.policy.http1 import Head, ParseError, ResponseParser

IDLE_SECONDS = 4.0  # under uvicorn's 5 s keep-alive (vLLM's server), so it never closes first
BUFFERED_BYTES = 256 * 1024  # body bytes held for a reader before the engine is not read


class Broken(Exception):
    """The engine could not be reached, or its connection failed before the answer ended."""


Sink = Callable[[bytes], None]
"""Takes each body piece as it arrives; raising stops the exchange (its connection closes)."""


class _Connection(asyncio.Protocol):
    __slots__ = ("exchange", "forget", "idle_since", "lost", "origin", "transport")

    def __init__(self, origin: tuple[str, str, int], forget: Callable[[_Connection], None]) -> None:
        self.origin = origin
        self.forget = forget  # the pool drops it once it is lost
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self.exchange: Exchange | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:  # nothing was asked: a server that talks out of turn is dropped
            self.close()
            return
        self.exchange.received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.exchange is not None:
            self.exchange.lost(exc)
        else:
            self.forget(self)

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


class Exchange:
    """One request's answer: the head once it arrived, then the body, read whole or relayed."""

    __slots__ = (
        "_buffered",
        "_error",
        "_head",
        "_parser",
        "_paused",
        "_pieces",
        "_sink",
        "_waiter",
        "connection",
    )

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection
        self._parser = ResponseParser()
        self._head: asyncio.Future[Head] = asyncio.get_running_loop().create_future()
        self._pieces: collections.deque[bytes] = collections.deque()
        self._buffered = 0  # bytes in _pieces
        self._paused = False  # the engine's connection is not being read
        self._sink: Sink | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    # --- from the connection, in its data_received and connection_lost --------------------------

    def received(self, data: bytes) -> None:
        try:
            pieces = self._parser.feed(data)
        except ParseError as exc:
            self._fail(Broken(f"the engine's answer is not valid HTTP: {exc}"))
            return
        if self._parser.head is not None and not self._head.done():
            self._head.set_result(self._parser.head)
        sink = self._sink
        if sink is None:  # a reader takes them: held, up to a bound
            for piece in pieces:
                self._pieces.append(piece)
                self._buffered += len(piece)
            if self._buffered > BUFFERED_BYTES:
                self._pause()
            if pieces:
                self._wake()
        else:  # relayed here, in the read: the relaying task sleeps until the end (or a pause)
            for piece in pieces:
                try:
                    sink(piece)
                except BaseException as exc:  # the sink's reason ends the exchange
                    self._fail(exc)
                    return
        if self._parser.done:
            self._wake()

    def lost(self, exc: Exception | None) -> None:
        self._parser.closed()
        if self._parser.done:
            self._wake()
            return
        self._fail(Broken(f"the engine closed the connection mid-answer ({exc or 'EOF'})"))

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.connection.close()
        if not self._head.done():
            self._head.set_exception(exc)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self) -> None:
        transport = self.connection.transport
        if not self._paused and transport is not None:
            self._paused = True
            transport.pause_reading()

    def _resume(self) -> None:
        transport = self.connection.transport
        if self._paused and transport is not None:
            self._paused = False
            transport.resume_reading()

    async def _next_event(self) -> None:
        """Until something arrives: a piece, the end, a failure or a wake from the sink."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _settled(self) -> bool:
        """The body ended (True) or failed (raises); False while it goes on."""
        if self._error is not None:
            raise self._error
        return self._parser.done

    # --- for the caller --------------------------------------------------------------------------

    @property
    def status(self) -> int:
        return self._head.result().status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._head.result().headers

    async def head(self) -> Head:
        return await self._head

    async def read(self) -> bytes:
        """The whole body."""
        self._resume()  # a whole body is read, however long: the bound is for relays
        while not self._settled():
            if self._paused:
                self._resume()
            await self._next_event()
        body = b"".join(self._pieces)
        self._pieces.clear()
        self._buffered = 0
        return body

    async def next_piece(self) -> bytes | None:
        """The next body piece; None once the body ended. While the caller is slow to ask,
        at most BUFFERED_BYTES are held and the engine waits."""
        while not self._pieces:
            self._resume()
            if self._settled():
                return None
            await self._next_event()
        piece = self._pieces.popleft()
        self._buffered -= len(piece)
        if self._buffered <= BUFFERED_BYTES // 2:
            self._resume()
        return piece

    async def relay(
        self, sink: Sink, *, slow: Callable[[], bool], drained: Callable[[], Awaitable[object]]
    ) -> None:
        """Hand every further piece to ``sink`` as it arrives, until the body ends; raise what
        failed it (the sink's own exception included).

        ``slow()`` is asked after each piece: once it says so, the engine's connection is not
        read (TCP back-pressure reaches the engine) until ``await drained()`` returns."""
        while self._pieces:
            piece = self._pieces.popleft()
            self._buffered -= len(piece)
            sink(piece)
        self._resume()

        def relayed(piece: bytes) -> None:
            sink(piece)
            if not self._paused and slow():
                self._pause()
                self._wake()

        self._sink = relayed
        try:
            while not self._settled():
                if self._paused:
                    await drained()
                    self._resume()
                    continue
                await self._next_event()
        finally:
            self._sink = None
            self._resume()  # a pause on the last piece must not follow the connection to the pool

    def reusable(self) -> bool:
        """Whether the connection can carry another request."""
        head = self._parser.head
        return (
            self._parser.done
            and self._error is None
            and not self._paused
            and head is not None
            and head.keep_alive
            and not self._parser.until_close
            and not self.connection.lost
        )


def _header_lines(headers: Mapping[str, str]) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    if lines.count("\n") != len(headers) or "\r" in lines.replace("\r\n", ""):
        raise ValueError("a header name or value holds a line break")
    return lines.encode("latin-1", errors="replace")


class Client:
    """Pooled connections per origin (scheme, host, port); no limit on their number, as the
    gateway's admission already bounds what is in flight.

    A request is sent once: a connection that fails before the answer raises Broken, and the
    caller (attempts.py) decides whether to try another endpoint. Resending here would run a
    POST twice whenever the engine had taken it before the connection broke."""

    def __init__(self, *, connect_seconds: float, engine_keys: EngineKeys | None = None) -> None:
        self._connect_seconds = connect_seconds
        # Engines serve behind vLLM's --api-key, each namespace's its own (the operator's
        # plan.isolation): a request to an engine names its namespace and goes with that key.
        self._engine_keys = engine_keys or EngineKeys()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._ssl: ssl.SSLContext | None = None
        self._urls: dict[str, tuple[tuple[str, str, int], bytes]] = {}
        self._swept = time.monotonic()

    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes]:
        """(origin, the request line and Host header) of ``url``, worked out once per URL."""
        known = self._urls.get(url)
        if known is None:
            parts = urllib.parse.urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme not in ("http", "https") or not parts.hostname:
                raise Broken(f"not an http(s) URL: {url}")
            port = parts.port or (443 if scheme == "https" else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rpartition("@")[2]
            start = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
            if len(self._urls) >= 4096:  # endpoints × paths: only churn ever gets here
                self._urls.clear()
            known = self._urls[url] = ((scheme, parts.hostname, port), start)
        return known

    @contextlib.asynccontextmanager
    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        engine_namespace: str | None = None,
    ) -> AsyncIterator[Exchange]:
        """Send one POST; yield its exchange once the answer's head arrived. Leaving the block
        pools the connection if the answer was read to its end, else closes it.
        ``engine_namespace``: the POST goes to an engine of that namespace, with its key ("":
        static mode's engines, the configured key); None: to anything else (a remote, which
        gets only the Authorization in ``headers``)."""
        origin, start = self._target(url)
        own = any(name.lower() == "authorization" for name in headers)
        auth = (
            b""
            if own or engine_namespace is None
            else self._engine_keys.header_line(engine_namespace)
        )
        request = b"%sContent-Length: %d\r\n%s%s\r\n%s" % (
            start,
            len(body),
            auth,
            _header_lines(headers),
            body,
        )
        exchange = await self._send(origin, request)
        try:
            await exchange.head()
            yield exchange
        except BaseException:
            self._done(exchange, reuse=False)
            raise
        self._done(exchange, reuse=exchange.reusable())

    async def _send(self, origin: tuple[str, str, int], request: bytes) -> Exchange:
        connection = self._pooled(origin) or await self._connect(origin)
        exchange = connection.exchange = Exchange(connection)
        self._busy.add(connection)
        assert connection.transport is not None
        connection.transport.write(request)
        return exchange

    def _pooled(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recent: the least likely to have been closed
            transport = connection.transport
            if connection.lost or transport is None or transport.is_closing():
                continue
            if now - connection.idle_since > IDLE_SECONDS:
                connection.close()
                continue
            return connection
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_seconds):
                _, connection = await loop.create_connection(
                    lambda: _Connection(origin, self._forget),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context else None,
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise Broken(f"cannot connect to {host}:{port}: {type(exc).__name__}") from None
        return connection

    def _done(self, exchange: Exchange, *, reuse: bool) -> None:
        connection = exchange.connection
        connection.exchange = None
        self._busy.discard(connection)
        if not reuse:
            connection.close()
            return
        now = connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, []).append(connection)
        if now - self._swept > IDLE_SECONDS:
            self._sweep(now)

    def _forget(self, connection: _Connection) -> None:
        """An idle connection the other end closed: out of the pool (and its origin with it)."""
        idle = self._idle.get(connection.origin)
        if idle is not None and connection in idle:
            idle.remove(connection)
            if not idle:
                del self._idle[connection.origin]

    def _sweep(self, now: float) -> None:
        """Close what idled too long (the pool takes the newest first, so the oldest stay)."""
        self._swept = now
        for origin, idle in list(self._idle.items()):
            while idle and now - idle[0].idle_since > IDLE_SECONDS:
                idle.pop(0).close()
            if not idle:
                del self._idle[origin]

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        for connection in list(self._busy):
            connection.close()
        self._busy.clear()
