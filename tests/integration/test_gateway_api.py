"""The gateway's OpenAI surface against real simulated vLLM servers, with the real openai SDK.

Sync and async clients, streamed and not, usage, /v1/models per tenant, cache_salt overwritten
server-side (read back from the simulator's own HTTP log), every kind of bad input answered
with the right 4xx in OpenAI's error shape, a slowloris body, and fuzzed bodies: never a 5xx.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.gateway import (
    Gateway,
    Sim,
    access_record,
    key_hash,
    running,
    start_gateway,
    start_sim,
)
from tokenfleet.gateway.policy.salt import cache_salt

KEY_A, KEY_B = "tfk-team-a-key-000000000000000000000", "tfk-team-b-key-111111111111111111111"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-api")


@pytest.fixture(scope="module")
def sim(tmp: Path) -> Iterator[Sim]:
    s = start_sim(
        tmp, "chat-model", "--max-num-seqs", "8", "--inter-token-latency", "2ms", "--log-http"
    )
    yield s
    s.kill()


@pytest.fixture(scope="module")
def gateway(tmp: Path, sim: Sim) -> Iterator[Gateway]:
    config = {
        "models": [
            {
                "name": "chat-model",
                "aliases": ["chat"],
                "endpoints": [sim.url],
                "pool": "chat",
                "maxConcurrency": 8,
            },
            {"name": "tiny-context", "endpoints": [sim.url], "pool": "short"},
        ],
        "pools": [{"name": "chat"}, {"name": "short", "maxInputTokens": 50}],
        "tenants": [
            {"name": "team-a", "apiKeyHashes": [key_hash(KEY_A)], "allowedModels": ["*"]},
            {
                "name": "team-b",
                "apiKeyHashes": [key_hash(KEY_B)],
                "allowedModels": ["chat-model"],
                "maxTokensCap": 100,
                "cacheIsolation": {"mode": "SharedGroup", "group": "evals"},
            },
        ],
    }
    with running(
        start_gateway(tmp, config, "--body-timeout", "1", "--max-body-bytes", "65536")
    ) as g:
        yield g
    log = g.log.read_text()
    assert KEY_A not in log and KEY_B not in log, "an API key reached the log"
    assert "Traceback" not in log, log[-3000:]


def client(gateway: Gateway, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


MESSAGES: Any = [{"role": "user", "content": "Tell me about prefix caching."}]


def test_chat_completion_with_usage_and_model_header(gateway: Gateway) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, max_tokens=8
    )
    assert raw.headers["X-TokenFleet-Model"] == "chat-model"
    assert raw.headers["X-Request-Id"]
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert (
        reply.usage is not None
        and reply.usage.completion_tokens >= 1
        and reply.usage.prompt_tokens >= 1
    )


def test_streamed_chat_relays_every_chunk_and_usage(gateway: Gateway) -> None:
    chunks = list(
        client(gateway).chat.completions.create(
            model="chat-model",
            messages=MESSAGES,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len(chunks) >= 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_completions_endpoint_streamed_and_not(gateway: Gateway) -> None:
    c = client(gateway)
    assert (
        c.completions.create(model="chat-model", prompt="Once upon a time", max_tokens=5)
        .choices[0]
        .text
    )
    streamed = list(
        c.completions.create(model="chat-model", prompt="Once", max_tokens=5, stream=True)
    )
    assert "".join(x.choices[0].text for x in streamed if x.choices)


async def test_async_client_streams(gateway: Gateway) -> None:
    c = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0)
    stream = await c.chat.completions.create(
        model="chat-model", messages=MESSAGES, max_tokens=6, stream=True
    )
    parts = [x.choices[0].delta.content async for x in stream if x.choices]
    assert "".join(p or "" for p in parts)
    reply = await c.chat.completions.create(model="chat-model", messages=MESSAGES, max_tokens=4)
    assert reply.choices[0].message.content
    await c.close()


def test_models_lists_only_what_the_tenant_may_use(gateway: Gateway) -> None:
    assert sorted(m.id for m in client(gateway, KEY_A).models.list()) == [
        "chat",
        "chat-model",
        "tiny-context",
    ]
    # team-b may use chat-model, and so its alias "chat" too
    assert sorted(m.id for m in client(gateway, KEY_B).models.list()) == ["chat", "chat-model"]


def test_cache_salt_is_overwritten_server_side(gateway: Gateway, sim: Sim) -> None:
    body: Any = {"cache_salt": "victim-salt"}
    client(gateway, KEY_B).chat.completions.create(
        model="chat-model", messages=MESSAGES, max_tokens=2, extra_body=body
    )
    # the caller's salt is mixed into the tenant's (it can only split its own cache), never sent
    expected = cache_salt(
        secret=b"test-salt-secret", tenant="team-b", group="evals", caller="victim-salt"
    )
    assert expected != cache_salt(secret=b"test-salt-secret", tenant="team-b", group="evals")
    deadline = time.monotonic() + 5
    while expected not in sim.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = sim.log.read_text()
    assert expected in seen
    assert "victim-salt" not in seen


def test_a_request_without_max_tokens_runs_with_what_was_reserved(
    gateway: Gateway, sim: Sim
) -> None:
    """The engine is sent the reserved max_tokens, so a tenant's cap below the 256-token
    default holds even when the engine would generate more (ignore_eos: it runs to the limit)."""
    capped = client(gateway, KEY_B).chat.completions.create(
        model="chat-model", messages=MESSAGES, extra_body={"ignore_eos": True}
    )
    assert capped.usage is not None and capped.usage.completion_tokens == 100
    free = client(gateway).completions.create(
        model="chat-model", prompt="Once", extra_body={"ignore_eos": True}
    )
    assert free.usage is not None and free.usage.completion_tokens == 256
    sent = sim.log.read_text().replace('\\"', '"')  # the simulator logs bodies JSON-escaped
    assert '"max_tokens":100}' in sent and '"max_tokens":256}' in sent


@pytest.mark.parametrize("asked", [True, False])
def test_streamed_usage_is_the_engines_and_only_the_asker_sees_it(
    gateway: Gateway, asked: bool
) -> None:
    options: Any = {"include_usage": True} if asked else None
    rid = f"usage-{asked}"
    with client(gateway).chat.completions.with_streaming_response.create(
        model="chat-model",
        messages=MESSAGES,
        max_tokens=12,
        stream=True,
        stream_options=options,
        extra_body={"ignore_eos": True},
        extra_headers={"X-Request-Id": rid},
    ) as raw:
        chunks = list(raw.parse())
    usages = [c.usage for c in chunks if c.usage is not None]
    record = access_record(gateway, rid)
    assert record["completion_tokens"] == 12 and record["outcome"] == "served"
    if asked:
        assert len(usages) == 1 and usages[0].completion_tokens == 12
        assert usages[0].prompt_tokens == record["prompt_tokens"]  # the engine's, not the estimate
    else:
        assert usages == [] and not any(not c.choices for c in chunks)


def test_the_vllm_surface_health_model_embeddings_responses(gateway: Gateway, sim: Sim) -> None:
    assert gateway.get("/health")[0] == 200
    c = client(gateway)
    assert c.models.retrieve("chat").id == "chat"
    with pytest.raises(openai.NotFoundError):
        client(gateway, KEY_B).models.retrieve("tiny-context")  # not the tenant's to use
    vectors = c.embeddings.create(model="chat", input=["one", "two"])
    assert len(vectors.data) == 2 and vectors.data[0].embedding
    answer = c.responses.with_raw_response.create(
        model="chat", input="Say hi", max_output_tokens=5, extra_headers={"X-Request-Id": "resp-1"}
    )
    assert answer.headers["X-TokenFleet-Model"] == "chat-model"
    assert answer.parse().output_text
    record = access_record(gateway, "resp-1")
    assert record["route"] == "/v1/responses" and 1 <= record["completion_tokens"] <= 5
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=gateway.url + "/v1", api_key="tfk-nope", max_retries=0
        ).embeddings.create(model="chat", input="x")
    deadline = time.monotonic() + 5
    while "resp-1" not in sim.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "X-Request-Id: resp-1" in sim.log.read_text()  # the engine logs the gateway's id


def test_an_invalid_request_the_engine_rejects_is_answered_at_once(tmp: Path) -> None:
    """Two engines that reject every request as invalid: one is asked, once, and the client
    gets the engine's 400 as OpenAI's invalid_request_error, not a 502 after retries."""
    sims = [
        start_sim(
            tmp,
            "m",
            "--failure-injection-rate",
            "100",
            "--failure-types",
            "invalid_request",
            "--log-http",
        )
        for _ in range(2)
    ]
    config = {
        "models": [{"name": "m", "endpoints": [s.url for s in sims]}],
        "pools": [{"name": "default"}],
        "tenants": [{"name": "team-a", "apiKeyHashes": [key_hash(KEY_A)], "allowedModels": ["*"]}],
    }
    with running(start_gateway(tmp, config)) as g:
        with pytest.raises(openai.BadRequestError) as caught:
            client(g).chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
        metrics = g.get("/metrics")[1]
    for s in sims:
        s.kill()
    error: Any = caught.value.body
    assert error["code"] == "invalid_request" and "Invalid request" in error["message"]
    assert "tokenfleet_gateway_retries_total{" not in metrics
    asked = sum(s.log.read_text().count('requestURI="/v1/chat/completions"') for s in sims)
    assert asked == 1


def post(
    gateway: Gateway,
    body: bytes | str,
    *,
    key: str | None = KEY_A,
    path: str = "/v1/chat/completions",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        all_headers["Authorization"] = f"Bearer {key}"
    conn.request(
        method, path, body=body.encode() if isinstance(body, str) else body, headers=all_headers
    )
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, json.loads(payload), dict(response.getheaders())


def chat(**fields: Any) -> str:
    return json.dumps({"model": "chat-model", "messages": MESSAGES, **fields})


@pytest.mark.parametrize(
    ("body", "key", "status", "code"),
    [
        pytest.param("{not json", KEY_A, 400, "malformed_json", id="malformed-json"),
        pytest.param(
            json.dumps({"model": 5, "messages": MESSAGES}),
            KEY_A,
            400,
            "invalid_request",
            id="wrong-type",
        ),
        pytest.param(
            json.dumps({"model": "chat-model", "messages": []}),
            KEY_A,
            400,
            "invalid_request",
            id="empty-messages",
        ),
        pytest.param(
            chat(model="no-such-model"), KEY_A, 404, "model_not_found", id="unknown-model"
        ),
        pytest.param(
            chat(model="tiny-context"), KEY_B, 403, "model_not_allowed", id="model-not-allowed"
        ),
        pytest.param(chat(), None, 401, "missing_api_key", id="missing-key"),
        pytest.param(chat(), "tfk-wrong", 401, "invalid_api_key", id="invalid-key"),
        pytest.param(
            json.dumps(
                {"model": "tiny-context", "messages": [{"role": "user", "content": "x" * 400}]}
            ),
            KEY_A,
            400,
            "context_length_exceeded",
            id="prompt-beyond-context",
        ),
        pytest.param(
            chat(max_tokens=500), KEY_B, 400, "max_tokens_too_large", id="max-tokens-beyond-cap"
        ),
        pytest.param(chat(max_tokens=-3), KEY_A, 400, "invalid_request", id="negative-max-tokens"),
        pytest.param(chat(stream="maybe"), KEY_A, 400, "invalid_request", id="stream-not-bool"),
        pytest.param("x" * 70000, KEY_A, 413, "request_too_large", id="oversized-body"),
    ],
)
def test_bad_input_gets_the_right_4xx_in_openai_shape(
    gateway: Gateway, body: str, key: str | None, status: int, code: str
) -> None:
    got_status, payload, _ = post(gateway, body, key=key)
    assert got_status == status
    error = payload["error"]
    assert error["code"] == code and error["message"] and "type" in error and "param" in error
    assert "Traceback" not in error["message"] and (key is None or key not in json.dumps(payload))


def test_bad_deadline_header_and_unknown_routes(gateway: Gateway) -> None:
    status, payload, _ = post(gateway, chat(), headers={"X-TokenFleet-Deadline-Ms": "never"})
    assert status == 400 and payload["error"]["param"] == "X-TokenFleet-Deadline-Ms"
    status, payload, _ = post(gateway, "{}", path="/v1/no-such-route")
    assert status == 404 and payload["error"]["code"] == "not_found"
    status, payload, _ = post(gateway, "", path="/v1/chat/completions", method="GET")
    assert status == 405 and payload["error"]["code"] == "method_not_allowed"


def test_a_body_sent_byte_by_byte_too_slowly_gets_408(gateway: Gateway) -> None:
    body = chat().encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY_A}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        for byte in body[:5]:
            s.sendall(bytes([byte]))
            time.sleep(0.4)
        answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 408"), answer[:200]
    assert '"code":"request_timeout"' in answer
    assert post(gateway, chat(max_tokens=2))[0] == 200  # the gateway is fine afterwards


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["chat-model", "chat", "nope", ""]) | json_values,
        "messages": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "role": st.sampled_from(["user", "x"]) | json_values,
                    "content": json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "max_tokens": st.integers(-5, 20) | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "temperature": json_values,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=request_like | json_values)
def test_fuzzed_bodies_never_get_a_5xx(gateway: Gateway, body: Any) -> None:
    status, payload, _ = post(gateway, json.dumps(body))
    assert status < 500, payload
    assert ("error" in payload) == (status >= 400)


@pytest.mark.parametrize("asked", ["€uro".encode(), b"\xff\xfe", b"tab\there"])
def test_a_request_id_that_is_not_printable_ascii_is_replaced_not_a_500(
    gateway: Gateway, sim: Sim, asked: bytes
) -> None:
    """The id goes on to the engine in a header (latin-1 on the wire): the gateway keeps only
    printable ASCII ids and gives the others a fresh one."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    body = json.dumps({"model": "chat", "messages": MESSAGES, "max_tokens": 3}).encode()
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("Authorization", f"Bearer {KEY_A}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.putheader("X-Request-Id", asked)
    conn.endheaders(body)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200
    given_id = response.headers["X-Request-Id"]
    assert given_id and given_id.isascii() and given_id.encode() != asked
