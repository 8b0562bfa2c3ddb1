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
    tokens = 20_000
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


class _Engine:
    """A minimal engine on a raw socket whose keep-alive times out just as the connection is
    reused: it answers a connection's first request, then closes the connection when the next
    one arrives, without an answer (what a server's idle timeout racing a new request does)."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            answered = False
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                if answered:
                    break  # the race: the request went out on a connection being closed
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                answered = True
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])


async def test_a_pooled_connection_closed_as_it_is_reused_is_retried_fresh_once() -> None:
    engine = _Engine()
    port = await engine.start()
    client = engine_http.Client(connect_seconds=2)
    try:
        for _ in range(5):
            async with client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}) as answer:
                assert answer.status == 200
                assert await answer.read() == b"ok"
    finally:
        await client.close()
        assert engine.server is not None
        engine.server.close()
    assert engine.connections == 5  # each reused connection failed once, then a fresh one


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
