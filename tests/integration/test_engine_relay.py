"""The gateway's own engine client and its relay below StreamResponse, against real simulators
and raw sockets: back-pressure from a slow client reaches the engine, keep-alive connections
are reused, an HTTP/1.0 client gets an unchunked stream, and engines that close connections
(after an answer, or idle ones as they are reused) cost no request."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import wait_for
from support.gateway import (
    Gateway,
    Sim,
    connections_to,
    key_hash,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.gateway import engine_http

KEY = "tfk-relay-" + "0" * 32


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-relay")


@pytest.fixture(scope="module")
def sim(tmp: Path) -> Iterator[Sim]:
    s = start_sim(tmp, "m", "--max-num-seqs", "8", "--max-model-len", "100000")
    yield s
    s.kill()


@pytest.fixture(scope="module")
def gateway(tmp: Path, sim: Sim) -> Iterator[Gateway]:
    config = {
        "models": [{"name": "m", "endpoints": [sim.url], "maxConcurrency": 8}],
        "tenants": [{"name": "relay", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}],
    }
    with running(start_gateway(tmp, config)) as g:
        yield g


def _request(max_tokens: int, *, version: str = "1.1") -> bytes:
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
        }
    ).encode()
    return (
        f"POST /v1/chat/completions HTTP/{version}\r\nHost: gw\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


#: Tokens of an answer long enough to back the engine's connection up behind a client that reads
#: nothing: ~200 bytes an event, about 12 MB, well past what the gateway-to-client socket may buffer
#: on its own (tcp_wmem's 4 MB maximum here). 20,000 tokens (~4 MB) could all fit there, and a
#: fresh-clone run once waited 30 s for a back-up that never came.
LONG_ANSWER = 60_000


def _read_all(sock: socket.socket, *, until: bytes) -> bytes:
    data = bytearray()
    while True:
        piece = sock.recv(1 << 16)
        if not piece:
            break
        data += piece
        if until in data[-len(piece) - len(until) :]:  # the tail only: answers are megabytes
            break
    return bytes(data)


def _unread_from(port: int) -> int:
    """Bytes received but not read yet on the sockets connected to 127.0.0.1:``port``."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[2].split(":")[1], 16) == port:
            total += int(fields[4].split(":")[1], 16)
    return total


def test_a_slow_client_stops_the_gateway_reading_the_engine_and_then_gets_every_token(
    gateway: Gateway, sim: Sim
) -> None:
    """While the client reads nothing, the relay stops reading the engine's connection (its
    unread bytes pile up in the kernel, towards the engine), instead of buffering the whole
    answer in the gateway; once the client reads, every token arrives, in order, and [DONE]."""
    tokens = LONG_ANSWER
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        client.sendall(_request(tokens))
        wait_for(
            "the engine's connection to the gateway to back up",
            lambda: _unread_from(sim.port) > 64 * 1024,
            timeout=30,
        )
        time.sleep(0.5)
        # still held: the gateway is not draining the engine into its own memory (without the
        # pause it would, and this falls to 0 within milliseconds)
        assert _unread_from(sim.port) > 32 * 1024
        raw = _read_all(client, until=b"data: [DONE]")
    events = [e for e in raw.split(b"\n\n") if b'"content":"' in e]
    assert len(events) == tokens
    assert raw.rstrip().endswith(b"data: [DONE]") or b"data: [DONE]" in raw[-64:]


def _gaps_over(gateway: Gateway, seconds: str) -> float:
    """Inter-token gaps the gateway recorded above ``seconds`` (a bucket bound), all models."""
    _, text = gateway.get("/metrics")
    name = "tokenfleet_gateway_inter_token_latency_seconds_bucket"
    total = below = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{"):
            value = float(line.rsplit(" ", 1)[1])
            if 'le="+Inf"' in line:
                total += value
            elif f'le="{seconds}"' in line:
                below += value
    return total - below


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_slow_client_does_not_count_as_engine_inter_token_latency(
    gateway: Gateway, sim: Sim, version: str
) -> None:
    """The inter-token latency the gateway records — what canary analysis and the alerts judge
    the engine by — is the engine's: a client that stops reading for 2 s backs the stream up,
    yet no gap of a second or more is recorded (the simulator makes a token every few ms). It
    did count the client's stall: a same-weights canary behind slow readers was rolled back on
    630 ms against 26 ms."""
    before = _gaps_over(gateway, "1.0")
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        client.sendall(_request(LONG_ANSWER, version=version))
        wait_for(
            "the engine's connection to the gateway to back up",
            lambda: _unread_from(sim.port) > 64 * 1024,
            timeout=30,
        )
        time.sleep(2.0)
        raw = _read_all(client, until=b"data: [DONE]")
    assert b"data: [DONE]" in raw[-64:]
    assert _gaps_over(gateway, "1.0") == before


def test_an_http_1_0_client_gets_the_stream_unchunked_until_the_connection_closes(
    gateway: Gateway,
) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as client:
        client.sendall(_request(20, version="1.0"))
        raw = b""
        while piece := client.recv(1 << 16):
            raw += piece
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding" not in head.lower()
    assert body.startswith(b"data: {"), body[:40]  # no chunk-size line before the first event
    assert len([e for e in body.split(b"\n\n") if b'"content":"' in e]) == 20
    assert body.rstrip().endswith(b"data: [DONE]")


def test_requests_in_a_row_reuse_one_engine_connection(gateway: Gateway, sim: Sim) -> None:
    wait_for("earlier streams to close", lambda: connections_to(sim.port) <= 1, timeout=30)
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as client:
            client.sendall(_request(3))
            assert b"data: [DONE]" in _read_all(client, until=b"data: [DONE]")
        time.sleep(0.05)  # the gateway has pooled the connection once the last chunk is read
    assert connections_to(sim.port) == 1


async def _serve(handle: Any) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


async def test_connections_the_engine_closes_after_answering_leave_the_pool() -> None:
    """An engine that closes each connection after its answer (a keep-alive timeout, a restart)
    costs nothing: the closed connection leaves the pool, and the next request connects anew."""
    accepted = 0

    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server, port = await _serve(answer_once)
    client = engine_http.Client(connect_seconds=2)
    try:
        for _ in range(5):
            async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
                assert (answer.status, await answer.read()) == (200, b"ok")
            await asyncio.sleep(0.05)  # the close has arrived
            assert client._idle == {}  # nothing dead kept, not even the origin's entry
    finally:
        await client.close()
        server.close()
    assert accepted == 5


async def test_a_request_on_a_connection_that_breaks_is_not_sent_twice() -> None:
    """The engine takes a request on a kept-alive connection, then the connection breaks
    before the answer: Broken, and the request reached the engine once (a resend would run a
    POST twice; attempts.py decides whether another endpoint should try)."""
    requests = 0

    async def break_the_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await _read_request(reader)
        requests += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await _read_request(reader)
        requests += 1
        await asyncio.sleep(0.2)  # works on it a while, then the connection breaks
        writer.transport.abort()

    server, port = await _serve(break_the_second)
    client = engine_http.Client(connect_seconds=2)
    try:
        async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
            assert await answer.read() == b"ok"
        with pytest.raises(engine_http.Broken, match="closed the connection"):
            async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}):
                pass
        await asyncio.sleep(0.3)
    finally:
        await client.close()
        server.close()
    assert requests == 2


async def test_a_pause_on_the_last_piece_does_not_follow_the_connection_to_the_pool() -> None:
    """A relay whose client is slow when the answer's last piece arrives pauses the engine's
    connection; the connection that goes back to the pool must be read again, or the next
    request on it would hang."""
    second_answered = asyncio.Event()

    async def two_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(b"3\r\ntwo\r\n0\r\n\r\n")  # the last piece and the end, at once
        await writer.drain()
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        second_answered.set()

    server, port = await _serve(two_answers)
    client = engine_http.Client(connect_seconds=2)
    got: list[bytes] = []
    try:
        async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
            first = await answer.next_piece()
            assert first is not None
            got.append(first)
            await answer.relay(got.append, slow=lambda: True, drained=lambda: asyncio.sleep(0.01))
        async with asyncio.timeout(3):
            async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
                assert await answer.read() == b"ok"
    finally:
        await client.close()
        server.close()
    assert got == [b"one", b"two"] and second_answered.is_set()


async def test_a_reader_that_falls_behind_holds_a_bounded_buffer() -> None:
    """Read piece by piece (an HTTP/1.0 client's relay), at most about BUFFERED_BYTES wait in
    the gateway; the engine is not read meanwhile, and nothing is lost."""
    piece = b"x" * 4096
    pieces = 2000  # 8 MB, far more than the bound

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(pieces):
            writer.write(b"1000\r\n" + piece + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server, port = await _serve(flood)
    client = engine_http.Client(connect_seconds=2)
    try:
        async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
            await asyncio.sleep(0.5)  # the reader is busy elsewhere
            held = answer._buffered
            total = 0
            while (got := await answer.next_piece()) is not None:
                total += len(got)
    finally:
        await client.close()
        server.close()
    assert held <= engine_http.BUFFERED_BYTES + 256 * 1024, held  # the bound and one read
    assert total == pieces * len(piece)


async def test_an_unreachable_engine_and_a_broken_answer_raise_broken() -> None:
    client = engine_http.Client(connect_seconds=2)

    async def garbage(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]  # bound, never listening: connection refused
        with pytest.raises(engine_http.Broken, match="cannot connect"):
            async with client.post(f"http://127.0.0.1:{closed}/v1/x", b"{}", {}):
                pass
        with pytest.raises(engine_http.Broken, match="not valid HTTP"):
            async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}):
                pass
    finally:
        await client.close()
        server.close()
