"""Adapter-aware routing end to end, all real: llm-d-inference-sim engines with LoRA slots
(``--max-loras``/``--max-cpu-loras``), one real adapter-loader sidecar per engine
(``python -m tokenfleet.worker.adapters``) verifying real model-signing signatures, the gateway
in static mode in front, and the openai SDK as the client.

Covered: an adapter served by its name, streamed and not (the engine answers as the adapter);
``/v1/models`` lists the offered adapters that name the caller, and only to it;
a tenant not in the adapter's tenants gets 403 even with ``allowedModels: ["*"]``; an adapter
without a verdict gets 503 with Retry-After, a refused one 503 naming its reason and no
Retry-After; repeated requests for a loaded adapter go to the replica holding it (the hit ratio
from the gateway's metrics, and the other engine never sees the adapter); slot pressure (two
slots, three adapters in turn) evicts the least recently used adapter and a request for it
loads it again; an adapter the engine lost behind the gateway's back (unloaded through the
sidecar, as another gateway would) is loaded again and the request retried once; a worker's
verification refusing the files (tampered after signing) fails the request with a 503 naming
the reason; eight concurrent requests for an adapter nobody holds make one load; a load slower
than the base's loadTimeoutSeconds is 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from support import adapters
from support.adapters import Loader, Signed
from support.gateway import Gateway, Sim, key_hash, running, start_gateway, start_sim
from support.gateway import gateway_metric as metric
from tokenfleet.signals import gateway as names

KEY, OTHER_KEY = "tfk-adapters-acme-" + "0" * 20, "tfk-adapters-other-" + "1" * 20
MESSAGES: Any = [{"role": "user", "content": "Summarise my ticket."}]
#: Adapters on the two-replica base: one to hit, one to lose behind the gateway's back, one
#: asked for by many at once.
PAIR = ("acme-support", "acme-lost", "acme-burst")
#: Adapters on the one-replica base with two slots: three in turn must evict.
TRIO = ("solo-a", "solo-b", "solo-c")
#: An adapter on a base whose loadTimeoutSeconds (1 ms) no real verify-and-load meets.
HASTY = "hasty-a"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-adapters")


@pytest.fixture(scope="module")
def key(root: Path) -> tuple[Path, Path]:
    return adapters.key_pair(root / "keys")


@pytest.fixture(scope="module")
def signed(root: Path, key: tuple[Path, Path]) -> dict[str, Signed]:
    made = {
        name: adapters.signed_adapter(root / "files", name, private_key=key[0])
        for name in (*PAIR, *TRIO, HASTY, "acme-tampered")
    }
    tampered = made["acme-tampered"].path / "adapter_model.safetensors"
    tampered.write_bytes(b"\x05" * 4096)  # after signing: the worker must refuse it
    return made


@pytest.fixture(scope="module")
def engines(root: Path) -> Iterator[list[Sim]]:
    sims = [
        start_sim(root, "base", "--max-loras", "2", "--max-cpu-loras", "2", "--log-http")
        for _ in range(4)
    ]
    yield sims
    for s in sims:
        s.kill()


@pytest.fixture(scope="module")
def loaders(root: Path, engines: list[Sim], key: tuple[Path, Path]) -> Iterator[list[Loader]]:
    """One real adapter-loader per engine, trusting the key the adapters are signed with."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                adapters.running_loader(root / f"l{i}", engine_url=e.url, public_key=key[1])
            )
            for i, e in enumerate(engines)
        ]


def adapter(name: str, base: str, s: Signed | None = None, **extra: Any) -> dict[str, Any]:
    digest = s.digest if s else "sha256:" + "e" * 64
    uri = s.uri if s else "file:///nowhere"
    return {
        "base": base,
        "servedName": name,
        "artifact": {"uri": uri, "digest": digest},
        "tenants": ["acme"],
        **extra,
    }


@pytest.fixture(scope="module")
def gateway(
    root: Path, engines: list[Sim], loaders: list[Loader], signed: dict[str, Signed]
) -> Iterator[Gateway]:
    lora = {"maxLoras": 2, "maxCpuLoras": 2}
    config = {
        "models": [
            {
                "name": "base",
                "endpoints": [engines[0].url, engines[1].url],
                "lora": lora,
                "adapters": {"loadTimeoutSeconds": 20},
                "adapterLoaders": {engines[i].url: loaders[i].url for i in (0, 1)},
            },
            {
                "name": "solo",
                "endpoints": [engines[2].url],
                "lora": lora,
                "adapterLoaders": {engines[2].url: loaders[2].url},
            },
            {
                "name": "hasty",
                "endpoints": [engines[3].url],
                "lora": lora,
                "adapters": {"loadTimeoutSeconds": 0.001},
                "adapterLoaders": {engines[3].url: loaders[3].url},
            },
        ],
        "tenants": [
            {"name": "acme", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["base"]},
            {"name": "other", "apiKeyHashes": [key_hash(OTHER_KEY)], "allowedModels": ["*"]},
        ],
        "adapters": [
            *(adapter(n, "base", signed[n]) for n in PAIR),
            *(adapter(n, "solo", signed[n]) for n in TRIO),
            adapter(HASTY, "hasty", signed[HASTY]),
            adapter("acme-tampered", "base", signed["acme-tampered"]),
            adapter("acme-pending", "base", verified=False),
            adapter("acme-refused", "base", verified=False, reason="UntrustedSigner"),
        ],
    }
    # listings only every minute: the test of an adapter lost behind the gateway's back must
    # meet the engine's 404, not a listing that noticed first
    with running(start_gateway(root, config, "--adapter-listing-interval", "60")) as g:
        yield g
    log = g.log.read_text()
    assert "Traceback" not in log, log[-3000:]


def client(g: Gateway, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0)


def chat(g: Gateway, model: str, **extra: Any) -> Any:
    return client(g).chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, **extra)


def listed(loader: Loader) -> set[str]:
    status, body = adapters.call(f"{loader.url}/v1/adapters")
    assert status == 200, body
    return {a["name"] for a in body["adapters"]}


def requests(g: Gateway, name: str, placement: str = "") -> float:
    wanted = {"adapter": name, **({"placement": placement} if placement else {})}
    return metric(g, names.ADAPTER_REQUESTS, **wanted)


def test_an_adapter_is_served_by_its_name_streamed_and_not(gateway: Gateway) -> None:
    answer = chat(gateway, "acme-support")
    assert answer.model == "acme-support" and answer.choices[0].message.content
    stream = chat(gateway, "acme-support", stream=True)
    chunks = [c for c in stream]
    assert chunks and all(c.model == "acme-support" for c in chunks)
    assert metric(gateway, names.ADAPTER_LOADS, adapter="acme-support") == 1
    assert metric(gateway, names.ADAPTER_LOADED, adapter="acme-support") == 1
    assert requests(gateway, "acme-support", "hit") >= 1  # the stream found it loaded
    # usage and the request counter name the adapter, not its base
    served = metric(gateway, names.REQUESTS, model="acme-support", outcome="served")
    assert served == 2


def test_the_models_list_shows_the_adapters_that_name_the_tenant(gateway: Gateway) -> None:
    mine = {m.id for m in client(gateway).models.list()}
    assert mine == {"base", *PAIR, *TRIO, HASTY, "acme-tampered"}  # offered: not pending/refused
    assert client(gateway).models.retrieve("acme-support").id == "acme-support"
    others = {m.id for m in client(gateway, OTHER_KEY).models.list()}
    assert others == {"base", "solo", "hasty"}
    with pytest.raises(openai.NotFoundError):
        client(gateway, OTHER_KEY).models.retrieve("acme-support")


def test_a_tenant_not_named_by_the_adapter_is_refused_even_with_every_model(
    gateway: Gateway,
) -> None:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client(gateway, OTHER_KEY).chat.completions.create(
            model="acme-support", messages=MESSAGES, max_tokens=4
        )
    assert refused.value.code == "model_not_allowed"


def test_an_unverified_adapter_is_503_with_retry_after(gateway: Gateway) -> None:
    with pytest.raises(openai.InternalServerError) as pending:
        chat(gateway, "acme-pending")
    assert pending.value.status_code == 503 and pending.value.code == "adapter_not_verified"
    assert pending.value.response.headers["Retry-After"] == "10"


def test_a_refused_adapter_is_503_naming_its_reason_without_retry_after(
    gateway: Gateway,
) -> None:
    with pytest.raises(openai.InternalServerError) as refused:
        chat(gateway, "acme-refused")
    assert refused.value.status_code == 503 and refused.value.code == "adapter_refused"
    assert "UntrustedSigner" in refused.value.message
    assert "kubectl describe modeladapter acme-refused" in refused.value.message
    assert "Retry-After" not in refused.value.response.headers
    # the SDK's own retries (2 by default, on every 5xx) are told they cannot help
    assert refused.value.response.headers["x-should-retry"] == "false"
    counted = {"model": "acme-refused", "reason": "adapter_refused"}
    before = metric(gateway, names.REQUESTS, **counted)
    retrying = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=2)
    with pytest.raises(openai.InternalServerError):
        retrying.chat.completions.create(model="acme-refused", messages=MESSAGES, max_tokens=4)
    assert metric(gateway, names.REQUESTS, **counted) - before == 1


def test_repeated_requests_go_to_the_replica_holding_the_adapter(
    gateway: Gateway, engines: list[Sim], loaders: list[Loader]
) -> None:
    chat(gateway, "acme-support")  # loaded somewhere by now (the first test, or here)
    holders = [i for i in (0, 1) if "acme-support" in listed(loaders[i])]
    assert len(holders) == 1, holders
    (holder,) = holders
    before_all, before_hit = (
        requests(gateway, "acme-support"),
        requests(gateway, "acme-support", "hit"),
    )
    for _ in range(20):
        chat(gateway, "acme-support")
    hits = requests(gateway, "acme-support", "hit") - before_hit
    total = requests(gateway, "acme-support") - before_all
    assert (hits, total) == (20, 20)  # hit ratio 1.0: no load, no spill at this load
    assert "acme-support" not in listed(loaders[1 - holder])


def test_concurrent_requests_for_an_unloaded_adapter_share_one_load(gateway: Gateway) -> None:
    async def burst() -> list[Any]:
        c = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
        calls = [
            c.chat.completions.create(model="acme-burst", messages=MESSAGES, max_tokens=4)
            for _ in range(8)
        ]
        try:
            return await asyncio.gather(*calls)
        finally:
            await c.close()

    answers = asyncio.run(burst())
    assert [a.model for a in answers] == ["acme-burst"] * 8
    assert metric(gateway, names.ADAPTER_LOADS, adapter="acme-burst") == 1
    assert requests(gateway, "acme-burst", "loaded") == 1
    assert requests(gateway, "acme-burst") == 8  # the others waited for it, or found it loaded


def test_slot_pressure_evicts_the_least_recently_used_adapter(
    gateway: Gateway, loaders: list[Loader]
) -> None:
    solo = loaders[2]
    for name in TRIO:  # two slots: the third load evicts the first
        chat(gateway, name)
    assert listed(solo) == {"solo-b", "solo-c"}
    assert metric(gateway, names.ADAPTER_EVICTIONS, adapter="solo-a") == 1
    assert metric(gateway, names.ADAPTER_LOADED, adapter="solo-a") == 0
    chat(gateway, "solo-a")  # loads it again, evicting solo-b (now the least recently used)
    assert listed(solo) == {"solo-c", "solo-a"}
    assert metric(gateway, names.ADAPTER_LOADS, adapter="solo-a") == 2
    assert metric(gateway, names.ADAPTER_EVICTIONS, adapter="solo-b") == 1


def test_an_adapter_lost_behind_the_gateways_back_is_loaded_again(
    gateway: Gateway, loaders: list[Loader]
) -> None:
    chat(gateway, "acme-lost")
    (holder,) = [ld for ld in loaders[:2] if "acme-lost" in listed(ld)]
    status, _ = holder.unload("acme-lost")  # as another gateway evicting it would
    assert status == 200
    answer = chat(gateway, "acme-lost")  # no listing in between (60 s): the engine says 404
    assert answer.model == "acme-lost"
    assert metric(gateway, names.ADAPTER_LOADS, adapter="acme-lost") == 2
    retried = metric(gateway, names.RETRIES, model="acme-lost", reason="adapter_lost")
    assert retried == 1
    assert "acme-lost" in listed(holder)


def test_a_worker_refusing_the_files_fails_the_request_naming_the_reason(
    gateway: Gateway,
) -> None:
    with pytest.raises(openai.InternalServerError) as refused:
        chat(gateway, "acme-tampered")
    assert refused.value.status_code == 503 and refused.value.code == "adapter_refused"
    assert "DigestMismatch" in refused.value.message
    outcome = metric(gateway, names.ADAPTER_LOADS, adapter="acme-tampered", outcome="refused")
    assert outcome == 1


def test_a_load_slower_than_the_timeout_is_503_with_retry_after(gateway: Gateway) -> None:
    with pytest.raises(openai.InternalServerError) as slow:
        chat(gateway, HASTY)
    assert slow.value.status_code == 503 and slow.value.code == "adapter_load_timeout"
    assert slow.value.response.headers["Retry-After"] == "1"
    assert metric(gateway, names.ADAPTER_LOADS, adapter=HASTY, outcome="timeout") == 1
