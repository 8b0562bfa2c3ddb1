"""A cached answer served again (pure): as a JSON body, or as the SSE chunks an engine streams.

A hit generated nothing, so its ``usage`` says what the request was charged: zero prompt,
completion and total tokens. It gets an id of its own (clients may key on it); everything else
(model, created, choices, system_fingerprint) is the cached answer's, byte for byte in value.

A streamed hit has the shape vLLM streams: a first chunk with the role, one chunk per word of
content, a chunk with the finish reason, the usage chunk (``choices: []``) only when the client
asked for it with ``stream_options.include_usage``, then ``data: [DONE]``.
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
