"""Issue 35's attacks on a gateway's connections and feeds (a host process in static mode), each
seen failing on the code before its fix:

- a slow-header client (slowloris) is disconnected once its headers take longer than the header
  timeout, instead of holding a connection for aiohttp's default hour;
- a slow-body client gets 408 within the body timeout and holds no admission slot;
- sixteen 4 MiB bodies of tiny JSON values sent at once do not grow the process by more than
  200 MiB: each is counted before it is parsed (413), and a tenant's bodies in flight are
  bounded (429);
- a client that opens a stream with a one-hour deadline and never reads it does not pin the
  engine's slot: the gateway gives up after the write-stall timeout and closes the engine's
  connection (what makes vLLM abort the request);
- a worker whose ``/metrics`` page is malformed (NaN, infinities, garbage, invalid UTF-8) does
  not stop the load scraper: the gateway keeps reading every worker's page;
- a malformed line in a Kubernetes watch stream does not end the catalog's watch: the next event
  still arrives (the watch relists).

The engine here is a small stand-in HTTP server (fakes only where nothing real can do it): the
simulator cannot serve a malformed metrics page, nor a stream that never ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import kubernetes
import pytest

from support.gateway import Gateway, key_hash, running, start_gateway
from tokenfleet import kubeapi

KEY = "tfk-attack-" + "0" * 30
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
WRITE_STALL = 2.0
MALFORMED_PAGES = [
    b"vllm:num_requests_waiting nan\nvllm:num_requests_running 1\n",
    b"vllm:num_requests_waiting +Inf\nvllm:num_requests_running -Inf\n",
    b"vllm:num_requests_running 1e400\nvllm:kv_cache_usage_perc NaN\n",
    b"\xff\xfe\x00garbage{{{ \n vllm:num_requests_waiting\n",
]
EVENT = (
    b'data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
    b'"delta":{"content":"' + b"a" * 1000 + b'"}}]}\n\n'
)


class Engine(http.server.ThreadingHTTPServer):
    """A stand-in worker: ``/metrics`` serves the malformed pages in turn (then a valid one),
    counting reads; a chat completion streams events without end, recording when the gateway
    closed the connection."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.scrapes = 0
        self.streams_open = 0
        self.streams_closed = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: Engine
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/metrics"):
            with self.server.lock:
                n = self.server.scrapes
                self.server.scrapes += 1
            valid = b"vllm:num_requests_running 0\n"
            page = MALFORMED_PAGES[n] if n < len(MALFORMED_PAGES) else valid
            self._send(200, page, "text/plain")
        else:
            self._send(200, b"{}", "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.server.lock:
            self.server.streams_open += 1
        try:
            while True:  # never ends: only the gateway closing the connection stops it
                self.wfile.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
                self.wfile.flush()
        except OSError:
            with self.server.lock:
                self.server.streams_closed += 1

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    server = Engine()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-attacks")
    config = {
        "models": [{"name": "m", "endpoints": [engine.url], "maxConcurrency": 4}],
        "pools": [{"name": "default"}],
        "tenants": [{"name": "team", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}],
    }
    env = {
        "TOKENFLEET_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "TOKENFLEET_WRITE_STALL_SECONDS": str(WRITE_STALL),
    }
    args = ("--body-timeout", str(BODY_TIMEOUT), "--scrape-interval", "0.2")
    with running(start_gateway(tmp, config, *args, env=env)) as g:
        yield g
    assert "Traceback" not in g.log.read_text(), g.log.read_text()[-3000:]


def closed_within(sock: socket.socket, seconds: float, *, trickle: bytes = b"") -> float | None:
    """Seconds until the peer closed ``sock`` (sending ``trickle`` a byte a second, a slow
    client), or None if it was still open after ``seconds``."""
    started = time.monotonic()
    sock.settimeout(0.5)
    sent = 0
    while time.monotonic() - started < seconds:
        try:
            if sent < len(trickle):
                sock.sendall(trickle[sent : sent + 1])
                sent += 1
            data = sock.recv(65536)
            if not data:
                return time.monotonic() - started
        except TimeoutError:
            time.sleep(0.5)
        except OSError:  # reset: closed too
            return time.monotonic() - started
    return None


def test_a_slow_header_client_is_disconnected(gateway: Gateway) -> None:
    """Old: aiohttp's keep-alive timer (run_app's 75 s) was the only bound on the headers."""
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        trickle = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 60
        took = closed_within(sock, HEADER_TIMEOUT + 8, trickle=trickle)
    assert took is not None, "the gateway kept a slow-header connection open"


def test_an_idle_connection_that_sends_nothing_is_closed(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        assert closed_within(sock, HEADER_TIMEOUT + 8) is not None


def test_a_slow_body_client_gets_408_and_holds_no_slot(gateway: Gateway) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (KEY.encode(), len(body))
        )
        sock.settimeout(BODY_TIMEOUT + 8)
        started, answer = time.monotonic(), b""
        for byte in body[:-1]:  # a byte a second: the whole body would take a minute
            sock.sendall(bytes([byte]))
            try:
                sock.settimeout(1.0)
                answer = sock.recv(4096)
                if answer:
                    break
            except TimeoutError:
                pass
            if time.monotonic() - started > BODY_TIMEOUT + 8:
                break
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    _, metrics = gateway.get("/metrics")
    assert not [
        line
        for line in metrics.splitlines()
        if line.startswith("tokenfleet_gateway_in_flight") and not line.endswith(" 0.0")
    ]


def test_an_unread_stream_does_not_pin_the_engine(gateway: Gateway, engine: Engine) -> None:
    """Old: the relay waited for the client's buffer to drain until the deadline (an hour)."""
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    before = engine.streams_closed
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
    sock.connect(("127.0.0.1", gateway.port))
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nX-TokenFleet-Deadline-Ms: 3600000\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (KEY.encode(), len(body), body)
        )
        deadline = time.monotonic() + WRITE_STALL + 20
        while engine.streams_closed == before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert engine.streams_closed > before, "the engine's stream is still held open"
    finally:
        sock.close()


def dense_body(size: int = 4 * 1024 * 1024 - 1024) -> bytes:
    """A valid chat with a pass-through field of tiny values: ~24× its bytes once parsed."""
    head = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"x":['
    return head + b"{}," * ((size - len(head)) // 3) + b"{}]}"


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_concurrent_dense_bodies_do_not_exhaust_memory(gateway: Gateway) -> None:
    """Old: each 4 MiB body became ~96 MiB of objects before any limit; 16 at once took the
    process from ~70 MiB to ~1.3 GiB (bench/intake_memory.py). Now each is counted before it is
    parsed (413), and the bodies a tenant may hold in flight are bounded (429)."""
    payload, started = dense_body(), peak_rss_mib(gateway.process.pid)

    def send(_: int) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        conn.request("POST", "/v1/chat/completions", body=payload, headers=headers)
        return conn.getresponse().status

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(send, range(16)))
    assert set(statuses) <= {413, 429}, statuses
    assert 413 in statuses
    grown = peak_rss_mib(gateway.process.pid) - started
    assert grown < 200, f"the gateway grew by {grown:.0f} MiB"


def test_malformed_metrics_pages_do_not_stop_the_scraper(engine: Engine, gateway: Gateway) -> None:
    """Old: float('nan') parsed, then int(nan) raised ValueError out of the scrape loop, whose
    task died: no worker was scraped again for the life of the process."""
    deadline = time.monotonic() + 10
    while engine.scrapes < len(MALFORMED_PAGES) + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.scrapes >= len(MALFORMED_PAGES) + 5, f"scraping stopped at {engine.scrapes}"


class Watched(http.server.BaseHTTPRequestHandler):
    """A stand-in API server: a list of one pod, then a watch whose first line is garbage and
    whose second is a valid ADDED event; a relist lists both pods."""

    protocol_version = "HTTP/1.1"
    lists = 0

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if "watch=1" in self.path:
            lines = [
                b"{not json\n",
                b'{"type":"ADDED","object":{"metadata":{"uid":"u2","name":"b"}}}\n',
                b'{"type":"ADDED","object":"not an object"}\n',
                b'{"type":"MODIFIED"}\n',
            ]
            body = b"".join(lines)
        else:
            Watched.lists += 1
            items = [{"metadata": {"uid": "u1", "name": "a"}}]
            if Watched.lists > 1:
                items.append({"metadata": {"uid": "u2", "name": "b"}})
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_malformed_watch_line_does_not_end_the_watch() -> None:
    """Old: json.loads raised out of list_watch, ending the catalog's watch for good."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Watched)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def names() -> list[str]:
        config = kubernetes.client.Configuration()
        config.host = f"http://127.0.0.1:{server.server_address[1]}"
        seen: list[str] = []
        async with aiohttp.ClientSession() as session:
            api = kubeapi.KubeApi(configuration=config, session=session)
            async with asyncio.timeout(15):
                async for kind, obj in api.list_watch("/api/v1/pods"):
                    if kind != "SYNCED":
                        seen.append(f"{kind} {obj['metadata']['name']}")
                    if "ADDED b" in seen:
                        break
        return seen

    try:
        seen = asyncio.run(names())
    finally:
        server.shutdown()
    assert seen[0] == "ADDED a" and "ADDED b" in seen


class Resumed(http.server.BaseHTTPRequestHandler):
    """A stand-in API server whose watches end at once (as the real one ends each at its
    timeoutSeconds): the first carries an event at version 5, the next ones nothing. It records
    every request's path."""

    protocol_version = "HTTP/1.1"
    paths: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        Resumed.paths.append(self.path)
        if "watch=1" in self.path and "resourceVersion=1&" in self.path + "&":
            meta = {"uid": "u2", "name": "b", "resourceVersion": "5"}
            body = json.dumps({"type": "ADDED", "object": {"metadata": meta}}).encode() + b"\n"
        elif "watch=1" in self.path:
            body = b""
        else:
            items = [{"metadata": {"uid": "u1", "name": "a"}}]
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_watch_the_server_ends_resumes_from_its_last_version_without_a_relist() -> None:
    """The gateway asks for bounded watches (timeoutSeconds), so a watch that went silently
    dead — an API server that stopped answering and came back — is replaced within a minute;
    each ended watch resumes from the last resourceVersion seen, not with a full list. (Before,
    watches had no timeoutSeconds and were replaced only after 120 s without a byte, and an
    ended watch relisted the collection.)"""
    Resumed.paths = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Resumed)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def follow() -> None:
        config = kubernetes.client.Configuration()
        config.host = f"http://127.0.0.1:{server.server_address[1]}"
        async with aiohttp.ClientSession() as session:
            api = kubeapi.KubeApi(configuration=config, session=session)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3):
                    async for _kind, _obj in api.list_watch("/api/v1/pods"):
                        pass

    try:
        asyncio.run(follow())
    finally:
        server.shutdown()
    lists = [p for p in Resumed.paths if "watch=1" not in p]
    watches = [p for p in Resumed.paths if "watch=1" in p]
    assert len(lists) == 1, Resumed.paths  # never relisted
    assert all(f"timeoutSeconds={kubeapi.WATCH_SECONDS}" in p for p in watches), watches
    assert "resourceVersion=1" in watches[0] and len(watches) >= 2, watches
    assert all("resourceVersion=5" in p for p in watches[1:]), watches
