"""Spill to a ModelRoute's remotes, all real: a local gateway (static mode) with examples/09's
chat-auto route and two remotes — `region-b`, a second TokenFleet gateway with its own
simulators (another region), and `provider`, a simulator behind the devstack's plain
OpenAI-compatible front that checks a bearer key — the keys mounted as files, Redis for the
spend budgets, the openai SDK as the client.

The journey: served locally; the whole local pool killed → every request goes on through
region-b (streamed and not, the answer's ``model`` and ``X-TokenFleet-Model`` naming what
served, ``X-TokenFleet-Target`` where), counted by remote and in the remote's tokens; the pool
back → traffic returns; the usage ledger has the spilled requests under the remote's pool key
(usage by target). Region-b gone too → the provider answers, within the tenant's spend
budget there, and once it is spent the local refusal says so (another tenant's budget is its
own). A client that leaves a spilled stream closes the remote gateway's request, which closes
its engine's. A local queue that sheds (Overloaded) spills too. A remote whose key file is not
mounted is skipped, and the refusal and the log say why.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from support.cluster import wait_for
from support.gateway import (
    Gateway,
    Redis,
    Sim,
    connections_to,
    free_port,
    key_hash,
    ledger_entries,
    listening,
    open_stream,
    redis_get,
    running,
    spawn,
    start_gateway,
    start_sim,
    stop,
)
from support.gateway import gateway_metric as metric
from tokenfleet.signals import gateway as names

EXAMPLE = Path(__file__).parents[2] / "examples" / "09-model-routes"
KEY, THRIFTY_KEY = "tfk-spill-acme-" + "0" * 20, "tfk-spill-thrifty-" + "1" * 20
REGION_KEY, PROVIDER_KEY = "tfk-region-a-" + "2" * 24, "sk-provider-" + "3" * 24
SHORT = "What is the capital of Japan?"


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / name).read_text())
    return doc


def route_rules() -> dict[str, Any]:
    """examples/09's chat-auto: its rules, without the example's remotes (the platform's)."""
    spec = dict(example("route.yaml")["spec"])
    spec.pop("remotes", None)
    return spec


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-spill")


@dataclasses.dataclass
class Region:
    """Another region: its gateway and its engines (by model)."""

    gateway: Gateway
    sims: dict[str, Sim]


@pytest.fixture(scope="module")
def region(root: Path) -> Iterator[Region]:
    """Another region: its own engines behind its own gateway, serving chat-auto."""
    sims = {
        m: start_sim(root, m, "--inter-token-latency", "20ms") for m in ("chat-small", "chat-large")
    }
    cm = example("classifier-configmap.yaml")
    config = {
        "models": [{"name": m, "endpoints": [s.url]} for m, s in sims.items()],
        "tenants": [
            {
                "name": "region-a",  # the spilling gateway is one tenant here
                "apiKeyHashes": [key_hash(REGION_KEY)],
                "allowedModels": ["chat-auto", "chat-small"],
            }
        ],
        "routes": [route_rules()],
        "configMaps": {cm["metadata"]["name"]: cm["data"]},
    }
    with running(start_gateway(root, config)) as g:
        yield Region(gateway=g, sims=sims)
    for s in sims.values():
        s.kill()


@pytest.fixture(scope="module")
def provider(root: Path) -> Iterator[str]:
    """A provider: a plain OpenAI-compatible endpoint that wants its key (devstack's front)."""
    sim = start_sim(root, "provider-large")
    key_file = root / "provider-key"
    key_file.write_text(PROVIDER_KEY + "\n")
    port = free_port()
    process = spawn(
        [
            sys.executable,
            "-m",
            "tokenfleet.devstack.provider",
            "--port",
            str(port),
            "--upstream",
            sim.url,
            "--key-file",
            str(key_file),
        ],
        root / "provider.log",
    )
    wait_for("the provider to listen", lambda: listening(port), timeout=30)
    yield f"http://127.0.0.1:{port}/v1"
    stop(process)
    sim.kill()


def remotes(region: Region, provider: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "region-b",
            "kind": "Gateway",
            "baseUrl": region.gateway.url + "/v1",
            "apiKeySecret": {"name": "region-b-key"},
        },
        {
            "name": "provider",
            "kind": "OpenAI",
            "baseUrl": provider,
            "model": "provider-large",
            "apiKeySecret": {"name": "provider-key"},
            # priced so that one short request costs about 0.02: a budget of 0.05 takes two
            "price": {"inputPerMillionTokens": 1000, "outputPerMillionTokens": 1000},
            "budget": {"amount": 0.05},
        },
    ]


@pytest.fixture()
def local_sims(root: Path) -> Iterator[dict[str, Sim]]:
    started = {m: start_sim(root, m) for m in ("chat-small", "chat-large")}
    yield started
    for s in started.values():
        s.kill()


@pytest.fixture()
def gateway(
    root: Path, redis: Redis, region: Region, provider: str, local_sims: dict[str, Sim]
) -> Iterator[Gateway]:
    keys = root / f"keys-{free_port()}"
    bound = {"region-b-key": region.gateway.url + "/v1", "provider-key": provider}
    for name, value in (("region-b-key", REGION_KEY), ("provider-key", PROVIDER_KEY)):
        (keys / name).mkdir(parents=True)
        (keys / name / "api-key").write_text(value + "\n")
        (keys / name / "base-url").write_text(bound[name] + "\n")  # where it may be sent
    # a key bound elsewhere: a route that names it with another URL gets nothing
    (keys / "elsewhere-key").mkdir()
    (keys / "elsewhere-key" / "api-key").write_text("sk-not-for-you")
    (keys / "elsewhere-key" / "base-url").write_text("https://somewhere.example.com/v1")
    slow = start_sim(root, "busy-model", "--inter-token-latency", "50ms", "--max-num-seqs", "1")
    cm = example("classifier-configmap.yaml")
    chat_auto = {**route_rules(), "remotes": remotes(region, provider)}
    tenants = [
        {
            "name": n,
            "apiKeyHashes": [key_hash(k)],
            "allowedModels": [
                "chat-auto",
                "chat-busy",
                "chat-nokey",
                "chat-steal",
                "chat-metered",
            ],
        }
        for n, k in (("acme", KEY), ("thrifty", THRIFTY_KEY))
    ]
    config = {
        "models": [
            *({"name": m, "endpoints": [s.url]} for m, s in local_sims.items()),
            {"name": "busy-model", "endpoints": [slow.url], "pool": "tight", "maxConcurrency": 1},
        ],
        "pools": [
            {"name": "default"},
            {
                "name": "tight",
                "admission": {
                    "classes": [{"name": "interactive", "priority": 200, "maxQueueAgeMs": 200}]
                },
            },
        ],
        "tenants": tenants,
        "routes": [
            chat_auto,
            {
                "name": "chat-busy",
                "defaultTargets": [{"model": "busy-model"}],
                "remotes": [{**remotes(region, provider)[0], "model": "chat-small"}],
            },
            {
                "name": "chat-nokey",
                "defaultTargets": [{"model": "chat-small"}],
                "remotes": [{**remotes(region, provider)[0], "apiKeySecret": {"name": "absent"}}],
            },
            {  # region-b priced and budgeted: a hold is taken for each spilled request
                "name": "chat-metered",
                "defaultTargets": [{"model": "chat-small"}],
                "remotes": [
                    {
                        **remotes(region, provider)[0],
                        "model": "chat-small",
                        "price": {"inputPerMillionTokens": 1, "outputPerMillionTokens": 1},
                        "budget": {"amount": 1.0},
                    }
                ],
            },
            {  # a route author pointing another's key at their own server
                "name": "chat-steal",
                "defaultTargets": [{"model": "chat-small"}],
                "remotes": [
                    {**remotes(region, provider)[0], "apiKeySecret": {"name": "elsewhere-key"}}
                ],
            },
        ],
        "configMaps": {cm["metadata"]["name"]: cm["data"]},
    }
    env = {"TOKENFLEET_REMOTE_KEYS_DIR": str(keys)}
    with running(start_gateway(root, config, "--redis", redis.url, env=env)) as g:
        yield g
    slow.kill()
    log = g.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    for key in (REGION_KEY, PROVIDER_KEY):
        assert key not in log, "a remote's key is never logged"


def client(g: Gateway, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0, timeout=30)


def ask(g: Gateway, key: str = KEY, model: str = "chat-auto") -> tuple[str, dict[str, str]]:
    """(the answer's model, its headers)."""
    raw = client(g, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": SHORT}], max_tokens=4
    )
    return raw.parse().model, dict(raw.headers)


def target(headers: dict[str, str]) -> str:
    return headers.get("x-tokenfleet-target", "local")


def test_a_lost_pool_spills_to_the_remote_region_and_traffic_returns(
    gateway: Gateway, region: Region, local_sims: dict[str, Sim], root: Path, redis: Redis
) -> None:
    model, headers = ask(gateway)
    assert (model, target(headers)) == ("chat-small", "local")

    ports = {m: s.port for m, s in local_sims.items()}
    ledgered_before = sum(
        e.requests for e in ledger_entries(redis.url) if e.pool == "remote:region-b"
    )
    for s in local_sims.values():
        s.kill()  # the whole local pool is gone
    served_before = metric(region.gateway, names.REQUESTS, tenant="region-a", outcome="served")
    answers = [ask(gateway) for _ in range(10)]
    for model, headers in answers:  # every one answered, and each says where and by what
        assert target(headers) == "remote/region-b", headers
        assert model == headers["x-tokenfleet-model"] == "chat-small"
        assert headers["x-tokenfleet-route"] == "chat-auto/short-without-tools"
        assert headers["x-tokenfleet-spill-reason"] in ("upstream_error", "no_healthy_upstream")
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="chat-auto", messages=[{"role": "user", "content": SHORT}], max_tokens=4, stream=True
    )
    assert raw.headers["X-TokenFleet-Target"] == "remote/region-b"
    assert raw.headers["X-TokenFleet-Model"] == "chat-small"
    chunks = list(raw.parse())
    assert chunks and all(c.model == "chat-small" for c in chunks)
    assert not any(c.usage for c in chunks), "the usage the gateway asked for is not relayed"

    assert metric(region.gateway, names.REQUESTS, tenant="region-a", outcome="served") == (
        served_before + 11
    )
    wait_for(  # counted once the stream's relay returns, just after the client's last byte
        "the spills counted",
        lambda: metric(gateway, names.SPILLS, remote="region-b", outcome="served") == 11,
        timeout=5,
    )
    assert metric(gateway, names.REMOTE_TOKENS, remote="region-b", type="completion") > 0
    # a local pool with nowhere else to retry spends no retry budget: a spill may need it
    assert metric(gateway, names.RETRY_BUDGET_EXHAUSTED) == 0
    assert metric(gateway, names.REQUESTS, tenant="acme", model="chat-small") >= 12
    spilled = [e for e in ledger_entries(redis.url) if e.pool == "remote:region-b"]
    assert spilled, "the usage ledger has the spilled requests, by target"
    assert {(e.tenant, e.model, e.outcome) for e in spilled} == {("acme", "chat-small", "served")}
    assert sum(e.requests for e in spilled) - ledgered_before == 11
    assert sum(e.completion_tokens for e in spilled) > 0

    for m, port in ports.items():  # the pool comes back where it was
        local_sims[m] = start_sim(root, m, port=port)
    back = time.monotonic()
    wait_for(
        "traffic to return to the local pool",
        lambda: target(ask(gateway)[1]) == "local",
        timeout=60,
        every=0.5,
    )
    assert time.monotonic() - back < 60
    assert [target(ask(gateway)[1]) for _ in range(5)] == ["local"] * 5


def test_with_the_region_gone_too_the_provider_answers_within_the_tenants_budget(
    gateway: Gateway, region: Region, local_sims: dict[str, Sim]
) -> None:
    for s in local_sims.values():
        s.kill()
    sims = region.sims
    region_ports = {m: s.port for m, s in sims.items()}
    for s in sims.values():
        s.kill()  # region-b's engines are gone: its gateway refuses, so the provider is next
    try:
        served, refused = 0, None
        for _ in range(10):
            try:
                model, headers = ask(gateway)
            except openai.APIStatusError as exc:
                refused = exc
                break
            assert target(headers) == "remote/provider", headers
            assert model == headers["x-tokenfleet-model"] == "provider-large"
            served += 1
        assert served >= 1 and refused is not None, "the budget of 0.05 takes a few requests"
        assert refused.status_code == 502  # the local refusal: its replicas are unreachable
        message = str(refused.message)
        assert "provider: budget" in message and "region-b" in message, message
        spent = metric(gateway, names.REMOTE_SPEND, remote="provider")
        assert 0 < spent <= 0.05 * 1.2, spent  # held before, settled after: bounded by budget
        assert metric(gateway, names.SPILLS, remote="provider", outcome="budget") >= 1
        model, headers = ask(gateway, THRIFTY_KEY)  # another tenant's budget is its own
        assert target(headers) == "remote/provider"
    finally:
        for m, port in region_ports.items():
            sims[m] = start_sim(
                region.gateway.log.parent, m, "--inter-token-latency", "20ms", port=port
            )


def test_a_client_leaving_a_spilled_stream_closes_the_remote_request(
    gateway: Gateway, region: Region, local_sims: dict[str, Sim]
) -> None:
    for s in local_sims.values():
        s.kill()
    sims = region.sims
    engine = sims["chat-small"]
    cancelled_before = metric(
        region.gateway, names.REQUESTS, tenant="region-a", outcome="cancelled"
    )
    conn, response = open_stream(
        gateway, KEY, model="chat-auto", prompt=SHORT, max_tokens=400, ignore_eos=True
    )
    assert response.getheader("X-TokenFleet-Target") == "remote/region-b"
    seen = 0
    while seen < 5:
        seen += b'"content":"' in response.fp.readline()
    assert connections_to(engine.port) >= 1
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_for(
        "region-b's gateway to close its engine request",
        lambda: connections_to(engine.port) == 0,
        timeout=5,
        every=0.05,
    )
    wait_for(
        "region-b to count the request cancelled",
        lambda: (
            metric(region.gateway, names.REQUESTS, tenant="region-a", outcome="cancelled")
            == cancelled_before + 1
        ),
        timeout=5,
    )


def test_a_local_queue_that_sheds_spills_as_overloaded(gateway: Gateway) -> None:
    conn, holding = open_stream(  # the one slot of the tight pool, for ~5 s
        gateway, KEY, model="chat-busy", prompt=SHORT, max_tokens=100, ignore_eos=True
    )
    assert holding.status == 200 and holding.getheader("X-TokenFleet-Target") is None
    model, headers = ask(gateway, model="chat-busy")  # waits 200 ms in the queue, then spills
    assert target(headers) == "remote/region-b" and model == "chat-small"
    assert headers["x-tokenfleet-spill-reason"] == "queue_timeout"
    assert metric(gateway, names.SPILLS, route="chat-busy", trigger="Overloaded") == 1
    conn.close()


def test_a_remote_without_its_key_mounted_is_skipped_and_said(
    gateway: Gateway, local_sims: dict[str, Sim]
) -> None:
    for s in local_sims.values():
        s.kill()
    with pytest.raises(openai.APIStatusError) as refused:
        ask(gateway, model="chat-nokey")
    assert refused.value.status_code == 502  # the local refusal (its replicas unreachable)
    assert "region-b: no_key" in str(refused.value.message)
    assert metric(gateway, names.SPILLS, route="chat-nokey", outcome="no_key") == 1
    log = gateway.log.read_text()
    assert log.count("remote region-b is never tried: its key file") == 1, log[-2000:]


def test_a_key_goes_only_to_the_url_its_secret_binds_it_to(
    gateway: Gateway, region: Region, local_sims: dict[str, Sim]
) -> None:
    """A route naming a mounted key with a URL its Secret does not list gets no key: the remote
    is skipped (region-b, here, never hears of the request), and the log says why once."""
    for s in local_sims.values():
        s.kill()
    seen_before = metric(region.gateway, names.REQUESTS, tenant="region-a")
    with pytest.raises(openai.APIStatusError) as refused:
        ask(gateway, model="chat-steal")
    assert "region-b: no_key" in str(refused.value.message)
    assert metric(region.gateway, names.REQUESTS, tenant="region-a") == seen_before
    log = gateway.log.read_text()
    assert log.count("Secret elsewhere-key does not bind its key to") == 1, log[-2000:]
    assert "sk-not-for-you" not in log


def test_a_client_leaving_a_spilled_stream_is_charged_what_it_got_there(
    gateway: Gateway, redis: Redis, local_sims: dict[str, Sim]
) -> None:
    """The spend hold (prompt + 400 tokens at 1 µUSD each) is settled to what was delivered
    when the client leaves: not kept at the hold, not refunded to nothing."""
    for s in local_sims.values():
        s.kill()
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    key = f"tf:b:{{acme|spill|chat-metered|region-b}}:{day}:USD"
    before = int(redis_get(redis, key) or 0)
    conn, response = open_stream(
        gateway, KEY, model="chat-metered", prompt=SHORT, max_tokens=400, ignore_eos=True
    )
    assert response.getheader("X-TokenFleet-Target") == "remote/region-b"
    seen = 0
    while seen < 5:
        seen += b'"content":"' in response.fp.readline()
    held = int(redis_get(redis, key) or 0) - before
    assert held > 400, "the whole worst case is held while it runs"
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    spent = wait_for(
        "the hold settled to what was delivered",
        lambda: (v := int(redis_get(redis, key) or 0) - before) < held and v,
        timeout=5,
        every=0.05,
    )
    assert 5 < spent < 100, spent  # the prompt and the handful of tokens relayed
