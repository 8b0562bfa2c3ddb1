"""The tracer around a request (gateway/stages/tracing.py), with a seeded random source.

Matrix: begin gives the request a timeline — its own trace id, or the caller's with the
caller's span as parent (and the draw still the gateway's own); finish keeps what keep() says
and only then renders, counts every decision by why, drops the rest without rendering, and
never lets a span it cannot render break the request's counting (logged instead).
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tokenfleet.gateway import trace_export
from tokenfleet.gateway.policy import trace_context as tc
from tokenfleet.gateway.stages import context, events, spans, timeline, tracing

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def tracer(ratio: float) -> tuple[tracing.Tracer, trace_export.Export]:
    export = trace_export.Export(
        tc.Settings(endpoint="http://collector:4318/v1/traces", ratio=ratio),
        registry=CollectorRegistry(),
    )
    return tracing.Tracer(export, rng=random.Random(7)), export


def passage() -> context.Passage:
    return context.Passage(
        context.Identity(
            id="r-1", started=0.0, kind="chat", path="/v1/chat/completions", pinned=None
        )
    )


def begun(t: tracing.Tracer, headers: dict[str, str] | None = None) -> context.Passage:
    p = passage()
    t.begin(p, SimpleNamespace(headers=headers or {}))  # type: ignore[arg-type]
    return p


def count(export: trace_export.Export, kept: str) -> float:
    return export.traces.labels(kept)._value.get()  # type: ignore[no-any-return]


def test_begin_starts_a_trace_or_joins_the_callers() -> None:
    t, _ = tracer(ratio=0.0)
    own, joined = begun(t), begun(t, {"traceparent": CALLER, "tracestate": "v=1"})
    assert isinstance(own.trace, timeline.Timeline) and isinstance(joined.trace, timeline.Timeline)
    assert own.trace.parent is None and len(own.trace.trace_id) == 16
    assert joined.trace.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert joined.trace.parent == tc.Parent(
        joined.trace.trace_id, bytes.fromhex("00f067aa0ba902b7"), "v=1"
    )
    assert not joined.trace.sampled  # the caller's 01 is not trusted: the ratio (0) decides
    headers: dict[str, str] = {}
    joined.trace.add(events.Attempted("http://e", "load", 1, ""))
    timeline.propagate(joined.trace, headers)
    assert headers["tracestate"] == "v=1" and headers["traceparent"].endswith("-00")


@pytest.mark.parametrize(
    ("ratio", "status", "outcome", "kept"),
    [
        pytest.param(1.0, None, "served", "sampled", id="drawn"),
        pytest.param(0.0, None, "served", "dropped", id="not-drawn"),
        pytest.param(0.0, 503, "rejected", "error", id="refused-5xx"),
    ],
)
def test_finish_counts_every_decision_and_exports_only_the_kept(
    ratio: float, status: int | None, outcome: str, kept: str
) -> None:
    t, export = tracer(ratio)
    p = begun(t)
    p.trace.add(events.Authenticated("ns/a"))
    t.finish(p, outcome=outcome, reason="x" if status else "", status=status)
    assert count(export, kept) == 1
    pending: list[Any] = export._pending
    assert bool(pending) is (kept != "dropped")
    if pending:
        assert pending[0].name == "POST /v1/chat/completions"
        assert dict(pending[0].attributes)["tokenfleet.trace.kept"] == kept


def test_a_span_that_cannot_be_rendered_never_breaks_the_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: object, **__: object) -> list[tc.Span]:
        raise ValueError("an event sequence nobody foresaw")

    monkeypatch.setattr(spans, "render", broken)
    t, export = tracer(ratio=1.0)
    p = begun(t)
    t.finish(p, outcome="served", reason="", status=200)  # must not raise
    assert "could not be rendered" in caplog.text and export._pending == []


def test_a_plain_trace_is_left_alone() -> None:
    t, export = tracer(ratio=1.0)
    p = passage()  # tracing was off when it began
    t.finish(p, outcome="served", reason="", status=200)
    assert count(export, "sampled") == 0 and export._pending == []
