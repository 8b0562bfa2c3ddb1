"""The gateway's OpenTelemetry traces, read back from a real Jaeger.

A real Jaeger (tools/build.sh, from its Go module) receives the gateway's OTLP/JSON; a real
simulated vLLM answers; the gateway runs as the other integration tests run it. One request
each, then Jaeger's query API gives the trace back:

- every step's span is there (intake, quota, budget, queue, route, upstream with first_byte
  and relay, settle), each parented where it belongs, under the caller's span when the
  request came with a ``traceparent``;
- the attributes say who, what and where (tenant, model, class, pool, outcome, status,
  endpoint, revision, prefix blocks, tokens) and hold neither the API key nor prompt text;
- the engine got a ``traceparent`` naming the attempt's span (the simulator's HTTP log);
- the spans' timings add up: the steps follow each other without gaps, their sum is the
  request's span, and that is the latency the client measured, within a few milliseconds;
- with head sampling at 0, a served request's trace is dropped and a failed one kept.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import BIN_DIR, wait_for
from support.gateway import (
    Gateway,
    Sim,
    free_port,
    key_hash,
    running,
    spawn,
    start_gateway,
    start_sim,
    stop,
)
from tokenfleet.devstack import jaeger

KEY = "tfk-trace-key-00000000000000000000000"
PROMPT = "Tell me a secret about prefix caching"
STEPS = ["intake", "quota", "budget", "queue", "route", "upstream", "settle"]
#: The client's latency and the request's span may differ by what lies outside the handler:
#: connecting, the request line and headers read by aiohttp, the last chunk on the wire (and
#: the other way, the settlement after the last byte, which the request's span includes).
CLIENT_SLACK_S = 0.005
#: The steps' sum and the request's span differ by the end's report only (microseconds).
STEPS_SLACK_S = 0.002


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gw-traces")


@pytest.fixture(scope="module")
def backend(tmp: Path) -> Iterator[jaeger.Ports]:
    ports = jaeger.Ports(
        otlp_http=free_port(), query_http=free_port(), query_grpc=free_port(), health=free_port()
    )
    process = spawn(jaeger.argv(BIN_DIR / "jaeger", tmp / "jaeger.yaml", ports), tmp / "jaeger.log")
    wait_for("jaeger to be healthy", lambda: _get(jaeger.health_url(ports)) is not None, 60)
    yield ports
    stop(process)


@pytest.fixture(scope="module")
def sim(tmp: Path) -> Iterator[Sim]:
    s = start_sim(
        tmp,
        "chat-model",
        "--log-http",
        "--time-to-first-token",
        "40ms",
        "--inter-token-latency",
        "5ms",
        "--failure-injection-rate",
        "0",
    )
    yield s
    s.kill()


def _config(sim: Sim, *, broken: str | None = None) -> dict[str, Any]:
    endpoints = [sim.url]
    models: list[dict[str, Any]] = [
        {"name": "chat-model", "endpoints": endpoints, "pool": "chat", "revision": "r1"}
    ]
    if broken:  # a model whose only engine refuses connections: an upstream error
        models.append({"name": "broken-model", "endpoints": [broken], "pool": "chat"})
    return {
        "models": models,
        "pools": [{"name": "chat"}],
        "tenants": [{"name": "team-a", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["*"]}],
    }


def _tracing(ports: jaeger.Ports, *, ratio: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ports.otlp_traces_url,
        "TOKENFLEET_TRACE_SAMPLE_RATIO": ratio,
        "TOKENFLEET_TRACE_EXPORT_SECONDS": "0.1",
    }


@pytest.fixture(scope="module")
def gateway(tmp: Path, sim: Sim, backend: jaeger.Ports) -> Iterator[Gateway]:
    env = _tracing(backend, ratio="1")
    with running(start_gateway(tmp, _config(sim), env=env)) as g:
        yield g
    log = g.log.read_text()
    assert KEY not in log and "Traceback" not in log, log[-3000:]


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def _trace(ports: jaeger.Ports, trace_id: str, *, spans: int) -> list[dict[str, Any]]:
    """The trace's spans as Jaeger stores them (OTLP/JSON, nanoseconds), once it has ``spans``."""

    def found() -> list[dict[str, Any]] | None:
        got = _get(f"{ports.query_url}/api/v3/traces/{trace_id}")
        if not got:
            return None
        out = [
            s
            for rs in got["result"]["resourceSpans"]
            for ss in rs["scopeSpans"]
            for s in ss["spans"]
        ]
        return out if len(out) >= spans else None

    return wait_for(f"trace {trace_id} in jaeger", found, timeout=15)


def _chat(
    gateway: Gateway, *, stream: bool, headers: dict[str, str] | None = None, model: str = ""
) -> tuple[float, int, dict[str, str], bytes]:
    """One chat completion: the client's latency (connect to last byte), status, headers, body."""
    body = json.dumps(
        {
            "model": model or "chat-model",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 12,
            "stream": stream,
        }
    )
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=body,
        headers={
            "Authorization": f"Bearer {KEY}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    response = conn.getresponse()
    data = response.read()
    took = time.perf_counter() - started
    conn.close()
    return took, response.status, dict(response.getheaders()), data


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in span.get("attributes", []):
        ((_, value),) = a["value"].items()
        out[a["key"]] = value
    return out


def _seconds(span: dict[str, Any]) -> float:
    return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e9


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_one_request_reads_back_whole_parented_and_adding_up(
    gateway: Gateway, sim: Sim, backend: jaeger.Ports, stream: bool
) -> None:
    trace_id, caller = os.urandom(16).hex(), os.urandom(8).hex()
    took, status, headers, data = _chat(
        gateway, stream=stream, headers={"traceparent": f"00-{trace_id}-{caller}-01"}
    )
    assert status == 200, data
    spans = _trace(backend, trace_id, spans=len(STEPS) + 3)
    names = sorted(s["name"] for s in spans)
    assert names == sorted([*STEPS, "POST /v1/chat/completions", "first_byte", "relay"]), names

    (root,) = [s for s in spans if s["name"] == "POST /v1/chat/completions"]
    by_name = {s["name"]: s for s in spans}
    assert root["parentSpanId"] == caller  # under the caller's span: the trace is joined
    assert root["kind"] == 2  # SERVER
    upstream = by_name["upstream"]
    for name in STEPS:
        assert by_name[name]["parentSpanId"] == root["spanId"], name
    for name in ("first_byte", "relay"):
        assert by_name[name]["parentSpanId"] == upstream["spanId"], name
    assert upstream["kind"] == 3  # CLIENT

    a = _attrs(root)
    assert a["tokenfleet.tenant"] == "team-a"
    assert a["gen_ai.request.model"] == "chat-model"
    assert a["tokenfleet.class"] and a["tokenfleet.pool"] == "chat"
    assert a["tokenfleet.outcome"] == "served"
    assert a["http.response.status_code"] == "200"
    assert a["tokenfleet.request_id"] == headers["X-Request-Id"]
    assert a["tokenfleet.revision"] == "r1"
    assert int(a["gen_ai.usage.output_tokens"]) >= 1
    assert int(a["gen_ai.usage.input_tokens"]) >= 1
    route = _attrs(by_name["route"])
    assert route["tokenfleet.endpoint"] == sim.url
    assert route["tokenfleet.revision"] == "r1"
    assert route["tokenfleet.route.reason"]
    assert int(route["tokenfleet.prefix.blocks"]) >= 0
    assert "tokenfleet.prefix.hit_blocks" in route
    text = json.dumps(spans)
    assert KEY not in text and "prefix caching" not in text  # no key, no prompt text

    # the engine was told the attempt's span: its own spans would join under it
    told = f"00-{trace_id}-{upstream['spanId']}-01"
    wait_for("the simulator's log of the request", lambda: told in sim.log.read_text(), 5)

    # the timings add up: steps back to back, their sum the request, the request the client's
    steps = sorted((by_name[n] for n in STEPS), key=lambda s: int(s["startTimeUnixNano"]))
    assert [s["name"] for s in steps] == STEPS
    for before, after in itertools.pairwise(steps):
        assert before["endTimeUnixNano"] == after["startTimeUnixNano"], (before, after)
    assert steps[0]["startTimeUnixNano"] == root["startTimeUnixNano"]
    total = _seconds(root)
    assert abs(sum(_seconds(s) for s in steps) - total) < STEPS_SLACK_S
    assert abs(took - total) < CLIENT_SLACK_S, (took, total)
    assert _seconds(by_name["first_byte"]) >= 0.030  # the simulator's 40 ms to the first token
    parts = _seconds(by_name["first_byte"]) + _seconds(by_name["relay"])
    assert abs(parts - _seconds(upstream)) < 1e-6


def test_a_request_without_traceparent_starts_its_own_trace(
    gateway: Gateway, backend: jaeger.Ports
) -> None:
    _, status, headers, _ = _chat(gateway, stream=True)
    assert status == 200
    request_id = headers["X-Request-Id"]
    tags = urllib.request.quote(json.dumps({"tokenfleet.request_id": request_id}))
    url = f"{backend.query_url}/api/traces?service=tokenfleet-gateway&tags={tags}"
    found = wait_for(
        "the trace by request id",
        lambda: (_get(url) or {}).get("data"),
        timeout=15,
    )
    (trace,) = found
    roots = [s for s in trace["spans"] if not s["references"]]
    assert [s["operationName"] for s in roots] == ["POST /v1/chat/completions"]
    assert len(trace["spans"]) == len(STEPS) + 3


def test_head_sampling_at_zero_drops_served_but_keeps_errors(
    tmp: Path, sim: Sim, backend: jaeger.Ports
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    env = _tracing(backend, ratio="0")
    with running(start_gateway(tmp, _config(sim, broken=dead), env=env)) as g:
        served_id, failed_id = os.urandom(16).hex(), os.urandom(16).hex()
        _, ok, _, _ = _chat(
            g, stream=True, headers={"traceparent": f"00-{served_id}-{'1' * 16}-01"}
        )
        _, bad, _, _ = _chat(
            g,
            stream=True,
            model="broken-model",
            headers={"traceparent": f"00-{failed_id}-{'2' * 16}-01"},
        )
        assert ok == 200 and bad >= 500, (ok, bad)
        spans = _trace(backend, failed_id, spans=1)
        (root,) = [s for s in spans if s["name"] == "POST /v1/chat/completions"]
        assert _attrs(root)["tokenfleet.trace.kept"] == "error"
        assert root["status"]["code"] == 2
        failed = [s for s in spans if s["name"] == "upstream"]
        assert failed and all(s["status"].get("code") == 2 for s in failed)
        time.sleep(1.0)  # the served one had as long to arrive: it must not
        assert not (_get(f"{backend.query_url}/api/v3/traces/{served_id}") or {}).get("result")
