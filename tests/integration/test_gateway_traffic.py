"""The gateway under real traffic: token quotas per tenant and across replicas (real Redis),
priority admission under overload, cancellation on disconnect, broken streams, Redis failures."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import socket
import statistics
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from support.cluster import wait_for
from support.gateway import (
    Gateway,
    Redis,
    Sim,
    access_record,
    connections_to,
    free_port,
    gateway_metric,
    key_hash,
    ledger_entries,
    open_stream,
    redis_get,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.gateway import engine_http, proxy
from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.signals import gateway as names
from tokenfleet.signals import usage

KEYS = {
    name: f"tfk-{name}-" + "0" * 30
    for name in ("greedy", "calm", "critical", "interactive", "batch", "solo")
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-traffic")


@pytest.fixture(scope="module")
def fast(tmp: Path) -> Iterator[Sim]:
    s = start_sim(tmp, "m", "--max-num-seqs", "16", "--inter-token-latency", "1ms")
    yield s
    s.kill()


def tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {"name": name, "apiKeyHashes": [key_hash(KEYS[name])], "allowedModels": ["*"], **spec}


def config(sim: Sim, tenants: list[dict[str, Any]], **pool: Any) -> dict[str, Any]:
    return {
        "models": [
            {
                "name": sim.model,
                "endpoints": [sim.url],
                "maxConcurrency": pool.pop("concurrency", 16),
            }
        ],
        "pools": [{"name": "default", **pool}],
        "tenants": tenants,
    }


def call(
    gateway: Gateway,
    key: str,
    *,
    max_tokens: int = 20,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    ignore_eos: bool = False,
) -> tuple[int, dict[str, Any], dict[str, str], float]:
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hello " * 8}],
        "max_tokens": max_tokens,
        "stream": stream,
        **({"ignore_eos": True} if ignore_eos else {}),
    }
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    payload = json.loads(raw) if not stream or r.status != 200 else {"raw": raw.decode()}
    return r.status, payload, dict(r.getheaders()), time.monotonic() - start


def test_one_tenant_over_its_token_quota_does_not_touch_the_other(
    tmp: Path, redis: Redis, fast: Sim
) -> None:
    cfg = config(fast, [tenant("greedy", quotas={"tokensPerMinute": 600}), tenant("calm")])
    with running(start_gateway(tmp, cfg, "--redis", redis.url)) as g:
        before = [call(g, KEYS["calm"])[3] for _ in range(15)]
        # every answer is the full 100 tokens (the simulator otherwise picks a random length,
        # and 12 answers of ~50 tokens fit the 600-token minute: no 429, by chance)
        greedy = [call(g, KEYS["greedy"], max_tokens=100, ignore_eos=True) for _ in range(12)]
        during = [call(g, KEYS["calm"]) for _ in range(15)]
    statuses = [s for s, *_ in greedy]
    assert statuses[:4] == [200] * 4 and 429 in statuses
    refused = next(r for r in greedy if r[0] == 429)
    assert (
        refused[1]["error"]["code"] == "rate_limit_exceeded" and int(refused[2]["Retry-After"]) >= 1
    )
    assert all(s == 200 for s, *_ in during), "the calm tenant was refused"
    assert statistics.median(r[3] for r in during) < statistics.median(before) * 2 + 0.02


def test_two_replicas_enforce_one_combined_quota(tmp: Path, redis: Redis, fast: Sim) -> None:
    cfg = config(
        fast, [tenant("solo", quotas={"requestsPerMinute": 10, "tokensPerMinute": 100000})]
    )
    first = start_gateway(tmp, cfg, "--redis", redis.url)
    second = start_gateway(tmp, cfg, "--redis", redis.url)
    with running(first), running(second):
        results = [
            call(first if i % 2 else second, KEYS["solo"], max_tokens=5)[0] for i in range(30)
        ]
    counts = Counter(results)
    # 10 per minute shared by both; at most one more refills during the ~1 s this takes.
    assert 10 <= counts[200] <= 11, counts
    assert counts[429] == 30 - counts[200]


def test_under_overload_batch_is_shed_first_and_critical_is_served(tmp: Path) -> None:
    slow = start_sim(
        tmp,
        "m",
        "--max-num-seqs",
        "2",
        "--time-to-first-token",
        "200ms",
        "--inter-token-latency",
        "10ms",
    )
    classes = [
        {"name": "critical", "priority": 300, "reservedPercent": 50},
        {"name": "interactive", "priority": 200, "maxQueueDepth": 20, "maxQueueAgeMs": 8000},
        {"name": "batch", "priority": 100, "maxQueueDepth": 4, "maxQueueAgeMs": 1500},
    ]
    cfg = config(
        slow,
        [
            tenant("critical", priorityClass="critical"),
            tenant("interactive"),
            tenant("batch", priorityClass="batch"),
        ],
        admission={"classes": classes},
        concurrency=2,
    )
    with running(start_gateway(tmp, cfg)) as g, concurrent.futures.ThreadPoolExecutor(40) as pool:
        jobs = [("batch", pool.submit(call, g, KEYS["batch"], max_tokens=5)) for _ in range(16)]
        time.sleep(0.2)
        jobs += [
            ("interactive", pool.submit(call, g, KEYS["interactive"], max_tokens=5))
            for _ in range(8)
        ]
        jobs += [
            ("critical", pool.submit(call, g, KEYS["critical"], max_tokens=5)) for _ in range(4)
        ]
        outcome = Counter((cls, job.result()[0]) for cls, job in jobs)
        metrics = urllib.request.urlopen(g.url + "/metrics").read().decode()
    slow.kill()
    assert outcome[("critical", 200)] == 4, outcome
    assert outcome[("interactive", 200)] == 8, outcome
    shed = sum(n for (cls, status), n in outcome.items() if cls == "batch" and status in (429, 503))
    assert shed >= 8, outcome
    assert (
        'tokenfleet_gateway_requests_total{class="batch"' in metrics
        and 'outcome="rejected"' in metrics
    )


def test_disconnect_mid_stream_cancels_upstream_and_releases_the_reservation(
    tmp: Path, redis: Redis
) -> None:
    """Closing the upstream connection is what makes vLLM abort a request and free its KV cache.

    llm-d-inference-sim v0.10.2 does not abort on a closed connection (it drains the remaining
    tokens at the inter-token pace), so its running gauge cannot show the cancellation; the
    gateway's side of it — the upstream connection closed at once — is asserted directly.
    """
    slow = start_sim(tmp, "m", "--max-num-seqs", "4", "--inter-token-latency", "50ms")
    cfg = config(slow, [tenant("solo", quotas={"maxConcurrent": 1})], concurrency=4)
    with running(start_gateway(tmp, cfg, "--redis", redis.url)) as g:
        conn, response = open_stream(g, KEYS["solo"], max_tokens=400, timeout=10)
        assert response.status == 200 and response.read(200)
        assert slow.metric("vllm:num_requests_running") == 1
        assert connections_to(slow.port) == 1
        conn.sock.shutdown(socket.SHUT_RDWR)  # the client walks away mid-stream (close() would
        conn.close()  # leave the connection open while the response still holds the socket)
        wait_for(
            "the gateway to close the upstream connection",
            lambda: connections_to(slow.port) == 0,
            timeout=1.0,
            every=0.02,
        )
        status, payload, *_ = call(g, KEYS["solo"], max_tokens=3)
        assert status == 200, payload  # the concurrency slot came back
    slow.kill()


def test_a_client_that_closes_right_after_the_last_event_was_served_and_settled(
    fast: Sim, tmp: Path, redis: Redis
) -> None:
    """Many clients (guidellm, curl, httpx) close the connection as soon as [DONE] arrives,
    which cancels the handler while it settles. Each such request was served: it is counted and
    logged as served, and its settlement finishes (the concurrency slot in Redis comes back)."""
    cfg = config(fast, [tenant("solo", quotas={"maxConcurrent": 4})], concurrency=4)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    payload = json.dumps({**body, "stream": True}).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
        f"{KEYS['solo']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    rounds = 40
    with running(start_gateway(tmp, cfg, "--redis", redis.url)) as g:
        for _ in range(rounds):
            with socket.create_connection(("127.0.0.1", g.port), timeout=10) as client:
                client.sendall(request)
                seen = b""
                while b"data: [DONE]" not in seen:
                    piece = client.recv(65536)
                    assert piece, seen
                    seen += piece
            # closed at once, as the [DONE] arrived
        wait_for(
            "every request counted",
            lambda: gateway_metric(g, names.REQUESTS, tenant="solo") >= rounds,
            timeout=5,
        )
        served = gateway_metric(g, names.REQUESTS, tenant="solo", outcome="served")
        cancelled = gateway_metric(g, names.REQUESTS, tenant="solo", outcome="cancelled")
        slots = redis_get(redis, quotas.keys("solo", 0)[3])
    assert (served, cancelled) == (rounds, 0)
    assert int(slots or 0) == 0  # every settlement finished: no slot held


async def test_a_write_to_a_client_that_left_is_a_cancellation_not_an_engine_failure(
    tmp: Path,
) -> None:
    """A write to a client that left fails like an engine that broke off would (aiohttp raises
    a ClientError for it; the relay's own writes find the transport closing). The relay must
    tell them apart: a client leaving is a cancellation (the engine's endpoint is not marked
    failed, the request is not counted as an upstream error). The server here does not cancel
    its handler on disconnect, so the write is what notices."""
    sim = start_sim(tmp, "m", "--max-num-seqs", "4", "--inter-token-latency", "20ms")
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[BaseException | proxy.Outcome] = loop.create_future()
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body |= {"max_tokens": 400, "stream": True, "ignore_eos": True}

    async def relay(request: web.Request) -> web.StreamResponse:
        call = proxy.Call(
            url=sim.url + "/v1/chat/completions",
            body=json.dumps(body).encode(),
            stream=True,
            strip_usage=False,
            deadline=time.monotonic() + 30,
            headers={},
            upstream_headers={"Content-Type": "application/json"},
            served_by="m",
        )
        try:
            outcome = await proxy.forward(
                call, client=engines, request=request, meter=proxy.Meter()
            )
        except BaseException as exc:
            ended.set_result(exc)
            raise
        ended.set_result(outcome)
        assert outcome.response is not None
        return outcome.response

    app = web.Application()
    app.router.add_post("/relay", relay)
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    engines = engine_http.Client(connect_seconds=5)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /relay HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        seen = 0
        while seen < 5:
            seen += b'"content":"' in await reader.readline()
        writer.transport.abort()  # the client leaves mid-stream
        what = await asyncio.wait_for(ended, timeout=5)
        # a cancellation (what the handler counts as the client leaving), not an Outcome
        # with an upstream error nor a ClientError a caller would retry
        assert isinstance(what, ConnectionResetError), what
        assert not isinstance(what, aiohttp.ClientError), what
        deadline = time.monotonic() + 5
        while connections_to(sim.port) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert connections_to(sim.port) == 0  # the engine's request was closed (aborted)
    finally:
        await engines.close()
        await runner.cleanup()
        sim.kill()


def test_a_client_that_leaves_after_k_tokens_is_charged_k(tmp: Path, redis: Redis) -> None:
    """The tokens-per-day counter in Redis holds exactly what was charged: the prompt estimate
    plus the tokens relayed before the client left, not the 400 reserved, not zero."""
    slow = start_sim(tmp, "m", "--max-num-seqs", "4", "--inter-token-latency", "40ms")
    cfg = config(slow, [tenant("solo", quotas={"tokensPerDay": 10_000_000})], concurrency=4)
    day, _ = quotas.day_of(time.time())
    key = quotas.keys("solo", day)[2]
    ledger_before = _cancelled_in_ledger(redis)
    with running(start_gateway(tmp, cfg, "--redis", redis.url)) as g:
        before = int(redis_get(redis, key) or 0)
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 400,
            "stream": True,
            "ignore_eos": True,
        }
        headers = {"Authorization": f"Bearer {KEYS['solo']}", "X-Request-Id": "leaves-after-k"}
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        k, seen = 10, 0
        while seen < k:
            line = response.fp.readline()
            seen += line.startswith(b"data: ") and b'"content":"' in line
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        record = access_record(g, "leaves-after-k")
        counted = {
            name: gateway_metric(g, name, tenant="solo", outcome="cancelled")
            for name in (usage.USAGE_REQUESTS, usage.USAGE_COMPLETION_TOKENS)
        }
    # read once the gateway has stopped: it gave back the unspent rest of its quota lease
    charged = int(redis_get(redis, key) or 0) - before
    slow.kill()
    assert record["outcome"] == "cancelled" and record["reserved_tokens"] == 4 + 400
    # what the gateway had relayed when it saw the client go: k, or a token or two more that
    # were on their way (at 40 ms a token, the gateway notices within one)
    assert k <= record["completion_tokens"] <= k + 2, record
    assert (
        charged
        == record["prompt_tokens"] + record["completion_tokens"]
        == 4 + record["completion_tokens"]
    )
    # the bill says the same: the usage counters, and the durable ledger read after the gateway
    # is gone (a restart loses nothing settled), as a cancelled request of k tokens
    assert counted == {
        usage.USAGE_REQUESTS: 1,
        usage.USAGE_COMPLETION_TOKENS: record["completion_tokens"],
    }
    assert _cancelled_in_ledger(redis) - ledger_before == Counter(
        requests=1,
        prompt_tokens=record["prompt_tokens"],
        completion_tokens=record["completion_tokens"],
    )


def _cancelled_in_ledger(redis: Redis) -> Counter[str]:
    """The ledger's cancelled usage of tenant solo (this module's Redis also holds other tests')."""
    total: Counter[str] = Counter()
    for e in ledger_entries(redis.url):
        if e.outcome == "cancelled" and e.tenant.endswith("solo"):
            total.update(
                requests=e.requests,
                prompt_tokens=e.prompt_tokens,
                completion_tokens=e.completion_tokens,
            )
    return total


def test_a_stream_that_breaks_midway_ends_with_an_error_event(tmp: Path) -> None:
    doomed = start_sim(tmp, "m", "--max-num-seqs", "4", "--inter-token-latency", "100ms")
    with running(start_gateway(tmp, config(doomed, [tenant("solo")]))) as g:
        _conn, response = open_stream(g, KEYS["solo"], max_tokens=200, timeout=10)
        first = response.read(100)
        assert first.startswith(b"data: ")
        doomed.kill()
        rest = response.read().decode()
    assert '"error"' in rest and "upstream_error" in rest
    assert "[DONE]" not in rest


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_redis_down_the_configured_policy_holds_and_shows(
    tmp: Path, fast: Sim, policy: str
) -> None:
    own = Redis(port=free_port(), log=tmp / f"redis-{policy}.log")
    own.start()
    cfg = config(fast, [tenant("solo", quotas={"requestsPerMinute": 1000})])
    with running(start_gateway(tmp, cfg, "--redis", own.url, "--quota-failure", policy)) as g:
        assert call(g, KEYS["solo"])[0] == 200
        own.kill()
        # noticed without a request that needs Redis: the gateway's own check, twice a second
        wait_for(
            "the gateway to see the quota backend down",
            lambda: "tokenfleet_gateway_quota_backend_up 0.0" in g.get("/metrics")[1],
            timeout=5,
        )
        # requests go on from the lease in hand; then the policy decides
        for _ in range(leases.REQUESTS_PER_LEASE + 1):
            status, payload, headers, _ = call(g, KEYS["solo"])
            if status != 200:
                break
        ready_status, ready = g.get("/readyz")
        metrics = g.get("/metrics")[1]
        if policy == "open":
            assert status == 200
            assert ready_status == 200 and json.loads(ready)["quota_mode"] == "fail-open"
        else:
            assert status == 503 and payload["error"]["code"] == "quota_backend_unavailable"
            assert "Retry-After" in headers
            assert ready_status == 503 and json.loads(ready)["checks"]["quota_backend"] is False
        assert "tokenfleet_gateway_quota_backend_up 0.0" in metrics
        own.start()
        time.sleep(2.1)  # the store retries Redis every 2 s
        assert call(g, KEYS["solo"])[0] == 200
        assert "tokenfleet_gateway_quota_backend_up 1.0" in g.get("/metrics")[1]
    own.kill()


def test_workers_share_the_port_and_their_metrics(tmp: Path, fast: Sim) -> None:
    with running(start_gateway(tmp, config(fast, [tenant("solo")]), "--workers", "2")) as g:
        assert sum(1 for _ in range(40) if call(g, KEYS["solo"], max_tokens=2)[0] == 200) == 40
        children = Path(f"/proc/{g.process.pid}/task/{g.process.pid}/children").read_text().split()
        assert len(children) == 2  # two worker processes behind one port
        served = 0.0
        for line in g.get("/metrics")[1].splitlines():
            if line.startswith("tokenfleet_gateway_requests_total{") and 'outcome="served"' in line:
                served += float(line.rsplit(" ", 1)[1])
        assert served == 40  # whichever worker answers /metrics counts both workers' requests


def test_sigterm_drains_in_flight_streams(tmp: Path) -> None:
    slowish = start_sim(tmp, "m", "--max-num-seqs", "4", "--inter-token-latency", "30ms")
    g = start_gateway(tmp, config(slowish, [tenant("solo")]))
    _conn, response = open_stream(g, KEYS["solo"], max_tokens=30, timeout=20)
    assert response.read(50)
    g.process.send_signal(15)
    rest = response.read().decode()
    assert "[DONE]" in rest and '"error"' not in rest  # the stream finished during the drain
    assert g.process.wait(timeout=30) == 0
    slowish.kill()
