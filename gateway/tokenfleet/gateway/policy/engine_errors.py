"""What an engine's error answer means (pure): retry it elsewhere, or answer the client at once.

An engine that rejects a request for what it is — a 4xx, or a 5xx whose body says the request
itself is invalid (vLLM reports some validation failures as 500 ``BadRequestError``) — would
reject it on every replica: retrying only burns the retry budget and delays the answer. Such a
request is answered at once, the engine's status mapped to OpenAI's error (400 → invalid
request or context length, 404 → model not found, 413 → too large) with the engine's message.
Anything else (connect errors are decided elsewhere; here 429, other 5xx, 401/403 — the
gateway's own credentials, not the caller's) may go better on another replica.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from tokenfleet.gateway.policy.rejections import Reason, Rejected

#: Words in a 5xx body that say the request, not the server, is at fault.
_INVALID_MARKS = (
    "badrequesterror",
    "invalid_request",
    "invalid request",
    "context length",
    "context_length",
    "maximum context",
    "validationerror",
)
_CONTEXT_MARKS = ("context length", "context_length", "maximum context", "too long")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """An engine's error answer judged: what the client is told, and whether to retry."""

    rejected: Rejected
    retryable: bool
    endpoint_fault: bool  # counts against the endpoint's health (429 is back-pressure)
    cause: str  # a metric label


def message_of(body: bytes) -> str:
    """The engine's error message (OpenAI's ``error.message`` or vLLM's flat ``message``)."""
    try:
        payload: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode(errors="replace").strip()
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict):
            payload = inner
        elif isinstance(inner, str):
            return inner[:300]
        text = payload.get("message")
        if isinstance(text, str):
            return text[:300]
    return body[:300].decode(errors="replace").strip()


def _client_reason(status: int, text: str) -> Reason:
    lowered = text.lower()
    if status == 404:
        return Reason.MODEL_NOT_FOUND
    if status == 413:
        return Reason.BODY_TOO_LARGE
    if any(mark in lowered for mark in _CONTEXT_MARKS):
        return Reason.CONTEXT_TOO_LONG
    return Reason.INVALID_REQUEST


def judge(status: int, body: bytes) -> Verdict:
    """An engine's non-2xx answer (or a stream's first event, with its code as ``status``)."""
    text = message_of(body)
    whole = body[:2000].decode(errors="replace").lower()  # the error's type says it too
    deterministic = (400 <= status < 500 and status not in (401, 403, 408, 429)) or (
        status >= 500 and any(mark in whole for mark in _INVALID_MARKS)
    )
    if deterministic:
        return Verdict(
            rejected=Rejected(reason=_client_reason(status, text), message=text or "invalid"),
            retryable=False,
            endpoint_fault=False,
            cause=f"upstream_{status}",
        )
    return Verdict(
        rejected=Rejected(
            reason=Reason.UPSTREAM_ERROR,
            retry_after=1.0,
            message=f"the model server answered {status}: {text}",
        ),
        retryable=True,
        endpoint_fault=status not in (429, 408),
        cause=f"upstream_{status}",
    )


def stream_error(event: bytes) -> tuple[int, bytes]:
    """(status, body) of a stream's in-band first error event (``data: {"error": ...}``): its
    numeric ``code`` when it has one, else 500 (judged by its message)."""
    body = event[len(b"data: ") :].strip()
    try:
        payload: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 500, body
    inner = payload.get("error") if isinstance(payload, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code, body
    if isinstance(code, str) and code.isdigit() and 400 <= int(code) < 600:
        return int(code), body
    return 500, body
