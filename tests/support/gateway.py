"""Real parts for gateway tests: redis-server, simulated vLLM servers, gateway processes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import http.client
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from support.cluster import BIN_DIR, wait_for
from tokenfleet.accounting import usage_layout
from tokenfleet.devstack import processes
from tokenfleet.gateway import redis_client, usage_ledger
from tokenfleet.gateway.redis_client import encode, parse


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A child that dies with the test process, as the local stack starts its own."""
    return processes.spawn(Path(argv[0]).name, argv, log=log, env=env).popen


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def connections_to(port: int) -> int:
    """ESTABLISHED TCP connections whose remote end is 127.0.0.1:``port`` (from /proc)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclasses.dataclass(kw_only=True)
class Redis:
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = spawn(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            self.log,
        )
        wait_for("redis to listen", lambda: listening(self.port), timeout=20)

    def kill(self) -> None:
        if self.process is not None:
            stop(self.process, signal.SIGKILL)


@dataclasses.dataclass(kw_only=True)
class Sim:
    port: int
    model: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """Simulators are stateless; SIGTERM would wait for abandoned generations to drain."""
        stop(self.process, signal.SIGKILL)

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"{self.url}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")


def start_sim(tmp: Path, model: str, *args: str, port: int | None = None) -> Sim:
    """A simulator serving ``model`` (on ``port``, e.g. to bring one back where it was)."""
    port = port or free_port()
    log = tmp / f"sim-{model}-{port}.log"
    process = spawn(
        [
            str(BIN_DIR / "llm-d-inference-sim"),
            "--port",
            str(port),
            "--model",
            model,
            "--force-dummy-tokenizer",
            *args,
        ],
        log,
        env={"POD_IP": "127.0.0.1"},
    )
    sim = Sim(port=port, model=model, process=process, log=log)
    wait_for(f"simulator {model} on {port}", lambda: listening(port), timeout=30)
    return sim


def key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclasses.dataclass(kw_only=True)
class Gateway:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


def open_stream(
    gateway: Gateway,
    key: str,
    *,
    max_tokens: int,
    model: str = "m",
    prompt: str = "hi",
    timeout: float = 10,
    **extra: Any,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Start a streamed chat completion and return once its headers arrived (``extra``: more
    body fields, e.g. ignore_eos)."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=timeout)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        **extra,
    }
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    return conn, conn.getresponse()


def start_gateway(
    tmp: Path,
    config: dict[str, Any] | None,
    *args: str,
    env: dict[str, str] | None = None,
    ready: bool = True,
) -> Gateway:
    port = free_port()
    argv = [sys.executable, "-m", "tokenfleet.gateway", "--port", str(port), *args]
    if config is not None:
        path = tmp / f"gateway-{port}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv += ["--config", str(path)]
    log = tmp / f"gateway-{port}.log"
    process = spawn(argv, log, env={"TOKENFLEET_SALT_SECRET": "test-salt-secret", **(env or {})})
    gateway = Gateway(port=port, process=process, log=log)
    wait_for(
        "the gateway to listen", lambda: listening(port) or process.poll() is not None, timeout=30
    )
    assert process.poll() is None, log.read_text()[-2000:]
    if ready:
        wait_for("the gateway to be ready", lambda: gateway.get("/readyz")[0] == 200, timeout=60)
    return gateway


@contextlib.contextmanager
def running(gateway: Gateway) -> Iterator[Gateway]:
    try:
        yield gateway
    finally:
        stop(gateway.process)


def redis_get(redis: Redis, key: str) -> bytes | None:
    """One GET against the test's real Redis, in RESP (no client library needed)."""
    with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as s:
        s.sendall(encode("GET", key))
        reply = s.recv(65536)
        while not reply.endswith(b"\r\n") or (
            reply.startswith(b"$") and b"$-1" not in reply[:3] and reply.count(b"\r\n") < 2
        ):
            reply += s.recv(65536)
    value, _ = parse(reply, 0)
    return value if isinstance(value, bytes) else None


def gateway_metric(g: Gateway, name: str, **labels: str) -> float:
    """Sum of a gateway metric's samples whose labels include ``labels``."""
    _, text = g.get("/metrics")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def ledger_entries(redis_url: str, *, hours: int = 1) -> list[usage_layout.Entry]:
    """What the durable usage ledger in Redis holds for the last ``hours``, read as a later
    process would (``tokenfleet usage``): nothing of the gateway that wrote it is needed.

    A running gateway writes its ledger behind the requests, every FLUSH_SECONDS: this waits
    two of those first, so that what has settled is in Redis (a stopped one has flushed)."""
    time.sleep(2 * usage_ledger.FLUSH_SECONDS)

    async def read() -> list[usage_layout.Entry]:
        client = redis_client.RespClient(redis_url, timeout=2)
        now = datetime.datetime.now(datetime.UTC)
        try:
            found = await usage_ledger.read(
                client, since=now - datetime.timedelta(hours=hours), until=now
            )
        finally:
            await client.close()
        return usage_layout.entries(
            dict(f for e in entries for f in usage_layout.fields(e)) for _, entries in found
        )

    return asyncio.run(read())


def access_record(gateway: Gateway, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """The gateway's access-log line for ``request_id`` (it is written in batches)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in gateway.log.read_text().splitlines():
            if f'"request_id":"{request_id}"' in line:
                record: dict[str, Any] = json.loads(line)
                return record
        assert time.monotonic() < deadline, f"no access-log line for {request_id}"
        time.sleep(0.05)
