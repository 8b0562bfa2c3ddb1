"""The local platform's OpenAI-compatible provider (tokenfleet.devstack.provider) in front of a
real llm-d-inference-sim, with the openai SDK and raw HTTP as clients.

Covered: no key, a wrong key and another scheme get 401 with OpenAI's error body (the SDK raises
AuthenticationError with code invalid_api_key) and the right key lists
the engine's model, answers chat and text completions, and streams chat chunk by chunk with the
SSE framing intact; a client leaving mid-stream closes the upstream
connection at once; paths it does not offer are 404; an empty key file stops it at start.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from support.cluster import wait_for
from support.gateway import Sim, connections_to, free_port, listening, spawn, start_sim, stop

KEY = "sk-local-provider-" + "7" * 24
MODEL = "provider-large"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    sim = start_sim(tmp_path_factory.mktemp("provider-sim"), MODEL, "--inter-token-latency", "50ms")
    yield sim
    sim.kill()


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory, engine: Sim) -> Iterator[str]:
    root = tmp_path_factory.mktemp("provider")
    key_file = root / "api-key"
    key_file.write_text(KEY + "\n")  # a trailing newline, as an editor leaves it, is no part
    port = free_port()
    argv = [sys.executable, "-m", "tokenfleet.devstack.provider", "--port", str(port)]
    argv += ["--upstream", engine.url, "--key-file", str(key_file)]
    log = root / "provider.log"
    process = spawn(argv, log)
    wait_for("the provider to listen", lambda: listening(port) or process.poll() is not None)
    assert process.poll() is None, log.read_text()
    yield f"http://127.0.0.1:{port}"
    stop(process)
    assert "Traceback" not in log.read_text() and KEY not in log.read_text()


def client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def post(
    url: str, path: str, body: dict[str, object], headers: dict[str, str]
) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    response = conn.getresponse()
    return response.status, response.read()


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-key"),
        pytest.param({"Authorization": "Bearer sk-wrong"}, id="wrong-key"),
        pytest.param({"Authorization": f"Bearer {KEY}x"}, id="key-plus-one"),
        pytest.param({"Authorization": f"Basic {KEY}"}, id="other-scheme"),
    ],
)
def test_a_missing_or_wrong_key_gets_openais_401(provider: str, headers: dict[str, str]) -> None:
    status, body = post(provider, "/v1/chat/completions", CHAT, headers)
    assert status == 401  # the engine checks no key: only the provider answers 401
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert error["message"]


def test_the_sdk_sees_a_wrong_key_as_authentication_error(provider: str) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        client(provider, "sk-wrong").models.list()
    assert refused.value.code == "invalid_api_key"


def test_the_right_key_is_served_by_the_engine(provider: str) -> None:
    sdk = client(provider)
    assert [m.id for m in sdk.models.list()] == [MODEL]
    chat = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert chat.model == MODEL and chat.choices[0].message.content
    text = sdk.completions.create(model=MODEL, prompt="Once upon", max_tokens=3)
    assert text.model == MODEL and text.choices[0].text


def test_a_stream_arrives_chunk_by_chunk_with_its_framing(provider: str) -> None:
    chunks = list(
        client(provider).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
        )
    )
    assert len(chunks) >= 3 and all(c.model == MODEL for c in chunks)
    status, raw = post(
        provider,
        "/v1/chat/completions",
        {**CHAT, "stream": True},
        {"Authorization": f"Bearer {KEY}"},
    )
    events = raw.decode().split("\n\n")
    assert status == 200 and events[-2] == "data: [DONE]" and events[-1] == ""
    assert all(e.startswith("data: ") for e in events[:-1])


def test_a_client_leaving_mid_stream_closes_the_upstream_at_once(
    provider: str, engine: Sim
) -> None:
    host, port = provider.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {**CHAT, "max_tokens": 400, "stream": True}  # 20 s at 50 ms a token
    conn.request(
        "POST",
        "/v1/chat/completions",
        json.dumps(body),
        {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    response = conn.getresponse()
    assert response.status == 200 and response.read(200)
    assert connections_to(engine.port) == 1
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)  # the client walks away mid-stream
    conn.close()
    wait_for(
        "the provider to close the upstream connection",
        lambda: connections_to(engine.port) == 0,
        timeout=2.0,
        every=0.02,
    )


def test_what_it_does_not_offer_is_404(provider: str) -> None:
    status, _ = post(provider, "/v1/embeddings", {"model": MODEL, "input": "x"}, {})
    assert status == 404


def test_an_empty_key_file_is_refused_at_start(tmp_path: Path) -> None:
    """Not served as "any key works"."""
    empty = tmp_path / "api-key"
    empty.write_text("\n")
    argv = [sys.executable, "-m", "tokenfleet.devstack.provider", "--port", str(free_port())]
    argv += ["--upstream", "http://127.0.0.1:9", "--key-file", str(empty)]
    process = spawn(argv, tmp_path / "log")
    assert process.wait(timeout=30) != 0
    assert "non-empty key" in (tmp_path / "log").read_text()
