"""Routing and resilience against real simulated vLLM processes (static-mode gateway):
prefix affinity vs round robin with KV-cache simulation and a per-token prefill cost; retries
recovering injected 5xx within the budget; the budget capping amplification in a total outage;
outlier ejection; a worker killed mid-stream (error event, no retry); a 90/10 revision split and
the revision pin (only for a tenant granted it); fallback when the primary has no room or no
ready replica; the cold-start hold; two pools by context bucket; batch traffic to a pool
dedicated to it; zone preference.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import wait_for
from support.gateway import Gateway, Sim, key_hash, running, start_gateway, start_sim
from support.gateway import gateway_metric as metric

KEY = "tfk-routing-" + "0" * 30
TENANT = {"name": "t", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-routing")


def entry(model: str, sims: list[Sim], **extra: Any) -> dict[str, Any]:
    return {"name": model, "endpoints": [s.url for s in sims], "maxConcurrency": 16, **extra}


def post(
    g: Gateway,
    body: dict[str, Any],
    *,
    path: str = "/v1/completions",
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[int, dict[str, str], bytes, float]:
    """(status, headers, body, seconds to the first body byte)."""
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=timeout)
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={
            "Authorization": f"Bearer {KEY}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    r = conn.getresponse()
    first = r.read(1)
    ttft = time.monotonic() - start
    raw = first + r.read()
    conn.close()
    return r.status, dict(r.getheaders()), raw, ttft


@pytest.fixture(scope="module")
def cached_sims(tmp: Path) -> Iterator[list[Sim]]:
    """KV-cache simulation: 200 blocks of 16 tokens each, 0.5 ms per uncached prompt token."""
    sims = [
        start_sim(
            tmp,
            "m",
            "--enable-kvcache",
            "--kv-cache-size",
            "200",
            "--block-size",
            "16",
            "--prefill-time-per-token",
            "500us",
            "--max-num-seqs",
            "8",
        )
        for _ in range(3)
    ]
    yield sims
    for s in sims:
        s.kill()


def shared_prefix_run(g: Gateway, *, tag: str, docs: int = 8, rounds: int = 6) -> dict[str, float]:
    """Every request = one of ``docs`` long documents (~750 tokens) + a short question."""
    documents = [" ".join(f"{tag}{d}w{i}" for i in range(750)) for d in range(docs)]
    bodies = [
        {"model": "m", "prompt": f"{documents[d]} question {r}", "max_tokens": 2}
        for r in range(rounds)
        for d in range(docs)
    ]
    random.Random(0).shuffle(bodies)
    cached = prompt = 0
    ttfts = []
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for status, _, raw, ttft in pool.map(lambda b: post(g, b), bodies):
            assert status == 200, raw
            usage = json.loads(raw)["usage"]
            prompt += usage["prompt_tokens"]
            cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            ttfts.append(ttft)
    return {"hit_ratio": cached / prompt, "ttft_p50": statistics.median(ttfts)}


def static(
    models: list[dict[str, Any]], pools: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"models": models, "pools": pools or [{"name": "default"}], "tenants": [TENANT]}


def test_prefix_affinity_beats_round_robin_on_a_shared_prefix_workload(
    tmp: Path, cached_sims: list[Sim]
) -> None:
    """Eight documents do not fit one replica's cache (200 blocks ≈ 4 documents): round robin
    sends every document everywhere and thrashes; prefix affinity partitions them."""
    results = {}
    for policy in ("RoundRobin", "PrefixAware"):
        cfg = static(
            [entry("m", cached_sims)], [{"name": "default", "routing": {"policy": policy}}]
        )
        with running(start_gateway(tmp, cfg, "--seed", "1")) as g:
            results[policy] = shared_prefix_run(g, tag=policy[:2])
            if policy == "PrefixAware":
                hit = metric(g, "tokenfleet_gateway_prefix_hit_blocks_total")
                blocks = metric(g, "tokenfleet_gateway_prefix_blocks_total")
                assert blocks > 0 and hit / blocks > 0.5  # the gateway's own view agrees
                # every request was offered to the pool's admission: the autoscaler's load
                assert metric(g, "tokenfleet_gateway_pool_arrivals_total", pool="default") == 48
    rr, pa = results["RoundRobin"], results["PrefixAware"]
    assert pa["hit_ratio"] > rr["hit_ratio"] + 0.2, results
    assert pa["ttft_p50"] < rr["ttft_p50"], results


def test_injected_5xx_are_retried_within_the_budget(tmp: Path) -> None:
    flaky = [
        start_sim(tmp, "m", "--failure-injection-rate", "5", "--failure-types", "server_error")
        for _ in range(3)
    ]
    with running(start_gateway(tmp, static([entry("m", flaky)]), "--seed", "2")) as g:
        statuses = [post(g, {"model": "m", "prompt": "hi", "max_tokens": 1})[0] for _ in range(200)]
        retries = metric(g, "tokenfleet_gateway_retries_total")
    for s in flaky:
        s.kill()
    assert statuses.count(200) >= 198, Counter(statuses)
    assert 0 < retries <= 0.1 * 200 + 3


def test_total_outage_amplification_is_capped_by_the_budget(tmp: Path) -> None:
    dead = [
        start_sim(tmp, "m", "--failure-injection-rate", "100", "--failure-types", "server_error")
        for _ in range(3)
    ]
    with running(start_gateway(tmp, static([entry("m", dead)]), "--seed", "3")) as g:
        statuses = [post(g, {"model": "m", "prompt": "hi", "max_tokens": 1})[0] for _ in range(200)]
        retries = metric(g, "tokenfleet_gateway_retries_total")
        exhausted = metric(g, "tokenfleet_gateway_retry_budget_exhausted_total")
        ejections = metric(g, "tokenfleet_gateway_endpoint_ejections_total", event="ejected")
    for s in dead:
        s.kill()
    assert set(statuses) == {502}
    assert retries <= 0.1 * 200 + 3  # at most 1.1x the traffic (+ the floor) hit the fleet
    assert exhausted > 100
    assert ejections >= 3  # every replica was ejected at least once


def test_a_failing_replica_is_ejected_and_traffic_moves_away(tmp: Path) -> None:
    good = [start_sim(tmp, "m") for _ in range(2)]
    bad = start_sim(tmp, "m", "--failure-injection-rate", "100", "--failure-types", "server_error")
    with running(start_gateway(tmp, static([entry("m", [*good, bad])]), "--seed", "4")) as g:
        statuses = [post(g, {"model": "m", "prompt": "hi", "max_tokens": 1})[0] for _ in range(100)]
        ejected = metric(g, "tokenfleet_gateway_endpoint_ejections_total", event="ejected")
        routed = metric(g, "tokenfleet_gateway_routing_decisions_total")
        retries = metric(g, "tokenfleet_gateway_retries_total")
    for s in (*good, bad):
        s.kill()
    assert statuses.count(200) == 100
    assert ejected >= 1
    assert retries < 10 and routed == 100 + retries  # the bad replica stopped getting traffic


def test_a_worker_killed_mid_stream_gives_an_error_event_and_no_retry(tmp: Path) -> None:
    sims = [start_sim(tmp, "m", "--inter-token-latency", "50ms") for _ in range(2)]
    with running(start_gateway(tmp, static([entry("m", sims)]))) as g:
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=30)
        body = {"model": "m", "prompt": "tell me", "max_tokens": 200, "stream": True}
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        first = r.read(64)
        assert r.status == 200 and b"data:" in first
        busy = next(s for s in sims if s.metric("vllm:num_requests_running") == 1)
        spare = next(s for s in sims if s is not busy)
        busy.kill()  # the worker dies mid-stream
        text = first + r.read()
        conn.close()
        retries = metric(g, "tokenfleet_gateway_retries_total")
    spare_requests = _prompt_tokens(spare)
    spare.kill()
    assert b'"error"' in text and b"[DONE]" not in text
    assert retries == 0 and spare_requests == 0  # bytes had flowed: never retried elsewhere


def test_revision_weights_split_traffic_and_a_header_pins_a_revision(tmp: Path) -> None:
    stable, canary = start_sim(tmp, "m"), start_sim(tmp, "m")
    models = [
        entry("m", [stable], revision="stable", weight=90),
        entry("m", [canary], revision="canary", weight=10),
    ]
    pinning_key = "tfk-routing-pin-" + "0" * 26
    config = static(models)
    config["tenants"].append(
        {"name": "qa", "apiKeyHashes": [key_hash(pinning_key)], "allowedModels": ["*"],
         "revisionPinning": True}
    )  # fmt: skip
    with running(start_gateway(tmp, config, "--no-access-log")) as g:
        body = {"model": "m", "prompt": "hi", "max_tokens": 1}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            served = Counter(
                h.get("X-TokenFleet-Revision")
                for _, h, _, _ in pool.map(lambda _: post(g, body), range(2000))
            )
        pin = {"X-TokenFleet-Revision": "canary", "Authorization": f"Bearer {pinning_key}"}
        pinned = Counter(
            post(g, body, headers=pin)[1].get("X-TokenFleet-Revision") for _ in range(20)
        )
        unknown = post(g, body, headers={**pin, "X-TokenFleet-Revision": "nope"})[0]
        # a tenant not granted pinning cannot steer requests into a canary's analysis
        status, _, refusal, _ = post(g, body, headers={"X-TokenFleet-Revision": "canary"})
    stable.kill()
    canary.kill()
    assert sum(served.values()) == 2000 and set(served) == {"stable", "canary"}
    # binomial(2000, 0.1): sd 13.4; ±4.5 sd
    assert 140 <= served["canary"] <= 260, served
    assert pinned == {"canary": 20}
    assert unknown == 503
    assert status == 403 and b"revision_pin_not_allowed" in refusal, refusal


def test_fallback_model_takes_requests_the_primary_has_no_room_for(tmp: Path) -> None:
    big = start_sim(tmp, "big", "--inter-token-latency", "100ms", "--max-num-seqs", "1")
    small = start_sim(tmp, "small")
    classes = [{"name": "standard", "priority": 100, "maxQueueDepth": 1, "maxQueueAgeMs": 200}]
    models = [
        {
            "name": "big",
            "endpoints": [big.url],
            "maxConcurrency": 1,
            "pool": "big",
            "fallback": "small",
        },
        {"name": "small", "endpoints": [small.url], "maxConcurrency": 8, "pool": "small"},
    ]
    pools = [
        {"name": "big", "admission": {"classes": classes}},
        {"name": "small"},
    ]
    cfg = static(models, pools)
    cfg["tenants"] = [{**TENANT, "priorityClass": "standard"}]
    with running(start_gateway(tmp, cfg)) as g:
        body = {"model": "big", "prompt": "hi", "max_tokens": 10}
        # at once: on a loaded machine a pool's threads can start a second apart, and big
        # (1 s a request) then serves them one after another
        together = threading.Barrier(4)

        def send(_: int) -> Any:
            together.wait(timeout=30)
            return post(g, body)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(send, range(4)))
        fallbacks = metric(g, "tokenfleet_gateway_fallbacks_total", model="big", fallback="small")
    big.kill()
    small.kill()
    served_by = Counter(h.get("X-TokenFleet-Model") for s, h, _, _ in results if s == 200)
    assert [s for s, *_ in results] == [200] * 4
    assert served_by["big"] >= 1 and served_by["small"] >= 2, served_by
    assert fallbacks == served_by["small"]
    by_small = [
        json.loads(raw)["model"]
        for s, h, raw, _ in results
        if h.get("X-TokenFleet-Model") == "small"
    ]
    assert set(by_small) == {"small"}  # the body says so too
    assert all(
        h.get("X-TokenFleet-Fallback-From") == "big"
        for _, h, _, _ in results
        if h.get("X-TokenFleet-Model") == "small"
    )


def test_two_pools_by_context_bucket(tmp: Path) -> None:
    short, long = start_sim(tmp, "m"), start_sim(tmp, "m")
    models = [
        entry("m", [short], pool="short"),
        entry("m", [long], pool="long"),
    ]
    pools = [{"name": "short", "maxInputTokens": 100}, {"name": "long", "maxInputTokens": 8000}]
    with running(start_gateway(tmp, static(models, pools))) as g:
        assert post(g, {"model": "m", "prompt": "a short prompt", "max_tokens": 1})[0] == 200
        assert post(g, {"model": "m", "prompt": "long " * 400, "max_tokens": 1})[0] == 200
        toolong = post(g, {"model": "m", "prompt": "x" * 40_000, "max_tokens": 1})
    wait_for("the simulators' counters", lambda: _prompt_tokens(long) > 0, timeout=5)
    assert 0 < _prompt_tokens(short) < 20
    assert _prompt_tokens(long) >= 400
    assert toolong[0] == 400 and b"context_length_exceeded" in toolong[2]
    short.kill()
    long.kill()


def test_batch_traffic_goes_to_the_batch_pool(tmp: Path) -> None:
    online, batch = start_sim(tmp, "m"), start_sim(tmp, "m")
    models = [entry("m", [online], pool="online"), entry("m", [batch], pool="batch")]
    pools = [{"name": "online"}, {"name": "batch", "routing": {"classes": ["batch"]}}]
    batch_key = "tfk-batch-" + "0" * 32
    cfg = static(models, pools)
    cfg["tenants"] = [
        {**TENANT, "priorityClass": "interactive"},
        {
            "name": "nightly",
            "apiKeyHashes": [key_hash(batch_key)],
            "allowedModels": ["*"],
            "priorityClass": "batch",
        },
    ]
    body = {"model": "m", "prompt": "one two three", "max_tokens": 1}
    with running(start_gateway(tmp, cfg)) as g:
        for _ in range(5):
            assert post(g, body)[0] == 200
        for _ in range(3):
            assert post(g, body, headers={"Authorization": f"Bearer {batch_key}"})[0] == 200
    wait_for("the simulators' counters", lambda: _prompt_tokens(batch) > 0, timeout=5)
    per_request = _prompt_tokens(online) / 5
    assert _prompt_tokens(batch) == 3 * per_request  # only the batch tenant's requests
    online.kill()
    batch.kill()


def test_same_zone_replicas_are_preferred(tmp: Path) -> None:
    near, far = start_sim(tmp, "m"), start_sim(tmp, "m")
    models = [entry("m", [near], zone="zone-b"), entry("m", [far], zone="zone-a")]
    body = {"model": "m", "prompt": "one two three", "max_tokens": 1}
    with running(start_gateway(tmp, static(models), "--zone", "zone-b")) as g:
        for _ in range(10):
            assert post(g, body)[0] == 200
        by_zone = metric(g, "tokenfleet_gateway_routing_decisions_total", reason="zone")
    wait_for("the simulators' counters", lambda: _prompt_tokens(near) > 0, timeout=5)
    assert _prompt_tokens(far) == 0 and by_zone == 10
    near.kill()
    far.kill()


def _prompt_tokens(sim: Sim) -> float:
    try:
        return sim.metric("vllm:prompt_tokens_total")
    except AssertionError:  # not exported before the first request
        return 0.0


def in_process_gateway(models: list[dict[str, Any]], pools: list[dict[str, Any]]) -> Any:
    """The gateway app in this process (a catalog can then lose or gain endpoints at will)."""
    from tokenfleet.gateway.app import create_app
    from tokenfleet.gateway.config import Settings, StaticConfig

    catalog = StaticConfig.model_validate(static(models, pools)).catalog()
    settings = Settings(salt_secret=b"s", cold_start_seconds=1.0, access_log=False)
    return create_app(settings), catalog


async def test_no_ready_endpoint_falls_back_or_holds_for_a_cold_start(tmp: Path) -> None:
    import dataclasses

    from aiohttp.test_utils import TestClient, TestServer

    from tokenfleet.gateway.policy import routing
    from tokenfleet.gateway.state import STATE

    small, orphan = start_sim(tmp, "small"), start_sim(tmp, "orphan")
    models = [
        {"name": "big", "endpoints": ["http://127.0.0.1:9"], "pool": "p", "fallback": "small"},
        {"name": "orphan", "endpoints": ["http://127.0.0.1:9"], "pool": "p"},
        {"name": "small", "endpoints": [small.url], "pool": "p"},
    ]
    app, full = in_process_gateway(models, [{"name": "p"}])
    only_small = full.with_endpoints(
        routing.Snapshot(tuple(e for e in full.endpoints.endpoints if e.url == small.url))
    )
    auth = {"Authorization": f"Bearer {KEY}"}
    async with TestClient(TestServer(app)) as client:
        state = app[STATE]
        state.swap(only_small)  # big and orphan: no ready replica
        r = await client.post(
            "/v1/completions", json={"model": "big", "prompt": "hi", "max_tokens": 2}, headers=auth
        )
        assert r.status == 200
        assert r.headers["X-TokenFleet-Model"] == "small"
        assert r.headers["X-TokenFleet-Fallback-From"] == "big"
        assert (await r.json())["model"] == "small"

        started = time.monotonic()
        r = await client.post(
            "/v1/completions", json={"model": "orphan", "prompt": "hi"}, headers=auth
        )
        assert r.status == 503 and r.headers["Retry-After"]
        assert (await r.json())["error"]["code"] == "no_healthy_upstream"
        assert time.monotonic() - started >= 0.9  # held for the cold-start window first

        # a replica of orphan becomes ready while a request waits: it is served
        revived = dataclasses.replace(
            next(e for e in full.endpoints.endpoints if "orphan" in e.models), url=orphan.url
        )
        pending = asyncio.ensure_future(
            client.post(
                "/v1/completions",
                json={"model": "orphan", "prompt": "hi", "max_tokens": 2},
                headers=auth,
            )
        )
        await asyncio.sleep(0.3)
        state.swap(
            only_small.with_endpoints(routing.Snapshot((*only_small.endpoints.endpoints, revived)))
        )
        r = await pending
        assert r.status == 200 and r.headers["X-TokenFleet-Model"] == "orphan"
    small.kill()
    orphan.kill()
