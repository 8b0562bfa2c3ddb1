"""Request checks: every malformed body is a 400 with a param, valid ones estimate token work."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway.policy import bodies
from tokenfleet.gateway.policy.rejections import STATUS, Reason, Rejected

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello world"}]}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param([], None, id="not-an-object"),
        pytest.param({"messages": CHAT["messages"]}, "model", id="no-model"),
        pytest.param({**CHAT, "model": 7}, "model", id="model-not-string"),
        pytest.param({**CHAT, "messages": []}, "messages", id="empty-messages"),
        pytest.param({**CHAT, "messages": "hi"}, "messages", id="messages-not-array"),
        pytest.param({**CHAT, "messages": [{"content": "x"}]}, "messages[0].role", id="no-role"),
        pytest.param(
            {**CHAT, "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
            id="bad-role",
        ),
        pytest.param(
            {**CHAT, "messages": [{"role": []}]}, "messages[0].role", id="unhashable-role"
        ),
        pytest.param(
            {**CHAT, "messages": [{"role": {"a": 1}}]}, "messages[0].role", id="object-role"
        ),
        pytest.param(
            {**CHAT, "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
            id="bad-content",
        ),
        pytest.param(
            {**CHAT, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
            "messages[0].content",
            id="part-without-type",
        ),
        pytest.param({**CHAT, "stream": "yes"}, "stream", id="stream-not-bool"),
        pytest.param({**CHAT, "max_tokens": 0}, "max_tokens", id="max-tokens-zero"),
        pytest.param({**CHAT, "max_tokens": "10"}, "max_tokens", id="max-tokens-string"),
        pytest.param({**CHAT, "max_tokens": True}, "max_tokens", id="max-tokens-bool"),
        pytest.param(
            {**CHAT, "max_completion_tokens": -1},
            "max_completion_tokens",
            id="max-completion-negative",
        ),
        pytest.param({**CHAT, "temperature": "hot"}, "temperature", id="temperature-string"),
        pytest.param(
            {**CHAT, "stream_options": []}, "stream_options", id="stream-options-not-object"
        ),
    ],
)
def test_malformed_chat_bodies_are_400_with_the_offending_param(
    body: Any, param: str | None
) -> None:
    got = bodies.parse(body, "chat")
    assert isinstance(got, Rejected)
    assert got.reason == Reason.INVALID_REQUEST and got.status == 400
    assert got.param == param
    assert got.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "prompt",
    [
        pytest.param("", id="empty"),
        pytest.param([], id="empty-list"),
        pytest.param([1, "a"], id="mixed"),
        pytest.param(None, id="missing"),
        pytest.param({"text": "x"}, id="object"),
    ],
)
def test_malformed_prompts_are_400(prompt: Any) -> None:
    got = bodies.parse({"model": "m", "prompt": prompt}, "completion")
    assert isinstance(got, Rejected) and got.param == "prompt"


def test_a_valid_chat_request_keeps_unknown_fields_and_estimates_tokens() -> None:
    body = {
        **CHAT,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 50,
        "max_completion_tokens": 40,
        "tools": [{"type": "function"}],
        "seed": 3,
    }
    got = bodies.parse(body, "chat")
    assert isinstance(got, bodies.Parsed)
    assert got.stream and got.include_usage and got.max_tokens == 40 and got.max_tokens_given
    assert got.body["tools"] == body["tools"]
    assert got.prompt_tokens == len("hello world") // 4 + bodies.MESSAGE_OVERHEAD_TOKENS


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [
        pytest.param("a" * 400, 101, id="string"),
        pytest.param(["ab" * 10, "cd"], 7, id="strings"),
        pytest.param([1, 2, 3], 3, id="token-ids"),
    ],
)
def test_completion_prompts_estimate_tokens(prompt: Any, tokens: int) -> None:
    got = bodies.parse({"model": "m", "prompt": prompt}, "completion")
    assert isinstance(got, bodies.Parsed) and got.prompt_tokens == tokens
    assert got.max_tokens == bodies.DEFAULT_MAX_TOKENS and not got.max_tokens_given


def test_content_parts_count_their_text() -> None:
    parts = [{"type": "text", "text": "a" * 40}, {"type": "image_url", "image_url": {"url": "x"}}]
    got = bodies.parse({**CHAT, "messages": [{"role": "user", "content": parts}]}, "chat")
    assert (
        isinstance(got, bodies.Parsed) and got.prompt_tokens == 10 + bodies.MESSAGE_OVERHEAD_TOKENS
    )


@pytest.mark.parametrize(
    ("prompt_chars", "max_tokens", "limit", "cap", "reason"),
    [
        pytest.param(400, 10, 50, None, Reason.CONTEXT_TOO_LONG, id="context"),
        pytest.param(40, 500, 8192, 100, Reason.MAX_TOKENS_TOO_LARGE, id="cap"),
        pytest.param(40, 100, 8192, 100, None, id="at-cap"),
        pytest.param(40, 100, 8192, None, None, id="no-cap"),
    ],
)
def test_pool_and_tenant_limits(
    prompt_chars: int, max_tokens: int, limit: int, cap: int | None, reason: Reason | None
) -> None:
    parsed = bodies.parse(
        {"model": "m", "prompt": "x" * prompt_chars, "max_tokens": max_tokens}, "completion"
    )
    assert isinstance(parsed, bodies.Parsed)
    got = bodies.check_limits(parsed, max_input_tokens=limit, max_tokens_cap=cap)
    assert (got.reason if got else None) == reason
    if got:
        assert got.status == 400


def test_every_reason_has_one_status_and_429_503_carry_retry_hints() -> None:
    assert set(STATUS) == set(Reason)
    for reason, mapping in STATUS.items():
        assert 400 <= mapping.status < 600, reason
    assert STATUS[Reason.RATE_LIMITED].status == 429 and STATUS[Reason.SHED].status == 503
    assert (
        STATUS[Reason.DEADLINE_EXCEEDED].status == 504
        and STATUS[Reason.BODY_TOO_LARGE].status == 413
    )
