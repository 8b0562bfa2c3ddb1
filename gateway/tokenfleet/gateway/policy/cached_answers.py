"""A cached answer served again (pure): as a JSON body, or as the SSE chunks an engine streams.

A hit generated nothing, so its ``usage`` says what the request was charged: zero prompt,
completion and total tokens. It gets an id of its own (clients may key on it); everything else
(model, created, choices, system_fingerprint) is the cached answer's, byte for byte in value.

A streamed hit has the shape vLLM streams: a first chunk with the role, one chunk per word of
content, a chunk with the finish reason, the usage chunk (``choices: []``) only when the client
asked for it with ``stream_options.include_usage``, then ``data: [DONE]``.

:func:`assembled` is the inverse: a streamed miss's relayed events made into the whole answer
the cache keeps, so a stream can fill the cache for a later JSON request and the other way round.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
_ID_PREFIX = {"chat.completion": "chatcmpl", "text_completion": "cmpl"}
_CHUNK_OBJECT = {"chat.completion": "chat.completion.chunk", "text_completion": "text_completion"}
#: A word with the spaces after it, or leading spaces: how a client sees text arrive.
_PIECES = re.compile(r"\S+\s*|\s+")
DONE = b"data: [DONE]\n\n"


def answer(entry: bytes, *, request_id: str) -> dict[str, Any]:
    """The cached answer as this request's: its own id, and the usage it was charged."""
    cached: dict[str, Any] = orjson.loads(entry)
    prefix = _ID_PREFIX.get(str(cached.get("object")), "cmpl")
    return {**cached, "id": f"{prefix}-{request_id}", "usage": dict(ZERO_USAGE)}


def pieces(text: str) -> list[str]:
    """``text`` in the chunks a stream would carry it in (at least one, possibly empty)."""
    return _PIECES.findall(text) or [""]


def _chat_choices(choice: dict[str, Any]) -> list[dict[str, Any]]:
    message = dict(choice.get("message") or {})
    index, content = choice.get("index", 0), str(message.pop("content", None) or "")
    # the role and any other message fields (reasoning_content, refusal) open the stream
    first = {"role": message.pop("role", "assistant"), "content": "", **message}
    deltas = [first, *({"content": p} for p in pieces(content) if p)]
    out = [{"index": index, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
    out.append(
        {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    )
    return out


def _text_choices(choice: dict[str, Any]) -> list[dict[str, Any]]:
    index, text = choice.get("index", 0), str(choice.get("text") or "")
    out = [
        {"index": index, "text": p, "logprobs": None, "finish_reason": None} for p in pieces(text)
    ]
    out.append(
        {"index": index, "text": "", "logprobs": None, "finish_reason": choice["finish_reason"]}
    )
    return out


def events(served: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """The SSE events of ``served`` (from :func:`answer`), ending in ``data: [DONE]``."""
    kind = str(served.get("object"))
    head = {
        "id": served.get("id"),
        "object": _CHUNK_OBJECT.get(kind, "text_completion"),
        "created": served.get("created", 0),
        "model": served.get("model"),
    }
    split = _chat_choices if kind == "chat.completion" else _text_choices
    chunks = [{**head, "choices": [c]} for choice in served["choices"] for c in split(choice)]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": served["usage"]})
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [DONE]


def _merge(slot: dict[str, Any], choice: dict[str, Any]) -> bool:
    """Add one streamed choice to its slot; False when it carries what a string cannot hold
    (a tool call): such a stream is not assembled."""
    delta = choice.get("delta")
    parts = delta if isinstance(delta, dict) else {"text": choice.get("text")}
    for field, value in parts.items():
        if field == "role":
            slot["role"] = value
        elif isinstance(value, str):
            slot["fields"][field] = slot["fields"].get(field, "") + value
        elif value is not None:
            return False
    if choice.get("finish_reason") is not None:
        slot["finish_reason"] = choice["finish_reason"]
    return True


def _whole_choice(index: int, slot: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    fields = slot["fields"]
    if chat:
        message = {"role": slot["role"], **fields, "content": fields.get("content", "")}
        return {
            "index": index,
            "message": message,
            "logprobs": None,
            "finish_reason": slot["finish_reason"],
        }
    text = fields.get("text", "")
    return {"index": index, "text": text, "logprobs": None, "finish_reason": slot["finish_reason"]}


def assembled(stream: bytes) -> bytes | None:
    """The whole answer (as the engine's non-streamed JSON) of a relayed SSE stream, the
    inverse of :func:`events`; None unless it ran to ``[DONE]`` without an error event."""
    head: dict[str, Any] | None = None
    slots: dict[int, dict[str, Any]] = {}
    usage, done = None, False
    for event in stream.split(b"\n\n"):
        data = event.strip().removeprefix(b"data: ")
        if data == b"[DONE]":
            done = True
        elif data.startswith(b"{"):
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(chunk, dict) or "error" in chunk:
                return None
            head = head or chunk
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                slot = slots.setdefault(
                    choice.get("index", 0),
                    {"role": "assistant", "fields": {}, "finish_reason": None},
                )
                if not _merge(slot, choice):
                    return None
    if not done or head is None or not slots:
        return None
    chat = head.get("object") == "chat.completion.chunk"
    whole = {
        "id": head.get("id"),
        "object": "chat.completion" if chat else "text_completion",
        "created": head.get("created", 0),
        "model": head.get("model"),
        "choices": [_whole_choice(i, s, chat=chat) for i, s in sorted(slots.items())],
        "usage": usage,
    }
    return orjson.dumps(whole)
