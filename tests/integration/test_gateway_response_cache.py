"""The response cache against real parts: real Redis, simulated vLLM servers, the openai SDK.

Matrix: a repeated greedy request is served from cache (the upstream simulator counts one
request; usage and the tenant's charged tokens are zero on the hit); any sampling change
(temperature, seed, max_tokens, prompt) misses; two tenants never share an answer, two tenants
of one cache group do; a new revision (pinned here) has its own keys; a streamed request after a
non-streamed one hits and streams through the openai SDK, and a streamed miss fills the cache
for both forms; a stream its client leaves stores nothing; sampled and tool requests bypass; a
model without the cache says nothing; a Redis outage is a miss with a 200, counted as an error.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from support.cluster import wait_for
from support.gateway import (
    Gateway,
    Redis,
    Sim,
    free_port,
    gateway_metric,
    key_hash,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.signals import gateway as names

KEYS = {n: f"tfk-cache-{n}-" + "0" * 30 for n in ("a", "b", "evals-1", "evals-2", "thrifty")}
CACHE = {"enabled": True, "ttlSeconds": 60, "maxEntryBytes": 16384}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-cache")


@pytest.fixture(scope="module")
def sims(tmp: Path) -> Iterator[dict[str, Sim]]:
    """Revision r1 (all traffic) and r2 (none, reachable by pin) of model m, and model plain."""
    out = {
        "r1": start_sim(tmp, "m", "--inter-token-latency", "2ms"),
        "r2": start_sim(tmp, "m", "--inter-token-latency", "2ms"),
        "plain": start_sim(tmp, "plain"),
    }
    yield out
    for s in out.values():
        s.kill()


def tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {"name": name, "apiKeyHashes": [key_hash(KEYS[name])], "allowedModels": ["*"], **spec}


def config(sims: dict[str, Sim]) -> dict[str, Any]:
    group = {"cacheIsolation": {"mode": "SharedGroup", "group": "evals"}}
    return {
        "models": [
            {"name": "m", "endpoints": [sims[r].url], "revision": r, "weight": w}
            | {"responseCache": CACHE}
            for r, w in (("r1", 100), ("r2", 0))
        ]
        + [{"name": "plain", "endpoints": [sims["plain"].url]}],
        "tenants": [
            tenant("a", quotas={"tokensPerMinute": 100000}, revisionPinning=True),
            tenant("b"),
            tenant("evals-1", **group),
            tenant("evals-2", **group),
            tenant("thrifty", quotas={"tokensPerMinute": 300}),
        ],
    }


@pytest.fixture(scope="module")
def gateway(tmp: Path, redis: Redis, sims: dict[str, Sim]) -> Iterator[Gateway]:
    with running(start_gateway(tmp, config(sims), "--redis", redis.url)) as g:
        yield g
    assert "Traceback" not in g.log.read_text(), g.log.read_text()[-3000:]


def client(gateway: Gateway, who: str = "a", **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=KEYS[who], max_retries=0, default_headers=headers
    )


def served(sim: Sim) -> float:
    """Requests the simulator completed (its vllm:request_success_total, every finish reason)."""
    import urllib.request

    text = urllib.request.urlopen(f"{sim.url}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )


def prompt() -> list[Any]:
    """A prompt no other test sends: each test counts its own upstream requests."""
    return [{"role": "user", "content": f"Explain caching, case {uuid.uuid4().hex}."}]


def ask(c: openai.OpenAI, messages: list[Any], **kw: Any) -> tuple[str, Any]:
    """(X-TokenFleet-Cache, the parsed completion) of one greedy chat request."""
    args = {"model": "m", "messages": messages, "max_tokens": 12, "temperature": 0, **kw}
    raw = c.chat.completions.with_raw_response.create(**args)
    return raw.headers.get("X-TokenFleet-Cache", ""), raw.parse()


def test_a_repeated_request_is_served_from_cache(gateway: Gateway, sims: dict[str, Sim]) -> None:
    messages, before = prompt(), served(sims["r1"])
    charged = gateway_metric(gateway, names.COMPLETION_TOKENS, tenant="a")
    first = ask(client(gateway), messages)
    second_raw = client(gateway).chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=12, temperature=0, user="someone-else"
    )
    second = second_raw.parse()
    assert first[0] == "miss" and second_raw.headers["X-TokenFleet-Cache"] == "hit"
    assert second_raw.headers["X-TokenFleet-Model"] == "m"
    assert second_raw.headers["X-TokenFleet-Revision"] == "r1"
    assert second.choices[0].message.content == first[1].choices[0].message.content
    assert second.id != first[1].id
    assert second.usage is not None
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (0, 0)
    assert served(sims["r1"]) - before == 1, "the hit reached the engine"
    assert gateway_metric(gateway, names.COMPLETION_TOKENS, tenant="a") - charged == (
        first[1].usage.completion_tokens
    ), "the hit was charged tokens"
    assert gateway_metric(gateway, names.RESPONSE_CACHE_HITS, model="m") >= 1
    assert gateway_metric(gateway, names.RESPONSE_CACHE_STORES, model="m") >= 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"temperature": 0.0}, id="temperature-spelling"),
        pytest.param({"temperature": 0.5, "seed": 7}, id="temperature-seeded"),
        pytest.param({"seed": 3}, id="seed"),
        pytest.param({"max_tokens": 11}, id="max-tokens"),
        pytest.param({"stop": ["zzz"]}, id="stop"),
    ],
)
def test_any_sampling_change_misses(
    gateway: Gateway, sims: dict[str, Sim], change: dict[str, Any]
) -> None:
    messages, before = prompt(), served(sims["r1"])
    assert ask(client(gateway), messages)[0] == "miss"
    assert ask(client(gateway), messages, **change)[0] == "miss"
    assert ask(client(gateway), messages, **change)[0] == "hit"
    assert served(sims["r1"]) - before == 2


def test_another_prompt_misses(gateway: Gateway, sims: dict[str, Sim]) -> None:
    before = served(sims["r1"])
    assert ask(client(gateway), prompt())[0] == "miss"
    assert ask(client(gateway), prompt())[0] == "miss"
    assert served(sims["r1"]) - before == 2


def test_tenants_never_share_answers_and_a_cache_group_does(
    gateway: Gateway, sims: dict[str, Sim]
) -> None:
    messages, before = prompt(), served(sims["r1"])
    assert ask(client(gateway, "a"), messages)[0] == "miss"
    assert ask(client(gateway, "b"), messages)[0] == "miss"
    assert served(sims["r1"]) - before == 2, "one tenant was served another's answer"
    assert ask(client(gateway, "evals-1"), messages)[0] == "miss"
    assert ask(client(gateway, "evals-2"), messages)[0] == "hit"
    assert served(sims["r1"]) - before == 3


def test_a_new_revision_has_its_own_keys(gateway: Gateway, sims: dict[str, Sim]) -> None:
    messages = prompt()
    r1, r2 = served(sims["r1"]), served(sims["r2"])
    assert ask(client(gateway), messages)[0] == "miss"
    pinned = client(gateway, **{"X-TokenFleet-Revision": "r2"})
    raw = pinned.chat.completions.with_raw_response.create(
        model="m", messages=messages, max_tokens=12, temperature=0
    )
    assert raw.headers["X-TokenFleet-Cache"] == "miss"
    assert raw.headers["X-TokenFleet-Revision"] == "r2"
    assert ask(pinned, messages)[0] == "hit"
    assert ask(client(gateway), messages)[0] == "hit"
    assert (served(sims["r1"]) - r1, served(sims["r2"]) - r2) == (1, 1)


def test_a_stream_after_a_whole_answer_hits_and_streams(
    gateway: Gateway, sims: dict[str, Sim]
) -> None:
    messages, before = prompt(), served(sims["r1"])
    _, whole = ask(client(gateway), messages)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="m",
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.headers["X-TokenFleet-Cache"] == "hit"
    assert raw.headers["Content-Type"].startswith("text/event-stream")
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 0
    assert len(chunks) >= 3
    assert served(sims["r1"]) - before == 1


def test_sampled_and_tool_requests_bypass(gateway: Gateway, sims: dict[str, Sim]) -> None:
    messages, before = prompt(), served(sims["r1"])
    skipped = gateway_metric(gateway, names.RESPONSE_CACHE_SKIPS, model="m", reason="sampled")
    for _ in range(2):
        header, _ = ask(client(gateway), messages, temperature=0.8)
        assert header == ""
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {}}},
    }
    assert ask(client(gateway), messages, tools=[tool])[0] == ""
    assert served(sims["r1"]) - before == 3
    assert (
        gateway_metric(gateway, names.RESPONSE_CACHE_SKIPS, model="m", reason="sampled") - skipped
        == 2
    )


def test_a_model_without_the_cache_is_untouched(gateway: Gateway) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="plain", messages=prompt(), max_tokens=4, temperature=0
    )
    assert "X-TokenFleet-Cache" not in raw.headers


def test_a_redis_outage_is_a_miss_with_a_200(tmp: Path, sims: dict[str, Sim]) -> None:
    own = Redis(port=free_port(), log=tmp / "redis-outage.log")
    own.start()
    cfg = config(sims)
    cfg["tenants"] = [tenant("b")]  # no quota: the outage concerns the cache alone
    with running(start_gateway(tmp, cfg, "--redis", own.url)) as g:
        messages = prompt()
        assert ask(client(g, "b"), messages)[0] == "miss"
        assert ask(client(g, "b"), messages)[0] == "hit"
        own.kill()
        before = served(sims["r1"])
        header, reply = ask(client(g, "b"), messages)
        assert header == "miss" and reply.choices[0].message.content
        assert served(sims["r1"]) - before == 1
        wait_for(
            "a cache error in the metrics",
            lambda: gateway_metric(g, names.RESPONSE_CACHE_ERRORS, model="m", op="get") >= 1,
            timeout=10,
        )
        assert ask(client(g, "b"), prompt())[0] == "miss"  # within the retry window: no wait
    assert "Traceback" not in g.log.read_text(), g.log.read_text()[-3000:]


def test_a_streamed_miss_fills_the_cache_for_both_forms(
    gateway: Gateway, sims: dict[str, Sim]
) -> None:
    messages, before = prompt(), served(sims["r1"])
    args: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 12, "temperature": 0}
    raw = client(gateway).chat.completions.with_raw_response.create(**args, stream=True)
    assert raw.headers["X-TokenFleet-Cache"] == "miss"
    streamed = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    header, whole = ask(client(gateway), messages)
    assert header == "hit" and whole.choices[0].message.content == streamed
    again = client(gateway).chat.completions.with_raw_response.create(**args, stream=True)
    assert again.headers["X-TokenFleet-Cache"] == "hit"
    assert "".join(c.choices[0].delta.content or "" for c in again.parse() if c.choices) == (
        streamed
    )
    assert served(sims["r1"]) - before == 1


def test_a_cancelled_stream_stores_nothing(gateway: Gateway) -> None:
    messages = prompt()
    stores = gateway_metric(gateway, names.RESPONSE_CACHE_STORES, model="m")
    long = {"max_tokens": 400, "extra_body": {"ignore_eos": True}}  # about 0.8 s of tokens
    stream = client(gateway).chat.completions.create(
        model="m", messages=messages, temperature=0, stream=True, **long
    )
    next(iter(stream))
    stream.close()  # the client leaves mid-answer
    time.sleep(1.0)  # past the time the whole answer would have taken
    assert gateway_metric(gateway, names.RESPONSE_CACHE_STORES, model="m") == stores
    assert ask(client(gateway), messages, **long)[0] == "miss"


def test_a_hit_is_admitted_when_the_token_quota_is_spent(gateway: Gateway) -> None:
    """A hit reserves no tokens: the tenant's spent token quota refuses misses, not hits."""
    cached = prompt()
    assert ask(client(gateway, "thrifty"), cached)[0] == "miss"
    for _ in range(40):  # each miss reserves its prompt and max_tokens: the bucket runs dry
        try:
            ask(client(gateway, "thrifty"), prompt())
        except openai.RateLimitError as refused:
            assert "tokens per minute" in refused.message
            break
    else:
        pytest.fail("the token quota never ran out")
    header, reply = ask(client(gateway, "thrifty"), cached)
    assert header == "hit" and reply.usage is not None and reply.usage.total_tokens == 0
