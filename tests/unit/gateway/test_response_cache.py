"""The response cache's pure parts: which requests are cacheable, their revision and key, which
answers are stored, and how a hit is replayed (as JSON and as SSE chunks the openai SDK reads).

Matrix: cacheable() over kind, n/best_of, temperature/seed, tools, logprobs; revision() over
pins, weights and ready revisions; key() changing with every input that changes the answer and
not with delivery fields; storable() over status, fallback, degradation, size and finish reason;
replay of chat and text completions with and without the usage chunk.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tokenfleet.gateway.policy import cacheability, cached_answers
from tokenfleet.gateway.policy.cacheability import Why

GREEDY: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0,
}


def body(**over: Any) -> dict[str, Any]:
    out = {**GREEDY, **over}
    return {k: v for k, v in out.items() if v is not ...}


@pytest.mark.parametrize(
    ("kind", "request_body", "why"),
    [
        pytest.param("chat", body(), Why.CACHEABLE, id="greedy-chat"),
        pytest.param("completion", body(), Why.CACHEABLE, id="greedy-completion"),
        pytest.param("chat", body(temperature=0.0), Why.CACHEABLE, id="greedy-float-zero"),
        pytest.param("chat", body(temperature=0.7, seed=42), Why.CACHEABLE, id="seeded"),
        pytest.param("chat", body(temperature=...), Why.SAMPLED, id="default-temperature-1"),
        pytest.param("chat", body(temperature=0.7), Why.SAMPLED, id="sampled"),
        pytest.param("chat", body(temperature=0.7, seed=True), Why.SAMPLED, id="bool-seed"),
        pytest.param("chat", body(temperature=False), Why.SAMPLED, id="bool-temperature"),
        pytest.param("chat", body(temperature=0.7, seed="42"), Why.SAMPLED, id="str-seed"),
        pytest.param("chat", body(n=2), Why.CHOICES, id="n-2"),
        pytest.param("chat", body(n=1), Why.CACHEABLE, id="n-1"),
        pytest.param("completion", body(best_of=3), Why.CHOICES, id="best-of"),
        pytest.param("chat", body(tools=[{"type": "function"}]), Why.TOOLS, id="tools"),
        pytest.param("chat", body(tool_choice="none"), Why.TOOLS, id="tool-choice"),
        pytest.param("chat", body(functions=[{"name": "f"}]), Why.TOOLS, id="functions"),
        pytest.param("chat", body(function_call="auto"), Why.TOOLS, id="function-call"),
        pytest.param("chat", body(logprobs=True), Why.LOGPROBS, id="logprobs"),
        pytest.param("chat", body(logprobs=False), Why.CACHEABLE, id="logprobs-false"),
        pytest.param("chat", body(top_logprobs=2), Why.LOGPROBS, id="top-logprobs"),
        pytest.param("completion", body(logprobs=1), Why.LOGPROBS, id="completion-logprobs"),
        pytest.param("embedding", body(), Why.KIND, id="embedding"),
        pytest.param("response", body(), Why.KIND, id="responses-api"),
    ],
)
def test_cacheable(kind: str, request_body: dict[str, Any], why: Why) -> None:
    assert cacheability.cacheable(kind, request_body) is why


@pytest.mark.parametrize(
    ("weights", "available", "pinned", "expected"),
    [
        pytest.param({}, {"r1"}, None, "r1", id="one-ready-revision"),
        pytest.param({}, {""}, None, "", id="unlabelled-endpoints"),
        pytest.param({"r1": 100, "r2": 0}, {"r1", "r2"}, None, "r1", id="stable-only"),
        pytest.param({"r1": 90, "r2": 10}, {"r1", "r2"}, None, None, id="canary-split"),
        pytest.param({"r1": 90, "r2": 10}, {"r1"}, None, "r1", id="split-one-ready"),
        pytest.param({}, {"r1", "r2"}, None, None, id="unweighted-two-ready"),
        pytest.param({"r1": 90, "r2": 10}, {"r1", "r2"}, "r2", "r2", id="pinned"),
        pytest.param({}, {"r1"}, "r9", None, id="pinned-not-ready"),
        pytest.param({"r1": 100}, set(), None, None, id="nothing-ready"),
    ],
)
def test_revision_is_the_one_routing_would_choose(
    weights: dict[str, int], available: set[str], pinned: str | None, expected: str | None
) -> None:
    assert cacheability.revision(weights, available=available, pinned=pinned) == expected


@pytest.mark.parametrize(
    ("request_body", "available", "expected"),
    [
        pytest.param(
            body(), {"r1"}, cacheability.Verdict(why=Why.CACHEABLE, revision="r1"), id="ok"
        ),
        pytest.param(
            body(), {"r1", "r2"}, cacheability.Verdict(why=Why.REVISION_UNDECIDED), id="split"
        ),
        pytest.param(body(n=3), {"r1"}, cacheability.Verdict(why=Why.CHOICES), id="not-cacheable"),
    ],
)
def test_verdict_needs_a_cacheable_request_and_a_known_revision(
    request_body: dict[str, Any], available: set[str], expected: cacheability.Verdict
) -> None:
    got = cacheability.verdict("chat", request_body, weights={}, available=available, pinned=None)
    assert got == expected


def key(**over: Any) -> str:
    args: dict[str, Any] = {
        "kind": "chat",
        "model": "m",
        "revision": "r1",
        "scope": cacheability.scope(tenant="ns/a"),
        "max_tokens": 64,
        "body": body(),
    }
    return cacheability.key(**{**args, **over})


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"revision": "r2"}, id="revision"),
        pytest.param({"scope": cacheability.scope(tenant="ns/b")}, id="tenant"),
        pytest.param({"scope": cacheability.scope(tenant="ns/a", group="g")}, id="group"),
        pytest.param({"model": "other"}, id="model"),
        pytest.param({"kind": "completion"}, id="kind"),
        pytest.param({"max_tokens": 65}, id="effective-max-tokens"),
        pytest.param({"body": body(temperature=0.0)}, id="temperature-spelling"),
        pytest.param({"body": body(seed=1)}, id="seed"),
        pytest.param({"body": body(max_tokens=8)}, id="max-tokens-field"),
        pytest.param({"body": body(messages=[{"role": "user", "content": "ho"}])}, id="prompt"),
        pytest.param({"body": body(stop=["\n"])}, id="stop"),
    ],
)
def test_key_changes_with_what_changes_the_answer(changed: dict[str, Any]) -> None:
    assert key(**changed) != key()


@pytest.mark.parametrize(
    "same",
    [
        pytest.param({"body": body(stream=True)}, id="stream"),
        pytest.param({"body": body(stream_options={"include_usage": True})}, id="stream-options"),
        pytest.param({"body": body(user="alice")}, id="user"),
        pytest.param({"body": body(model="alias")}, id="alias"),
        pytest.param({"body": body(cache_salt="x")}, id="client-salt"),
        pytest.param({"body": dict(reversed(list(body().items())))}, id="key-order"),
    ],
)
def test_key_ignores_what_does_not(same: dict[str, Any]) -> None:
    assert key(**same) == key()


def test_tenants_of_one_group_share_a_scope_and_no_one_else() -> None:
    group = cacheability.scope(tenant="ns/a", group="evals")
    assert group == cacheability.scope(tenant="ns/b", group="evals")
    assert cacheability.scope(tenant="ns/a") != cacheability.scope(tenant="ns/b")
    assert cacheability.scope(tenant="group:evals") != group  # a tenant cannot spell a group


def test_key_is_a_prefixed_sha256() -> None:
    assert key().startswith(cacheability.KEY_PREFIX)
    assert len(key()) == len(cacheability.KEY_PREFIX) + 64


def chat_answer(finish: Any = "stop", content: str = "Hello there, friend.") -> dict[str, Any]:
    return {
        "id": "chatcmpl-engine",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    }


def storable(body: bytes | None = None, **over: Any) -> Why:
    data = orjson.dumps(chat_answer()) if body is None else body
    served = cacheability.Served(**{"status": 200, "failed": False, "payload": data, **over})
    return cacheability.storable(served, max_entry_bytes=65536)


@pytest.mark.parametrize(
    ("payload", "over", "why"),
    [
        pytest.param(None, {}, Why.CACHEABLE, id="complete"),
        pytest.param(orjson.dumps(chat_answer("length")), {}, Why.CACHEABLE, id="length"),
        pytest.param(orjson.dumps(chat_answer("abort")), {}, Why.INCOMPLETE, id="aborted"),
        pytest.param(orjson.dumps(chat_answer(None)), {}, Why.INCOMPLETE, id="unfinished"),
        pytest.param(orjson.dumps(chat_answer("tool_calls")), {}, Why.INCOMPLETE, id="tools"),
        pytest.param(b"not json", {}, Why.INCOMPLETE, id="not-json"),
        pytest.param(b'{"error": {"message": "x"}}', {}, Why.INCOMPLETE, id="error-body"),
        pytest.param(b'{"choices": []}', {}, Why.INCOMPLETE, id="no-choices"),
        pytest.param(None, {"payload": None}, Why.INCOMPLETE, id="stream-not-assembled"),
        pytest.param(None, {"status": 500}, Why.INCOMPLETE, id="status-500"),
        pytest.param(None, {"failed": True}, Why.INCOMPLETE, id="failed-midway"),
        pytest.param(None, {"fallback": True}, Why.FALLBACK, id="fallback"),
        pytest.param(None, {"degraded": True}, Why.DEGRADED, id="degraded"),
        pytest.param(None, {"other_revision": True}, Why.REVISION_UNDECIDED, id="other-revision"),
        pytest.param(b"x" * 65537, {}, Why.TOO_LARGE, id="too-large"),
        pytest.param(None, {"payload": None, "oversize": True}, Why.TOO_LARGE, id="long-stream"),
    ],
)
def test_storable(payload: bytes | None, over: dict[str, Any], why: Why) -> None:
    assert storable(payload, **over) is why


def test_a_hit_has_its_own_id_and_charges_nothing() -> None:
    served = cached_answers.answer(orjson.dumps(chat_answer()), request_id="abc")
    assert served["id"] == "chatcmpl-abc"
    assert served["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert served["choices"] == chat_answer()["choices"]
    assert served["model"] == "m" and served["created"] == 1700000000


def decoded(events: list[bytes]) -> list[Any]:
    assert events[-1] == b"data: [DONE]\n\n"
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in events)
    return [orjson.loads(e[6:]) for e in events[:-1]]


@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
def test_streamed_chat_hit_reassembles_to_the_answer(include_usage: bool) -> None:
    served = cached_answers.answer(orjson.dumps(chat_answer()), request_id="abc")
    chunks = decoded(cached_answers.events(served, include_usage=include_usage))
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-abc" for c in chunks)
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert deltas[0]["delta"]["role"] == "assistant"
    assert "".join(d["delta"].get("content", "") for d in deltas) == "Hello there, friend."
    assert [d["finish_reason"] for d in deltas][-1] == "stop"
    assert all(d["finish_reason"] is None for d in deltas[:-1])
    usage_chunks = [c for c in chunks if not c["choices"]]
    assert usage_chunks == (
        [{**chunks[0], "choices": [], "usage": cached_answers.ZERO_USAGE}] if include_usage else []
    )


def test_streamed_text_completion_hit() -> None:
    answer = {
        "id": "cmpl-engine",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": " one two", "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    served = cached_answers.answer(orjson.dumps(answer), request_id="x")
    chunks = decoded(cached_answers.events(served, include_usage=False))
    assert served["id"] == "cmpl-x"
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == " one two"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", [""], id="empty"),
        pytest.param("a b", ["a ", "b"], id="words"),
        pytest.param("  a\n", ["  ", "a\n"], id="leading-space"),
    ],
)
def test_pieces_keep_every_character(text: str, expected: list[str]) -> None:
    assert cached_answers.pieces(text) == expected


def test_a_stream_assembles_to_the_answer_it_replays() -> None:
    """events() and assembled() are inverses: a streamed miss fills the cache for either."""
    engine = {**chat_answer(), "usage": {"prompt_tokens": 5, "completion_tokens": 4}}
    stream = b"".join(cached_answers.events(engine, include_usage=True))
    whole = cached_answers.assembled(stream)
    assert whole is not None
    again = orjson.loads(whole)
    assert again["object"] == "chat.completion" and again["usage"] == engine["usage"]
    assert again["choices"][0]["message"] == engine["choices"][0]["message"]
    assert again["choices"][0]["finish_reason"] == "stop"
    assert storable(whole) is Why.CACHEABLE


def test_a_text_stream_assembles() -> None:
    chunks = [
        {
            "id": "c",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": t, "finish_reason": f}],
        }
        for t, f in ((" one", None), (" two", None), ("", "length"))
    ]
    stream = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + cached_answers.DONE
    whole = orjson.loads(cached_answers.assembled(stream) or b"null")
    assert whole["choices"] == [
        {"index": 0, "text": " one two", "logprobs": None, "finish_reason": "length"}
    ]


STREAM = b"".join(
    cached_answers.events(
        cached_answers.answer(orjson.dumps(chat_answer()), request_id="i"), include_usage=False
    )
)


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(STREAM.removesuffix(cached_answers.DONE), id="no-done"),
        pytest.param(
            STREAM.replace(b"data: [DONE]", b'data: {"error": {"code": 500}}\n\ndata: [DONE]'),
            id="error-event",
        ),
        pytest.param(b"data: {not json\n\n" + cached_answers.DONE, id="not-json"),
        pytest.param(cached_answers.DONE, id="no-chunks"),
        pytest.param(
            b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": '
            b'{"tool_calls": [{"id": "t"}]}}]}\n\n' + cached_answers.DONE,
            id="tool-call",
        ),
    ],
)
def test_a_stream_that_did_not_finish_cleanly_assembles_to_nothing(stream: bytes) -> None:
    assert cached_answers.assembled(stream) is None
