"""Forward a request to one endpoint and relay the answer, streamed or not.

Streams are relayed as bytes arrive — no re-serialising of events, no buffering of the whole
answer — and awaiting each client write gives backpressure. A client that disconnects, or a
deadline that passes, closes the upstream connection at once, which makes vLLM abort the
request and free its KV cache. A stream that breaks midway ends with an explicit error event,
never a silent truncation.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tokenfleet.gateway.policy.rejections import Reason, Rejected

_DATA = b"data: "
_DONE = b"data: [DONE]"
_USAGE = b'"usage":{'
#: A stream whose first event is an error: the engine refused the request after answering 200
#: (vLLM-compatible servers do this, e.g. when the KV cache cannot hold the prompt). Nothing has
#: reached the client yet, so it is retried elsewhere like a 429.
_ERROR_EVENT = b'data: {"error"'


@dataclasses.dataclass(slots=True)
class Outcome:
    """What happened upstream, for accounting, metrics and the access log."""

    status: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_byte_at: float | None = None
    chunks: int = 0
    error: Reason | None = None
    response: web.StreamResponse | None = None
    gaps: list[float] = dataclasses.field(default_factory=list)


class UpstreamFailed(Exception):
    """Nothing reached the client yet: the caller may retry elsewhere or refuse.

    ``retryable``: another endpoint may succeed (connect error, 5xx, 429, empty stream), unlike
    a passed deadline. ``endpoint_fault``: the failure counts against the endpoint's health
    (429 is the engine pushing back, not failing). ``cause`` names it for metrics.
    """

    def __init__(
        self, rejected: Rejected, *, retryable: bool, endpoint_fault: bool, cause: str
    ) -> None:
        super().__init__(rejected.message)
        self.rejected = rejected
        self.retryable = retryable
        self.endpoint_fault = endpoint_fault
        self.cause = cause


@contextlib.asynccontextmanager
async def _closed_unless_finished(upstream: aiohttp.ClientResponse) -> AsyncIterator[None]:
    """Close the upstream connection unless the answer was read to its end.

    Leaving the ``async with`` only *releases* a connection, and a release can return a
    half-read stream to the pool: the engine would keep generating (and holding KV cache) for a
    client that is gone. Closing is what makes vLLM abort the request.
    """
    try:
        yield
    except BaseException:
        upstream.close()
        raise


def _usage_of(payload: Any) -> tuple[int | None, int | None]:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return usage.get("prompt_tokens"), usage.get("completion_tokens")


async def forward(
    *,
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    request: web.Request,
    stream: bool,
    deadline: float,
    headers: dict[str, str],
    served_by: str,
) -> Outcome:
    """Send ``body`` to ``url`` and answer ``request``; raise UpstreamFailed before any byte."""
    outcome = Outcome()
    budget = max(0.001, deadline - time.monotonic())
    try:
        async with asyncio.timeout(budget):
            async with (
                session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as upstream,
                _closed_unless_finished(upstream),
            ):
                outcome.status = upstream.status
                if upstream.status >= 500 or upstream.status == 429:
                    text = (await upstream.read())[:300].decode(errors="replace")
                    raise UpstreamFailed(
                        Rejected(
                            reason=Reason.UPSTREAM_ERROR,
                            retry_after=1.0,
                            message=f"the model server answered {upstream.status}: {text}",
                        ),
                        retryable=True,
                        endpoint_fault=upstream.status != 429,
                        cause=f"upstream_{upstream.status}",
                    )
                if not stream or upstream.status != 200:
                    await _whole(upstream, request, outcome, headers, served_by)
                else:
                    await _relay(upstream, request, outcome, headers, served_by)
    except TimeoutError:
        if outcome.response is None:
            raise UpstreamFailed(
                Rejected(
                    reason=Reason.DEADLINE_EXCEEDED,
                    message="the request's deadline passed before the model answered",
                ),
                retryable=False,
                endpoint_fault=False,
                cause="deadline",
            ) from None
        outcome.error = Reason.DEADLINE_EXCEEDED
        await _error_event(
            outcome, Reason.DEADLINE_EXCEEDED, "the request's deadline passed mid-stream"
        )
    except aiohttp.ClientError as exc:
        if outcome.response is None:
            raise UpstreamFailed(
                Rejected(
                    reason=Reason.UPSTREAM_ERROR,
                    retry_after=1.0,
                    message=f"the model server could not be reached: {type(exc).__name__}",
                ),
                retryable=True,
                endpoint_fault=True,
                cause="connect",
            ) from None
        outcome.error = Reason.UPSTREAM_ERROR
        await _error_event(outcome, Reason.UPSTREAM_ERROR, "the model server's stream broke off")
    return outcome


async def _whole(
    upstream: aiohttp.ClientResponse,
    request: web.Request,
    outcome: Outcome,
    headers: dict[str, str],
    served_by: str,
) -> None:
    payload = await upstream.read()
    outcome.first_byte_at = time.monotonic()
    if upstream.status == 200:
        with contextlib.suppress(orjson.JSONDecodeError):
            outcome.prompt_tokens, outcome.completion_tokens = _usage_of(orjson.loads(payload))
    response = web.Response(
        body=payload,
        status=upstream.status,
        content_type="application/json",
        headers={**headers, "X-TokenFleet-Model": served_by},
    )
    outcome.response = response
    await response.prepare(request)
    await response.write_eof()


async def _relay(
    upstream: aiohttp.ClientResponse,
    request: web.Request,
    outcome: Outcome,
    headers: dict[str, str],
    served_by: str,
) -> None:
    response = web.StreamResponse(
        status=200,
        headers={
            **headers,
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-TokenFleet-Model": served_by,
        },
    )
    recent: collections.deque[bytes] = collections.deque(
        maxlen=16
    )  # for [DONE] and usage, at the end
    last = 0.0
    gaps = outcome.gaps
    write = response.write
    async for chunk in upstream.content.iter_any():
        now = time.monotonic()
        if outcome.response is None:
            if chunk.startswith(_ERROR_EVENT):  # refused in-band (e.g. KV cache full): not sent
                raise UpstreamFailed(
                    Rejected(
                        reason=Reason.UPSTREAM_ERROR,
                        retry_after=1.0,
                        message="the model server refused: "
                        + chunk[len(_DATA) : 300].decode(errors="replace"),
                    ),
                    retryable=True,
                    endpoint_fault=False,
                    cause="error_event",
                )
            outcome.first_byte_at = now
            outcome.response = response
            await response.prepare(request)
        else:
            gaps.append(now - last)
        last = now
        outcome.chunks += chunk.count(_DATA)
        recent.append(chunk)
        await write(chunk)  # backpressure: waits while the client is slow
    tail = b"".join(recent)[-8192:]
    done = _DONE in tail
    if not done:
        if outcome.response is None:
            raise UpstreamFailed(
                Rejected(
                    reason=Reason.UPSTREAM_ERROR,
                    retry_after=1.0,
                    message="the model server closed the stream without data",
                ),
                retryable=True,
                endpoint_fault=True,
                cause="empty_stream",
            )
        outcome.error = Reason.UPSTREAM_ERROR
        await _error_event(outcome, Reason.UPSTREAM_ERROR, "the model server's stream ended early")
        return
    _usage_from_tail(tail, outcome)
    await response.write_eof()


def _usage_from_tail(tail: bytes, outcome: Outcome) -> None:
    """The usage event (stream_options.include_usage) is the last data event before [DONE]."""
    at = tail.rfind(_USAGE)
    if at < 0:
        return
    start = tail.rfind(_DATA, 0, at)
    end = tail.find(b"\n", at)
    try:
        payload = orjson.loads(tail[start + len(_DATA) : end if end > 0 else None])
    except orjson.JSONDecodeError:
        return
    outcome.prompt_tokens, outcome.completion_tokens = _usage_of(payload)


async def _error_event(outcome: Outcome, reason: Reason, message: str) -> None:
    response = outcome.response
    if not isinstance(response, web.StreamResponse) or isinstance(response, web.Response):
        return
    event = Rejected(reason=reason, message=message).body()
    try:
        await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        pass
