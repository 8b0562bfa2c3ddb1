"""A request's trace, with tracing on: begun with a timeline, decided and exported at its end.

:meth:`Tracer.begin` gives the request a :class:`~.timeline.Timeline` instead of a plain trace
(the caller's ``traceparent`` honoured, the head-sampling draw made once); :meth:`Tracer.finish`
runs where the request is counted (:mod:`.report`), decides whether its trace is kept
(:func:`~tokenfleet.gateway.policy.trace_context.keep`: errors and SLO misses always, the rest
as drawn), and only then renders its spans (:mod:`.spans`) and hands them to the exporter.
"""

from __future__ import annotations

import logging
import random
import time

from aiohttp import web

from tokenfleet.gateway import trace_export
from tokenfleet.gateway.policy import trace_context
from tokenfleet.gateway.stages import context, spans, timeline

log = logging.getLogger("tokenfleet.gateway.traces")


class Tracer:
    """Trace ids, the sampling draw, the keep decision, and the exporter kept spans go to."""

    def __init__(self, export: trace_export.Export, *, rng: random.Random | None = None) -> None:
        """``rng``: the ids' and draws' source (a fresh one, seeded by the OS, by default:
        trace ids must differ across replicas even when routing is seeded)."""
        self._export, self._settings = export, export.settings
        self._rng = rng or random.Random()  # ids and sampling draws, not secrets

    def span_id(self) -> bytes:
        """A fresh non-zero 8-byte span id."""
        return (self._rng.getrandbits(64) or 1).to_bytes(8, "big")

    def begin(self, passage: context.Passage, request: web.Request) -> None:
        """The request's trace becomes a timeline (before any stage added to it)."""
        headers = request.headers
        parent = trace_context.parse(
            headers.get(trace_context.HEADER), headers.get(trace_context.STATE_HEADER)
        )
        trace_id = (
            parent.trace_id
            if parent is not None
            else (self._rng.getrandbits(128) or 1).to_bytes(16, "big")
        )
        passage.trace = timeline.Timeline(
            passage.identity.id,
            trace_id=trace_id,
            root_id=self.span_id(),
            parent=parent,
            sampled=trace_context.head(self._rng.random(), self._settings.ratio),
            new_id=self.span_id,
        )

    def finish(
        self, passage: context.Passage, *, outcome: str, reason: str, status: int | None
    ) -> None:
        """The request has ended (``status``: a refusal's): keep its trace or drop it."""
        trace = passage.trace
        if type(trace) is not timeline.Timeline:
            return
        end = time.monotonic()
        served, _, ended, _ = trace.where()
        if status is None and ended is not None:
            status = ended.status
        ttft = ended.ttft_ms / 1000 if ended is not None and ended.ttft_ms is not None else None
        policy = served.pool.classes.get(served.cls) if served is not None else None
        kept = trace_context.keep(
            sampled=trace.sampled,
            status=status,
            outcome=outcome,
            ttft=ttft,
            objective=policy.ttft_target if policy is not None else 0.0,
            settings=self._settings,
        )
        self._export.traces.labels(kept or trace_context.DROPPED).inc()
        if kept is None:
            return
        ending = spans.Ending(outcome, reason, status, kept)
        try:
            rendered = spans.render(
                trace,
                identity=passage.identity,
                end=end,
                ending=ending,
                to_unix=time.time() - time.monotonic(),
                new_id=self.span_id,
            )
        except Exception:  # a trace must never cost a request its counting and its log line
            log.exception("request %s: its spans could not be rendered", passage.identity.id)
            return
        self._export.offer(rendered)
