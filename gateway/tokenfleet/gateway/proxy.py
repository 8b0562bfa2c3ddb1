"""Forward a request to one endpoint and relay the answer, streamed or not.

Streams are relayed as bytes arrive — no re-serialising of events, no buffering of the whole
answer — and awaiting each client write gives backpressure. A client that disconnects, or a
deadline that passes, closes the upstream connection at once, which makes vLLM abort the
request and free its KV cache. A stream that breaks midway ends with an explicit error event,
never a silent truncation.

The relay sits below aiohttp's ``StreamResponse``: once the first event went out through it
(headers and the first chunk), each further event goes from the engine connection's
``data_received`` (:mod:`~tokenfleet.gateway.engine_http`) straight to the client's transport as
one HTTP chunk, with no task switch per token. When the client reads slower than the engine
writes, the engine connection stops being read until the client's buffer drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.http import HttpVersion11

from tokenfleet.gateway import engine_http
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
    dispatched: bool = False
    """The request went to an engine's connection: the engine works on it although no answer
    (not even headers: a non-streamed answer sends them at its end) came back yet."""
    relayed: int = 0  # generated tokens relayed to the client (usage.tokens_in)
    prompt_reported: int | None = None  # the engine's usage report, once it arrived
    completion_reported: int | None = None
    complete: bool = False  # the answer's end reached the client ([DONE], or the whole body)

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


#: A client that reads nothing for this long has left, whatever its deadline: otherwise a
#: stream nobody reads holds an engine's slot (and its KV cache) until the deadline, an hour if
#: the client asks for one (issue 35).
WRITE_STALL_SECONDS = 30.0


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
    write_stall: float = WRITE_STALL_SECONDS
    """Seconds a write to the client may wait for its buffer to drain before the client counts
    as gone (Settings.write_stall_seconds)."""
    engine_namespace: str | None = None
    """The namespace of the engine called, whose key goes with the request (engine_http);
    None: a remote, which gets only its own Authorization."""


def _served_by(call: Call, upstream: engine_http.Exchange, outcome: Outcome) -> str:
    named = upstream.headers.get(call.served_by_header.lower(), "") if call.served_by_header else ""
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
    call: Call, *, client: engine_http.Client, request: web.Request, meter: Meter
) -> Outcome:
    """Send ``call.body`` to ``call.url`` and answer ``request``; raise UpstreamFailed before
    any byte reached the client."""
    outcome = Outcome()
    budget = max(0.001, call.deadline - time.monotonic())
    try:
        async with asyncio.timeout(budget):
            # leaving early closes the connection: that is what makes vLLM abort the request
            meter.dispatched = True
            async with client.post(
                call.url, call.body, call.upstream_headers, engine_namespace=call.engine_namespace
            ) as upstream:
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
    except (engine_http.Broken, aiohttp.ClientError) as exc:
        if _client_gone(request):
            # aiohttp raises ClientConnectionResetError, a ClientError, for a write to a client
            # that left too: that is a cancellation, not the engine's fault.
            raise ClientLeft("the client closed its connection") from None
        if outcome.response is None:
            raise UpstreamFailed(
                Rejected(
                    reason=Reason.UPSTREAM_ERROR,
                    retry_after=1.0,
                    message=f"the model server could not be reached: {exc}",
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
    upstream: engine_http.Exchange,
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
    await _written(request, response.prepare(request), call.write_stall)
    await _written(request, response.write_eof(), call.write_stall)
    meter.complete = True


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
    if block.find(_EVENT_END) == len(block) - 2:  # one event, the usual block: no split
        if block.startswith(_DONE):
            return block, True
        if _USAGE not in block:
            meter.relayed += usage.tokens_in(block)
            return block, False
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
    kept = [e for e in events if e]
    return (_EVENT_END.join(kept) + _EVENT_END if kept else b""), done


def _capture(outcome: Outcome, block: bytes, bound: int) -> None:
    """Keep ``block`` for the response cache while the stream stays within ``bound`` bytes."""
    if outcome.oversize:
        return
    if len(outcome.captured) + len(block) > bound:
        outcome.oversize = True
        outcome.captured.clear()
        return
    outcome.captured += block


class _Events:
    """A stream's bytes cut into whole SSE events and counted as they are relayed."""

    __slots__ = ("call", "done", "last", "meter", "outcome", "pending")

    def __init__(self, call: Call, meter: Meter, outcome: Outcome) -> None:
        self.call, self.meter, self.outcome = call, meter, outcome
        self.pending = b""  # the start of an event whose end has not arrived
        self.last = 0.0
        self.done = False  # [DONE] (or the Responses API's completed event) was relayed

    def cut(self, piece: bytes) -> bytes:
        """The whole events ``piece`` completes (b"" if none): an event is counted, and sent,
        once it is complete."""
        data = self.pending + piece if self.pending else piece
        cut = data.rfind(_EVENT_END)
        if cut < 0:
            self.pending = data
            return b""
        if cut + 2 == len(data):
            self.pending = b""
            return data
        self.pending = data[cut + 2 :]
        return data[: cut + 2]

    def relayed(self, block: bytes) -> bytes:
        """Count ``block`` as sent now; the bytes to send.

        Its inter-token gap is the engine's: the time since the gateway was last ready for
        more (the previous block written, or a slow client caught up), never the time a client
        kept the stream waiting — canary analysis and the alerts judge engines by it."""
        now = time.monotonic()
        if self.last:
            self.outcome.gaps.append(now - self.last)
        self.last = now
        if self.call.capture_bytes:
            _capture(self.outcome, block, self.call.capture_bytes)
        out, seen_done = _account(block, self.meter, strip_usage=self.call.strip_usage)
        self.done = self.done or seen_done
        return out

    def sent(self) -> None:
        """The bytes :meth:`relayed` gave were written: once they held the end, the answer is
        complete, whatever happens after (a client may close as soon as it has [DONE], before
        the body's last chunk)."""
        if self.done:
            self.meter.complete = True

    def caught_up(self) -> None:
        """The client took what was waiting for it (an awaited write returned, a paused
        transport drained): the engine's next gap starts now."""
        if self.last:
            self.last = time.monotonic()


async def _relay(
    upstream: engine_http.Exchange,
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
    events = _Events(call, meter, outcome)
    first = b""
    while not first:  # the first whole event decides: refused in band, or the stream starts
        piece = await upstream.next_piece()
        if piece is None:
            break
        first = events.cut(piece)
    if first:
        if first.startswith(_ERROR_EVENT):  # refused in-band (e.g. KV cache full): not sent
            raise _refused_in_band(first)
        outcome.first_byte_at = time.monotonic()
        outcome.response = response
        chunked = request.version >= HttpVersion11
        if chunked:
            response.enable_chunked_encoding()
        await _written(request, response.prepare(request), call.write_stall)
        # the headers and the first chunk
        await _written(request, response.write(events.relayed(first)), call.write_stall)
        events.sent()
        events.caught_up()
        if chunked:
            await _relay_below(upstream, request, events, stall=call.write_stall)
        else:  # an HTTP/1.0 client: no chunks, the body ends with the connection
            while (piece := await upstream.next_piece()) is not None:
                if block := events.cut(piece):
                    written = response.write(events.relayed(block))
                    await _written(request, written, call.write_stall)
                    events.sent()
                    events.caught_up()
    if events.pending.strip() and outcome.response is not None:
        await _written(request, response.write(events.pending), call.write_stall)
    if not events.done:
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
    await _written(request, response.write_eof(), call.write_stall)


async def _written(request: web.Request, write: Awaitable[object], stall: float) -> None:
    """Await a write to the client for at most ``stall`` seconds; a client that reads nothing
    for that long is cut off (its buffered bytes dropped) and counts as gone."""
    try:
        async with asyncio.timeout(stall):
            await write
    except TimeoutError:
        _cut_off(request)
        raise ClientLeft(f"the client read nothing for {stall:g} s") from None


def _cut_off(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()  # not close(): that would wait to flush what it cannot send


async def _relay_below(
    upstream: engine_http.Exchange, request: web.Request, events: _Events, *, stall: float
) -> None:
    """Every further event from the engine connection's reads to the client's transport, as
    one HTTP chunk each (the framing aiohttp chose for the response's first chunk)."""
    protocol = request.protocol

    def send(piece: bytes) -> None:
        block = events.cut(piece)
        if not block:
            return
        transport = request.transport
        if transport is None or transport.is_closing():  # before counting: nothing more goes
            raise ClientLeft("the client closed its connection")
        out = events.relayed(block)
        if out:  # b"": the usage event only the gateway asked for
            transport.write(b"%x\r\n%s\r\n" % (len(out), out))
        events.sent()

    async def drained() -> None:
        try:
            await _written(request, protocol._drain_helper(), stall)  # aiohttp's own wait
        except ConnectionError as exc:
            raise ClientLeft(str(exc) or "the client closed its connection") from None
        events.caught_up()

    await upstream.relay(send, slow=lambda: protocol.writing_paused, drained=drained)


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
