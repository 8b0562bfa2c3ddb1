"""Settlement and upstream-error rules (pure): context room and n in the reservation, tokens
counted per relayed event, the SSE accounting of the relay, engine errors judged, and the body
sent upstream for every kind (max_tokens always spelled out, a usage report always asked)."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway import proxy
from tokenfleet.gateway.policy import bodies, engine_errors, usage
from tokenfleet.gateway.policy.rejections import Reason
from tokenfleet.gateway.stages import settle


@pytest.mark.parametrize(
    ("requested", "cap", "context", "prompt", "expected"),
    [
        pytest.param(256, None, None, 10, 256, id="no-limits"),
        pytest.param(256, 100, None, 10, 100, id="a-cap-below-the-default-holds"),
        pytest.param(256, None, 200, 150, 50, id="the-context-room"),
        pytest.param(256, 40, 200, 150, 40, id="the-lowest-wins"),
        pytest.param(256, None, 100, 150, 1, id="never-below-one"),
        pytest.param(0, 100, 200, 10, 0, id="embeddings-generate-nothing"),
    ],
)
def test_max_tokens_is_the_lowest_of_request_cap_and_context_room(
    requested: int, cap: int | None, context: int | None, prompt: int, expected: int
) -> None:
    got = usage.max_tokens(requested, cap=cap, context=context, prompt_tokens=prompt)
    assert got == expected


@pytest.mark.parametrize(
    ("requested", "cap", "sequences", "expected"),
    [
        pytest.param(256, 100, 1, 100, id="one-sequence-the-whole-cap"),
        pytest.param(256, 100, 4, 25, id="four-share-the-cap"),
        pytest.param(256, 100, 8, 12, id="eight-round-down"),
        pytest.param(10, 100, 8, 10, id="asked-below-its-share"),
        pytest.param(256, None, 8, 256, id="no-cap-per-sequence"),
    ],
)
def test_the_tenants_cap_is_shared_by_all_sequences(
    requested: int, cap: int | None, sequences: int, expected: int
) -> None:
    """Issue 35: maxTokensCap bounds what the whole request may generate (a request with more
    sequences than its cap was refused by bodies.check_limits)."""
    got = usage.max_tokens(requested, cap=cap, sequences=sequences)
    assert got == expected and got * sequences <= (cap or got * sequences)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({}, 120 + 256, id="one"),
        pytest.param({"n": 3}, 120 + 3 * 256, id="n-3"),
        pytest.param({"best_of": 3}, 120 + 3 * 256, id="best-of-3"),
        pytest.param({"prompt": ["x" * 116] * 4}, 120 + 4 * 256, id="four-prompts"),
        pytest.param({"prompt": ["x" * 116] * 4, "n": 2}, 120 + 8 * 256, id="four-prompts-n-2"),
        pytest.param(
            {"prompt": ["x" * 116] * 4, "n": 2, "best_of": 3}, 120 + 12 * 256, id="best-of-runs"
        ),
    ],
)
def test_every_sequence_of_every_prompt_is_reserved(body: dict[str, Any], expected: int) -> None:
    """Issue 35: a prompt list is a batch, each prompt runs max(n, best_of) sequences, and each
    may generate max_tokens; the prompt estimate (120 here) is summed over the list."""
    parsed = bodies.parse({"model": "m", "prompt": "x" * 476, **body}, "completion")
    assert isinstance(parsed, bodies.Parsed) and parsed.prompt_tokens == 120
    got = usage.reservation(
        prompt_tokens=parsed.prompt_tokens, max_tokens=256, sequences=parsed.sequences
    )
    assert got == expected


VLLM_ROLE = (
    b'data: {"id":"chatcmpl-a5","object":"chat.completion.chunk","created":1,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"prompt_token_ids":[326,264,28],"prompt_text":null}'
)
VLLM_PARTIAL_CHAT = (
    b'data: {"id":"chatcmpl-a5","object":"chat.completion.chunk","created":1,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null,'
    b'"token_ids":null}]}'
)
VLLM_PARTIAL_TEXT = (
    b'data: {"id":"cmpl-a6","object":"text_completion","created":1,"model":"tiny","choices":'
    b'[{"index":0,"text":"","logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}]}'
)
VLLM_LAST = (
    b'data: {"id":"cmpl-b0","object":"text_completion","created":1,"model":"tiny","choices":'
    b'[{"index":0,"text":"ission","logprobs":null,"finish_reason":"length","stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}],"system_fingerprint":"vllm-0.32.0"}'
)
VLLM_IDS = (
    b'data: {"id":"chatcmpl-a5","object":"chat.completion.chunk","created":1,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[738]}]}'
)
SIM_FINISH = (
    b'data: {"id":"cmpl-3e","model":"m","object":"text_completion","created":1,"usage":null,'
    b'"choices":[{"index":0,"finish_reason":"stop","text":""}]}'
)


@pytest.mark.parametrize(
    ("event", "tokens"),
    [
        pytest.param(b'data: {"choices":[{"delta":{"content":"The "}}]}', 1, id="chat-text"),
        pytest.param(b'data: {"choices":[{"delta":{"role":"assistant"}}]}', 0, id="role"),
        pytest.param(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}', 0),
        pytest.param(b'data: {"choices":[{"finish_reason":"stop","delta":{}}]}', 0, id="finish"),
        pytest.param(b'data: {"choices":[{"text":" upon","index":0}]}', 1, id="completion"),
        pytest.param(b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}', 1),
        pytest.param(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}', 1),
        pytest.param(b'event: x\ndata: {"type":"response.output_text.delta","delta":"a"}', 1),
        pytest.param(b"data: [DONE]", 0, id="done"),
        # vLLM's own events (0.32, a byte-level tokenizer): a token that completes no character
        # yet streams as an empty text while its choice is unfinished; the simulator's final
        # empty event carries no token.
        pytest.param(VLLM_ROLE, 0, id="vllm-role-with-prompt-ids"),
        pytest.param(VLLM_PARTIAL_CHAT, 1, id="vllm-chat-partial-character"),
        pytest.param(VLLM_PARTIAL_TEXT, 1, id="vllm-completion-partial-character"),
        pytest.param(VLLM_LAST, 1, id="vllm-last-token-with-its-finish"),
        pytest.param(SIM_FINISH, 0, id="sim-empty-finish"),
        # with token ids in the stream (the client asked: return_token_ids), they are counted
        pytest.param(VLLM_IDS.replace(b"[738]", b"[738,99,1241]"), 3, id="vllm-coalesced-ids"),
        pytest.param(VLLM_IDS, 1, id="vllm-one-id"),
    ],
)
def test_tokens_are_counted_per_relayed_event(event: bytes, tokens: int) -> None:
    assert usage.tokens_in(event) == tokens


CHUNK = b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":6,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("strip", "sent"),
    [
        pytest.param(True, CHUNK * 2 + DONE, id="gateways-usage-event-stripped"),
        pytest.param(False, CHUNK * 2 + USAGE + DONE, id="clients-usage-event-kept"),
    ],
)
def test_the_relay_reads_the_engines_usage_and_strips_it_unless_asked(
    strip: bool, sent: bytes
) -> None:
    meter = proxy.Meter()
    out, done = proxy._account(CHUNK * 2 + USAGE + DONE, meter, strip_usage=strip)
    assert out == sent and done
    assert (meter.relayed, meter.prompt_reported, meter.completion_reported) == (2, 6, 2)


def test_a_block_without_usage_passes_byte_for_byte() -> None:
    meter = proxy.Meter()
    out, done = proxy._account(CHUNK * 3, meter, strip_usage=True)
    assert out == CHUNK * 3 and not done and meter.relayed == 3


@pytest.mark.parametrize(
    ("status", "body", "reason", "retryable"),
    [
        pytest.param(400, b'{"object":"error","message":"bad n"}', Reason.INVALID_REQUEST, False),
        pytest.param(
            400,
            b'{"error":{"message":"This model\'s maximum context length is 1024 tokens"}}',
            Reason.CONTEXT_TOO_LONG,
            False,
            id="context",
        ),
        pytest.param(404, b'{"message":"no model x"}', Reason.MODEL_NOT_FOUND, False),
        pytest.param(422, b"not json", Reason.INVALID_REQUEST, False, id="unprocessable"),
        pytest.param(
            500,
            b'{"object":"error","type":"BadRequestError","message":"bad logprobs"}',
            Reason.INVALID_REQUEST,
            False,
            id="5xx-saying-invalid",
        ),
        pytest.param(500, b'{"message":"engine died"}', Reason.UPSTREAM_ERROR, True, id="5xx"),
        pytest.param(429, b"busy", Reason.UPSTREAM_ERROR, True, id="back-pressure"),
        pytest.param(401, b"no key", Reason.UPSTREAM_ERROR, True, id="gateway-credentials"),
    ],
)
def test_an_engine_error_is_retried_only_when_another_replica_may_answer(
    status: int, body: bytes, reason: Reason, retryable: bool
) -> None:
    verdict = engine_errors.judge(status, body)
    assert verdict.rejected.reason is reason and verdict.retryable is retryable
    assert not retryable or "answered" in verdict.rejected.message


@pytest.mark.parametrize(
    ("event", "status"),
    [
        pytest.param(b'data: {"error":{"code":400,"message":"x"}}', 400, id="int-code"),
        pytest.param(b'data: {"error":{"code":"429","message":"x"}}', 429, id="string-code"),
        pytest.param(b'data: {"error":{"message":"kv cache full"}}', 500, id="no-code"),
        pytest.param(b"data: {broken", 500, id="not-json"),
    ],
)
def test_a_streams_first_error_event_carries_its_status(event: bytes, status: int) -> None:
    assert engine_errors.stream_error(event)[0] == status


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        pytest.param(
            "chat",
            {"messages": [{"role": "user", "content": "hi"}], "stream": True},
            {"max_tokens": 7, "cache_salt": "s", "stream_options": {"include_usage": True}},
            id="chat-stream-asks-for-usage",
        ),
        pytest.param(
            "completion",
            {"prompt": "hi", "stream": True, "stream_options": {"include_usage": True}},
            {"max_tokens": 7, "cache_salt": "s", "stream_options": {"include_usage": True}},
            id="the-clients-own-request",
        ),
        pytest.param(
            "response",
            {"input": [{"role": "user", "content": "hi"}], "max_output_tokens": 9},
            {"max_output_tokens": 7, "cache_salt": "s"},
            id="responses",
        ),
        pytest.param("embedding", {"input": ["a", "b"]}, {}, id="embeddings-untouched"),
    ],
)
def test_the_upstream_body_of_every_kind(
    kind: bodies.Kind, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    parsed = bodies.parse({"model": "m", **body}, kind)
    assert isinstance(parsed, bodies.Parsed)
    sent = bodies.upstream(parsed, model="m", salt="s", max_tokens=7)
    assert sent == {**body, "model": "m", **expected}


@pytest.mark.parametrize(
    ("kind", "body", "tokens", "max_tokens", "sequences"),
    [
        pytest.param(
            "chat", {"messages": [{"role": "user", "content": "x" * 40}], "n": 3}, 14, 256, 3
        ),
        pytest.param("embedding", {"input": [[1, 2, 3], [4, 5]]}, 5, 0, 1, id="token-ids"),
        pytest.param("response", {"input": "x" * 40, "instructions": "y" * 8}, 13, 256, 1),
    ],
)
def test_the_work_of_every_kind(
    kind: bodies.Kind, body: dict[str, Any], tokens: int, max_tokens: int, sequences: int
) -> None:
    parsed = bodies.parse({"model": "m", **body}, kind)
    assert isinstance(parsed, bodies.Parsed)
    assert (parsed.prompt_tokens, parsed.max_tokens, parsed.sequences) == (
        tokens,
        max_tokens,
        sequences,
    )


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        pytest.param("chat", {"messages": [{"role": "user", "content": "a"}], "n": 0}, "n"),
        pytest.param("embedding", {"input": 5}, "input"),
        pytest.param("embedding", {"input": [[1], []]}, "input", id="an-empty-token-list"),
        pytest.param("response", {"input": [{"role": "x", "content": "a"}]}, "input"),
    ],
)
def test_bad_bodies_of_new_kinds_are_400(
    kind: bodies.Kind, body: dict[str, Any], param: str
) -> None:
    got = bodies.parse({"model": "m", **body}, kind)
    assert not isinstance(got, bodies.Parsed) and got.param == param and got.status == 400


def test_an_answer_is_complete_once_its_end_was_written_not_when_it_was_counted() -> None:
    """A stream whose [DONE] was counted but whose write found the client gone is not served:
    the relay marks the answer complete only after the write (proxy._Events.sent)."""
    call = proxy.Call(
        url="",
        body=b"",
        stream=True,
        strip_usage=False,
        deadline=0.0,
        headers={},
        upstream_headers={},
        served_by="m",
    )
    meter = proxy.Meter()
    events = proxy._Events(call, meter, proxy.Outcome())
    content = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    events.sent()
    assert events.relayed(content) == content and not meter.complete
    events.sent()
    assert not meter.complete  # written, but not the end
    assert events.relayed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    assert events.done and not meter.complete  # counted: not yet written
    events.sent()
    assert meter.complete and meter.relayed == 1


def cut_meter(*, sent: bool = True, relayed: int = 0, reported: int | None = None) -> proxy.Meter:
    meter = proxy.Meter()
    meter.sent = meter.dispatched = sent
    meter.relayed, meter.completion_reported = relayed, reported
    return meter


@pytest.mark.parametrize(
    ("meter", "ending", "uncounted", "expected"),
    [
        pytest.param(
            cut_meter(), ("cancelled", "client_disconnected"), 800, (10, 800), id="unstreamed-left"
        ),
        pytest.param(
            cut_meter(), ("rejected", "deadline_exceeded"), 800, (10, 800), id="unstreamed-deadline"
        ),
        pytest.param(
            cut_meter(relayed=7), ("cancelled", "client_disconnected"), None, (10, 7),
            id="a-stream-left-pays-what-was-relayed",
        ),
        pytest.param(
            cut_meter(), ("rejected", "deadline_exceeded"), None, (10, 0),
            id="a-stream-past-its-deadline-before-a-token-pays-its-prompt",
        ),
        pytest.param(
            cut_meter(reported=40), ("served", ""), 800, (10, 40), id="served-its-own-count"
        ),
        pytest.param(
            cut_meter(), ("failed", "upstream_error"), 800, (10, 0), id="the-engine-broke-prompt"
        ),
        pytest.param(cut_meter(), ("rejected", "queue_full"), 800, (0, 0), id="refused-nothing"),
        pytest.param(
            cut_meter(sent=False), ("cancelled", "client_disconnected"), 800, (0, 0),
            id="left-before-it-was-sent",
        ),
    ],
)  # fmt: skip
def test_a_request_cut_off_while_its_engine_worked_is_charged(
    meter: proxy.Meter, ending: tuple[str, str], uncounted: int | None, expected: tuple[int, int]
) -> None:
    """Issue 35: an unstreamed request whose client left (or whose own deadline passed) was
    charged its prompt only (or nothing): now what the engine may have generated, since nobody
    counted it; a stream still pays what was relayed."""
    charged = settle.record(
        meter,
        request_id="r",
        tenant="t",
        model="m",
        pool="p",
        ending=ending,
        prompt_estimate=10,
        reserved=810,
        uncounted=uncounted,
    )
    assert (charged.prompt, charged.completion) == expected
