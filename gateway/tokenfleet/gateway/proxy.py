"""Forward a request to one endpoint and relay the answer, streamed or not.

Streams are relayed as bytes arrive — no re-serialising of events, no buffering of the whole
answer — and awaiting each client write gives backpressure. A client that disconnects, or a
deadline that passes, closes the upstream connection at once, which makes vLLM abort the
request and free its KV cache. A stream that breaks midway ends with an explicit error event,
never a silent truncation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tokenfleet.gateway.policy import engine_errors, usage
from tokenfleet.gateway.policy.rejections import Reason, Rejected

_DATA = b"data: "
_DONE = b"data: [DONE]"
_USAGE = b'"usage":{'
_NO_CHOICES = b'"choices":[]'
_EVENT_END = b"\n\n"
#: The Responses API ends its stream with this event instead of [DONE].
_COMPLETED = b'"type":"response.completed"'
#: A stream whose first event is an error: the engine refused the request after answering 200
#: (vLLM-compatible servers do this, e.g. when the KV cache cannot hold the prompt). Nothing has
#: reached the client yet, so it is judged like an error status (policy.engine_errors).
_ERROR_EVENT = b'data: {"error"'


@dataclasses.dataclass(slots=True)
class Meter:
    """What one request has consumed so far, kept current while it is relayed, so a request
    whose client leaves (or whose deadline or engine fails) is settled with what it got."""

    sent: bool = False  # a request reached an engine (its prompt was taken up)
    relayed: int = 0  # generated tokens relayed to the client (usage.tokens_in)
    prompt_reported: int | None = None  # the engine's usage report, once it arrived
    completion_reported: int | None = None

    @property
    def produced(self) -> int:
        """Generated tokens: the engine's report, or what was relayed without one."""
        reported = self.completion_reported
        return self.relayed if reported is None else reported


@dataclasses.dataclass(slots=True)
class Outcome:
    """What happened upstream, for metrics and the access log."""

    status: int = 0
    first_byte_at: float | None = None
    error: Reason | None = None
    response: web.StreamResponse | None = None
    gaps: list[float] = dataclasses.field(default_factory=list)
    captured: bytearray = dataclasses.field(default_factory=bytearray)
    """A stream's events as the engine sent them, when the call asked (the response cache)."""
    oversize: bool = False  # the stream outgrew its capture bound: what was captured is dropped
    served_by: str = ""  # the model that answered, as the X-TokenFleet-Model header says


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One forward: where, what, and how the answer goes back."""

    url: str
    body: bytes
    stream: bool
    strip_usage: bool  # the gateway asked for the stream's usage event; the client did not
    deadline: float
    headers: dict[str, str]  # on the response
    upstream_headers: dict[str, str]
    served_by: str
    capture_bytes: int = 0  # keep a stream's events up to this many bytes (0: keep none)
    served_by_header: str = ""
    """An upstream header that names the model better than ``served_by`` (another TokenFleet
    gateway's X-TokenFleet-Model), used when present."""


def _served_by(call: Call, upstream: aiohttp.ClientResponse, outcome: Outcome) -> str:
    named = upstream.headers.get(call.served_by_header, "") if call.served_by_header else ""
    outcome.served_by = named or call.served_by
    return outcome.served_by


class UpstreamFailed(Exception):
    """Nothing reached the client yet: the caller may retry elsewhere or refuse.

    ``retryable``: another endpoint may succeed (connect error, 5xx, 429, empty stream), unlike
    a passed deadline or a request the engine rejected for what it is. ``endpoint_fault``: the
    failure counts against the endpoint's health (429 is the engine pushing back, not failing).
    ``cause`` names it for metrics.
    """

    def __init__(
        self, rejected: Rejected, *, retryable: bool, endpoint_fault: bool, cause: str
    ) -> None:
        super().__init__(rejected.message)
        self.rejected = rejected
        self.retryable = retryable
        self.endpoint_fault = endpoint_fault
        self.cause = cause

    @classmethod
    def judged(cls, status: int, body: bytes) -> UpstreamFailed:
        verdict = engine_errors.judge(status, body)
        return cls(
            verdict.rejected,
            retryable=verdict.retryable,
            endpoint_fault=verdict.endpoint_fault,
            cause=verdict.cause,
        )


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


def _usage_of(payload: Any, meter: Meter) -> None:
    """The engine's usage report (OpenAI's names, or the Responses API's, nested or not)."""
    if isinstance(payload, dict) and isinstance(payload.get("response"), dict):
        payload = payload["response"]  # a Responses stream's response.completed event
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    # embeddings report no completion: nothing was generated
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    if isinstance(prompt, int) and isinstance(completion, int):
        meter.prompt_reported, meter.completion_reported = prompt, completion


async def forward(
    call: Call, *, session: aiohttp.ClientSession, request: web.Request, meter: Meter
) -> Outcome:
    """Send ``call.body`` to ``call.url`` and answer ``request``; raise UpstreamFailed before
    any byte reached the client."""
    outcome = Outcome()
    budget = max(0.001, call.deadline - time.monotonic())
    try:
        async with asyncio.timeout(budget):
            async with (
                session.post(call.url, data=call.body, headers=call.upstream_headers) as upstream,
                _closed_unless_finished(upstream),
            ):
                meter.sent = True
                outcome.status = upstream.status
                if upstream.status >= 400:
                    raise UpstreamFailed.judged(upstream.status, await upstream.read())
                if not call.stream:
                    await _whole(upstream, request, outcome, call, meter)
                else:
                    await _relay(upstream, request, outcome, call, meter)
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
        if _client_gone(request):
            # aiohttp raises ClientConnectionResetError, a ClientError, for a write to a client
            # that left too: that is a cancellation, not the engine's fault.
            raise ClientLeft("the client closed its connection") from None
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


class ClientLeft(ConnectionResetError):
    """The client's connection closed under a write: the request is cancelled, and the engine
    that was answering it did nothing wrong (its endpoint is not marked failed)."""


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _whole(
    upstream: aiohttp.ClientResponse,
    request: web.Request,
    outcome: Outcome,
    call: Call,
    meter: Meter,
) -> None:
    payload = await upstream.read()
    outcome.first_byte_at = time.monotonic()
    with contextlib.suppress(orjson.JSONDecodeError):
        _usage_of(orjson.loads(payload), meter)
    response = web.Response(
        body=payload,
        status=upstream.status,
        content_type="application/json",
        headers={**call.headers, "X-TokenFleet-Model": _served_by(call, upstream, outcome)},
    )
    outcome.response = response
    await response.prepare(request)
    await response.write_eof()


def _refused_in_band(block: bytes) -> UpstreamFailed:
    """A stream whose first event is an error, judged by the code it carries."""
    first = block[: block.find(_EVENT_END)] if _EVENT_END in block else block
    status, body = engine_errors.stream_error(first)
    failed = UpstreamFailed.judged(status, body)
    if failed.retryable:  # in-band refusals (KV cache full) are back-pressure, not a fault
        failed.endpoint_fault = False
        failed.cause = "error_event"
    return failed


def _account(block: bytes, meter: Meter, *, strip_usage: bool) -> tuple[bytes, bool]:
    """Count one block of whole SSE events as relayed: (the bytes to send, [DONE] seen).

    The usage event is read (the engine's own count) and dropped when only the gateway asked
    for it; every other event passes byte for byte."""
    done, dropped = False, False
    events = block.split(_EVENT_END)
    for i, event in enumerate(events):
        if not event.strip():
            continue
        if event.startswith(_DONE):
            done = True
        elif _USAGE in event:
            done = done or _COMPLETED in event
            with contextlib.suppress(orjson.JSONDecodeError):
                _usage_of(orjson.loads(event[event.find(b"{") :]), meter)
            if strip_usage and _NO_CHOICES in event:
                events[i], dropped = b"", True
                continue
        meter.relayed += usage.tokens_in(event)
    if not dropped:
        return block, done
    return _EVENT_END.join(e for e in events if e) + _EVENT_END, done


def _capture(outcome: Outcome, block: bytes, bound: int) -> None:
    """Keep ``block`` for the response cache while the stream stays within ``bound`` bytes."""
    if outcome.oversize:
        return
    if len(outcome.captured) + len(block) > bound:
        outcome.oversize = True
        outcome.captured.clear()
        return
    outcome.captured += block


async def _relay(
    upstream: aiohttp.ClientResponse,
    request: web.Request,
    outcome: Outcome,
    call: Call,
    meter: Meter,
) -> None:
    response = web.StreamResponse(
        status=200,
        headers={
            **call.headers,
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-TokenFleet-Model": _served_by(call, upstream, outcome),
        },
    )
    last, done, pending = 0.0, False, b""
    gaps = outcome.gaps
    write = response.write
    async for chunk in upstream.content.iter_any():
        data = pending + chunk if pending else chunk
        cut = data.rfind(_EVENT_END)
        if cut < 0:  # no whole event yet: an event is counted (and sent) once it is complete
            pending = data
            continue
        block, pending = data[: cut + 2], data[cut + 2 :]
        now = time.monotonic()
        if outcome.response is None:
            if block.startswith(_ERROR_EVENT):  # refused in-band (e.g. KV cache full): not sent
                raise _refused_in_band(block)
            outcome.first_byte_at = now
            outcome.response = response
            await response.prepare(request)
        else:
            gaps.append(now - last)
        last = now
        if call.capture_bytes:
            _capture(outcome, block, call.capture_bytes)
        out, seen_done = _account(block, meter, strip_usage=call.strip_usage)
        done = done or seen_done
        await write(out)  # backpressure: waits while the client is slow
    if pending.strip() and outcome.response is not None:
        await write(pending)
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
    await response.write_eof()


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
