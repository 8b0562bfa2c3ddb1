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


# Issue 35: every numeric field the gateway reads, with values a client may send that are no
# such number or out of its range. Each must be a 400 naming the field, never a 500 later.
INTEGER_ODDITIES = [
    pytest.param(2**63, id="2**63"),
    pytest.param(2**64 - 1, id="u64-max"),
    pytest.param(1.5, id="float"),
    pytest.param(2.0, id="integral-float"),
    pytest.param(1e300, id="huge-float"),
    pytest.param(True, id="bool"),
    pytest.param("7", id="string"),
    pytest.param({"value": 7}, id="object"),
    pytest.param([7], id="array"),
]
COUNT_ODDITIES = [  # counts start at 1
    *INTEGER_ODDITIES,
    pytest.param(0, id="zero"),
    pytest.param(-1, id="negative"),
    pytest.param(-(2**63), id="i64-min"),
]
NUMBER_ODDITIES = [  # finite numbers in a small range: nothing here is one
    pytest.param(2**63, id="2**63"),
    pytest.param(-(2**63), id="i64-min"),
    pytest.param(1e300, id="huge-float"),
    pytest.param(-1e300, id="huge-negative-float"),
    pytest.param(True, id="bool"),
    pytest.param("0.5", id="string"),
    pytest.param({"value": 0.5}, id="object"),
    pytest.param([0.5], id="array"),
]
ODD_NUMBERS = [
    *(
        pytest.param(field, p.values[0], id=f"{field}-{p.id}")
        for field in ("max_tokens", "max_completion_tokens", "n", "best_of")
        for p in COUNT_ODDITIES
    ),
    *(pytest.param("n", v, id=f"n-{v}") for v in (129, 1000)),
    *(pytest.param("best_of", v, id=f"best_of-{v}") for v in (129, 1000)),
    pytest.param("max_tokens", 2**31, id="max_tokens-beyond-int32"),
    *(pytest.param("seed", p.values[0], id=f"seed-{p.id}") for p in INTEGER_ODDITIES),
    pytest.param("seed", -(2**63) - 1, id="seed-below-i64"),
    *(
        pytest.param(field, p.values[0], id=f"{field}-{p.id}")
        for field in ("temperature", "top_p", "presence_penalty", "frequency_penalty")
        for p in NUMBER_ODDITIES
    ),
    pytest.param("temperature", -0.1, id="temperature-negative"),
    pytest.param("temperature", 2.5, id="temperature-above-2"),
    pytest.param("top_p", -0.1, id="top_p-negative"),
    pytest.param("top_p", 1.5, id="top_p-above-1"),
    pytest.param("presence_penalty", -2.5, id="presence_penalty-below-minus-2"),
    pytest.param("frequency_penalty", 3, id="frequency_penalty-above-2"),
]


@pytest.mark.parametrize(("field", "value"), ODD_NUMBERS)
@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_an_odd_number_is_a_400_naming_its_field(kind: bodies.Kind, field: str, value: Any) -> None:
    body = CHAT if kind == "chat" else {"model": "m", "prompt": "hello"}
    got = bodies.parse({**body, field: value}, kind)
    assert isinstance(got, Rejected), got
    assert got.reason == Reason.INVALID_REQUEST and got.status == 400
    assert got.param == field and f"'{field}'" in got.message


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(2**63, id="2**63"),
        pytest.param(0, id="zero"),
        pytest.param(1.5, id="float"),
        pytest.param(True, id="bool"),
        pytest.param("9", id="string"),
    ],
)
def test_an_odd_max_output_tokens_of_a_response_is_a_400(value: Any) -> None:
    got = bodies.parse({"model": "m", "input": "hi", "max_output_tokens": value}, "response")
    assert isinstance(got, Rejected) and got.param == "max_output_tokens", got


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("n", 128, id="n-128"),
        pytest.param("best_of", 128, id="best_of-128"),
        pytest.param("max_tokens", 2**31 - 1, id="max_tokens-int32-max"),
        pytest.param("seed", 2**63 - 1, id="seed-i64-max"),
        pytest.param("seed", -(2**63), id="seed-i64-min"),
        pytest.param("seed", 0, id="seed-zero"),
        pytest.param("temperature", 0, id="temperature-greedy"),
        pytest.param("temperature", 2, id="temperature-2"),
        pytest.param("top_p", 1, id="top_p-1"),
        pytest.param("presence_penalty", -2.0, id="presence_penalty-minus-2"),
        pytest.param("frequency_penalty", 1.5, id="frequency_penalty-1.5"),
        pytest.param("temperature", None, id="null-is-unset"),
    ],
)
def test_numbers_at_the_edges_of_their_ranges_are_kept(field: str, value: Any) -> None:
    got = bodies.parse({**CHAT, field: value}, "chat")
    assert isinstance(got, bodies.Parsed), got
    assert got.body[field] == value


@pytest.mark.parametrize(
    ("model", "ok"),
    [
        pytest.param("m" * 256, True, id="at-the-limit"),
        pytest.param("m" * 257, False, id="one-beyond"),
        pytest.param("x" * 1_000_000, False, id="a-megabyte"),
    ],
)
def test_a_model_name_is_at_most_256_characters(model: str, ok: bool) -> None:
    got = bodies.parse({**CHAT, "model": model}, "chat")
    assert isinstance(got, bodies.Parsed) == ok
    if isinstance(got, Rejected):
        assert got.status == 400 and got.param == "model"
        assert "256" in got.message and len(got.message) < 200  # the name is not echoed


@pytest.mark.parametrize(
    ("body", "sequences"),
    [
        pytest.param({"prompt": "hi"}, 1, id="one-prompt"),
        pytest.param({"prompt": ["a", "b", "c", "d"]}, 4, id="four-prompts"),
        pytest.param({"prompt": ["a", "b", "c", "d"], "n": 2}, 8, id="four-prompts-n-2"),
        pytest.param({"prompt": "hi", "n": 2, "best_of": 5}, 5, id="best-of-is-what-runs"),
        pytest.param({"prompt": ["a", "b"], "n": 3, "best_of": 2}, 6, id="n-above-best-of"),
        pytest.param({"prompt": [1, 2, 3]}, 1, id="token-ids-are-one-prompt"),
    ],
)
def test_a_completion_runs_prompts_times_its_choices(body: dict[str, Any], sequences: int) -> None:
    """vLLM generates max(n, best_of) sequences per prompt, and a prompt list is a batch."""
    got = bodies.parse({"model": "m", **body}, "completion")
    assert isinstance(got, bodies.Parsed) and got.sequences == sequences


@pytest.mark.parametrize(
    ("count", "ok"),
    [pytest.param(2048, True, id="2048"), pytest.param(2049, False, id="2049")],
)
def test_a_batch_holds_at_most_2048_prompts(count: int, ok: bool) -> None:
    got = bodies.parse({"model": "m", "prompt": ["a"] * count}, "completion")
    assert isinstance(got, bodies.Parsed) == ok
    if isinstance(got, Rejected):
        assert got.status == 400 and got.param == "prompt" and "2048" in got.message


@pytest.mark.parametrize(
    ("body", "cap", "reason"),
    [
        pytest.param({"max_tokens": 25, "n": 4}, 100, None, id="n-times-max-tokens-at-cap"),
        pytest.param({"max_tokens": 26, "n": 4}, 100, Reason.MAX_TOKENS_TOO_LARGE, id="n-over-cap"),
        pytest.param(
            {"prompt": ["a"] * 4, "max_tokens": 20, "n": 2},
            100,
            Reason.MAX_TOKENS_TOO_LARGE,
            id="prompts-times-n-over-cap",
        ),
        pytest.param(
            {"max_tokens": 10, "best_of": 11}, 100, Reason.MAX_TOKENS_TOO_LARGE, id="best-of"
        ),
        pytest.param(
            {"prompt": ["a"] * 101}, 100, Reason.MAX_TOKENS_TOO_LARGE, id="more-prompts-than-cap"
        ),
        pytest.param({"prompt": ["a"] * 50}, 100, None, id="default-fits-shrunk-later"),
    ],
)
def test_the_tenants_cap_bounds_all_sequences_together(
    body: dict[str, Any], cap: int, reason: Reason | None
) -> None:
    parsed = bodies.parse({"model": "m", "prompt": "hi", **body}, "completion")
    assert isinstance(parsed, bodies.Parsed)
    got = bodies.check_limits(parsed, max_input_tokens=8192, max_tokens_cap=cap)
    assert (got.reason if got else None) == reason
    if got is not None:
        assert got.status == 400 and str(cap) in got.message


@pytest.mark.parametrize(
    ("kind", "extra", "param"),
    [
        pytest.param("completion", {"logprobs": 2**31}, "logprobs", id="completion-logprobs-2^31"),
        pytest.param("completion", {"logprobs": 21}, "logprobs", id="completion-logprobs-21"),
        pytest.param("completion", {"logprobs": True}, "logprobs", id="completion-logprobs-bool"),
        pytest.param("completion", {"logprobs": 5}, None, id="completion-logprobs-5"),
        pytest.param("chat", {"logprobs": True, "top_logprobs": 20}, None, id="chat-top-20"),
        pytest.param("chat", {"logprobs": 5}, "logprobs", id="chat-logprobs-a-count"),
        pytest.param("chat", {"top_logprobs": 2**63}, "top_logprobs", id="chat-top-2^63"),
        pytest.param("chat", {"top_logprobs": -1}, "top_logprobs", id="chat-top-negative"),
    ],
)
def test_logprob_counts_are_bounded(kind: str, extra: dict[str, Any], param: str | None) -> None:
    """Issue 35's fuzz table: logprobs 2^31 on /v1/completions was passed on, and the engine
    built that many alternatives per token; OpenAI's and vLLM's default limit is 20."""
    body: dict[str, Any] = (
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        if kind == "chat"
        else {"model": "m", "prompt": "hi"}
    )
    parsed = bodies.parse({**body, **extra}, kind)  # type: ignore[arg-type]
    if param is None:
        assert isinstance(parsed, bodies.Parsed)
    else:
        assert isinstance(parsed, Rejected) and parsed.param == param, parsed
