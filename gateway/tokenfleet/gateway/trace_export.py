"""Kept spans to an OpenTelemetry collector over OTLP/HTTP (JSON), batched off the request path.

A request that ends with a kept trace hands its spans over (:meth:`Export.offer`: a list
extend); every ``export_seconds``, or at once when a batch is full, one task posts what was
gathered as one OTLP/JSON body to the collector. A collector that is down or slow costs the
spans of that batch (counted, logged at most once a minute), never a request's time: nothing
is retried, and at most :data:`MAX_PENDING` spans wait, the newest dropped beyond.

Why hand-written rather than the OpenTelemetry SDK: the gateway decides whether a trace is
kept when the request has ended (errors and SLO misses always), so every request's spans would
have to be built as SDK objects and buffered only for most to be thrown away — about a dozen
span objects, each with its own lock, attribute validation and a processor call, per request.
Here a request's spans exist only once it is kept (:mod:`.stages.spans` renders them from the
timeline), a dropped trace costs one clock read per event, and the export runs on the event
loop with the app's aiohttp rather than in a thread. OTLP/JSON is part of the OTLP
specification; any collector, Jaeger and vendors' agents take it at ``/v1/traces``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import orjson
from prometheus_client import CollectorRegistry, Counter

from tokenfleet.gateway.policy import trace_context
from tokenfleet.gateway.policy.trace_context import Attribute, Span
from tokenfleet.signals import gateway as names

log = logging.getLogger("tokenfleet.gateway.traces")

MAX_BATCH = 512  # spans per OTLP request (~40 requests' traces): a few hundred KB at most
MAX_PENDING = 8192  # spans waiting for export before new ones are dropped
POST_SECONDS = 5.0  # one export's whole time: a slow collector loses a batch, no more
LOG_EVERY_SECONDS = 60.0  # a failing collector is logged at most this often
SCOPE = {"name": "tokenfleet.gateway", "version": "1"}


def _value(value: Attribute) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 travels as a string in OTLP/JSON
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _attributes(attributes: Mapping[str, Attribute]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attributes.items()]


def _span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "name": span.name,
        "kind": int(span.kind),
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes(span.attributes),
        "status": {"code": 2, "message": span.error} if span.error else {"code": 0},
    }
    if span.parent_id:
        out["parentSpanId"] = span.parent_id.hex()
    return out


def encode(spans: Sequence[Span], *, resource: Mapping[str, Attribute]) -> bytes:
    """One OTLP/JSON ExportTraceServiceRequest holding ``spans``."""
    return orjson.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": _attributes(resource)},
                    "scopeSpans": [{"scope": SCOPE, "spans": [_span(s) for s in spans]}],
                }
            ]
        }
    )


def resource_of(settings: trace_context.Settings) -> dict[str, Attribute]:
    """Who sends the spans: the service and this process (a pod's name is its hostname)."""
    return {
        "service.name": settings.service_name,
        "service.instance.id": f"{socket.gethostname()}/{os.getpid()}",
        "telemetry.sdk.name": "tokenfleet",
        "telemetry.sdk.language": "python",
    }


class Export:
    """Spans gathered on the loop, posted in batches by one task (:meth:`running`)."""

    def __init__(self, settings: trace_context.Settings, *, registry: CollectorRegistry) -> None:
        self.settings = settings
        self._resource = resource_of(settings)
        self._pending: list[Span] = []
        self._full = asyncio.Event()
        self._logged_at = -LOG_EVERY_SECONDS
        self.traces = Counter(
            names.TRACES,
            "Requests whose trace was decided, by why it was kept (or dropped).",
            ["kept"],
            registry=registry,
        )
        self.spans = Counter(
            names.TRACE_SPANS,
            "Spans of kept traces by what became of them: exported, failed (the collector "
            "refused or could not be reached), overflow (dropped: too many waiting).",
            ["result"],
            registry=registry,
        )

    def offer(self, spans: Sequence[Span]) -> None:
        """Queue a kept trace's spans (cheap: the request path calls it)."""
        room = MAX_PENDING - len(self._pending)
        if room < len(spans):
            self.spans.labels("overflow").inc(len(spans))
            return
        self._pending.extend(spans)
        if len(self._pending) >= MAX_BATCH:
            self._full.set()

    async def flush(self, session: aiohttp.ClientSession) -> None:
        """Post everything gathered so far, a batch at a time."""
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            await self._post(session, batch)

    async def _post(self, session: aiohttp.ClientSession, batch: list[Span]) -> None:
        body = encode(batch, resource=self._resource)
        try:
            async with session.post(
                self.settings.endpoint,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=POST_SECONDS),
            ) as response:
                await response.read()
                ok, why = response.status < 300, f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        self.spans.labels("exported" if ok else "failed").inc(len(batch))
        now = time.monotonic()
        if not ok and now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            log.warning(
                "trace export to %s failed (%s): %d spans lost",
                self.settings.endpoint,
                why,
                len(batch),
            )

    async def run(self, _app: object) -> AsyncIterator[None]:
        """The export task, from the app's start to its end (what is left is sent then): an
        aiohttp cleanup context."""
        # A session of its own: the engines' carries their key, which a collector must not get.
        session = aiohttp.ClientSession()

        async def forever() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.settings.export_seconds)
                self._full.clear()
                await self.flush(session)

        task = asyncio.create_task(forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.flush(session)
            await session.close()
