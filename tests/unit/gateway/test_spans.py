"""A kept request's spans rendered from its timeline (gateway/stages/spans.py, timeline.py).

Matrix, each from a timeline with known times: a served request with one retry (every step's
span, back to back, the attempts' first byte and relay, the failed attempt's cause), a refusal
by intake, by the quota and by the queue (the refusing step's span ends it, with the reason), a
cache hit replayed, a spill to a remote after the local queue refused, a client that left
mid-attempt, and a caller's traceparent (the root under the caller's span). The span an engine
was told in ``traceparent`` is the attempt's span; a plain trace gets no header.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from tokenfleet.gateway.policy import trace_context as tc
from tokenfleet.gateway.stages import context, events, spans, timeline

T0 = 100.0  # the request's start (monotonic seconds)
PATH = "/v1/chat/completions"
ROOT = f"POST {PATH}"


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: next(counter).to_bytes(8, "big")


def timed(*at: tuple[float, Any], parent: tc.Parent | None = None) -> timeline.Timeline:
    """A timeline of (ms after T0, event), as the stages would have added them."""
    t = timeline.Timeline(
        "r-1",
        trace_id=parent.trace_id if parent is not None else b"\x01" * 16,
        root_id=b"\xaa" * 8,
        parent=parent,
        sampled=True,
        new_id=ids(),
    )
    for ms, event in at:
        t.append(event)
        t.times.append(T0 + ms / 1000)
    return t


def target(adapter: str = "") -> Any:
    model = SimpleNamespace(name="m", adapter=SimpleNamespace(name=adapter) if adapter else None)
    return SimpleNamespace(model=model, pool=SimpleNamespace(key="ns/chat"), cls="interactive")


PLACED = events.Placed("ns/team-a", "m", "ns/chat", "interactive")
ATTEMPT_1 = events.Attempted("http://e1", "prefix", 1, "r1", prefix_blocks=3, prefix_total=4)
ATTEMPT_2 = events.Attempted("http://e2", "load", 2, "r1", prefix_blocks=0, prefix_total=4)
SETTLED = events.Settled(7, 12, 40)


def rendered(
    trace: timeline.Timeline, *, end_ms: float, outcome: str = "served", reason: str = ""
) -> list[tc.Span]:
    kept = tc.Kept.ERROR if outcome == "failed" else tc.Kept.SAMPLED
    return spans.render(
        trace,
        identity=context.Identity(id="r-1", started=T0, kind="chat", path=PATH, pinned=None),
        end=T0 + end_ms / 1000,
        ending=spans.Ending(outcome, reason, 200 if outcome == "served" else 503, kept),
        to_unix=0.0,
        new_id=ids(),
    )


def shape(out: list[tc.Span]) -> list[tuple[str, str, float, float, str]]:
    """(name, parent's name, start ms, end ms, error) per span, in order."""
    by_id = {s.span_id: s.name for s in out}
    return [
        (
            s.name,
            by_id.get(s.parent_id or b"", "-"),
            round(s.start_ns / 1e6 - T0 * 1000, 3),
            round(s.end_ns / 1e6 - T0 * 1000, 3),
            s.error,
        )
        for s in out
    ]


def test_a_served_request_with_one_retry() -> None:
    trace = timed(
        (0.0, events.Authenticated("ns/team-a")),
        (1.0, PLACED),
        (2.0, timeline.QUOTA_DONE),
        (3.0, timeline.BUDGET_DONE),
        (10.0, events.Started(target())),
        (11.0, ATTEMPT_1),
        (15.0, timeline.AttemptFailed("upstream_503", 503)),
        (20.0, ATTEMPT_2),
        (90.0, events.Ended("served", "", status=200, ttft_ms=60.0, delivered=True)),
        (91.0, SETTLED),
    )
    assert shape(rendered(trace, end_ms=91.5)) == [
        (ROOT, "-", 0.0, 91.5, ""),
        ("intake", ROOT, 0.0, 1.0, ""),
        ("quota", ROOT, 1.0, 2.0, ""),
        ("budget", ROOT, 2.0, 3.0, ""),
        ("queue", ROOT, 3.0, 10.0, ""),
        ("route", ROOT, 10.0, 11.0, ""),
        ("upstream", ROOT, 11.0, 15.0, "upstream_503"),
        ("route", ROOT, 15.0, 20.0, ""),
        ("upstream", ROOT, 20.0, 90.0, ""),
        ("first_byte", "upstream", 20.0, 60.0, ""),
        ("relay", "upstream", 60.0, 90.0, ""),
        ("settle", ROOT, 90.0, 91.0, ""),
    ]


def test_the_routing_decision_and_the_request_carry_their_attributes() -> None:
    trace = timed(
        (1.0, PLACED),
        (2.0, timeline.QUOTA_DONE),
        (3.0, timeline.BUDGET_DONE),
        (4.0, events.Started(target(adapter="sql-lora"))),
        (5.0, ATTEMPT_1),
        (9.0, events.Ended("served", "", status=200, ttft_ms=7.0, delivered=True)),
        (9.5, SETTLED),
    )
    out = {s.name: s for s in rendered(trace, end_ms=10)}
    assert out["route"].attributes == {
        "tokenfleet.endpoint": "http://e1",
        "tokenfleet.revision": "r1",
        "tokenfleet.route.reason": "prefix",
        "tokenfleet.attempt": 1,
        "tokenfleet.prefix.blocks": 4,
        "tokenfleet.prefix.hit_blocks": 3,
        "tokenfleet.adapter": "sql-lora",
    }
    assert out[ROOT].attributes == {
        "http.request.method": "POST",
        "url.path": PATH,
        "tokenfleet.request_id": "r-1",
        "tokenfleet.outcome": "served",
        "tokenfleet.trace.kept": "sampled",
        "tokenfleet.tenant": "ns/team-a",
        "gen_ai.request.model": "m",
        "tokenfleet.pool": "ns/chat",
        "tokenfleet.class": "interactive",
        "tokenfleet.revision": "r1",
        "http.response.status_code": 200,
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 12,
        "tokenfleet.reserved_tokens": 40,
    }
    assert out[ROOT].kind is tc.Kind.SERVER and out["upstream"].kind is tc.Kind.CLIENT


@pytest.mark.parametrize(
    ("added", "end_ms", "reason", "expected"),
    [
        pytest.param(
            [(0.5, events.Authenticated("ns/team-a"))],
            2.0,
            "model_not_found",
            [
                (ROOT, "-", 0.0, 2.0, "model_not_found"),
                ("intake", ROOT, 0.0, 2.0, "model_not_found"),
            ],
            id="intake",
        ),
        pytest.param(
            [(1.0, PLACED)],
            3.0,
            "quota_exceeded",
            [
                (ROOT, "-", 0.0, 3.0, "quota_exceeded"),
                ("intake", ROOT, 0.0, 1.0, ""),
                ("quota", ROOT, 1.0, 3.0, "quota_exceeded"),
            ],
            id="quota",
        ),
        pytest.param(
            [
                (1.0, PLACED),
                (2.0, timeline.QUOTA_DONE),
                (3.0, timeline.BUDGET_DONE),
                (50.0, events.Ended("rejected", "queue_timeout")),
                (51.0, events.Settled(0, 0, 40)),
            ],
            52.0,
            "queue_timeout",
            [
                (ROOT, "-", 0.0, 52.0, "queue_timeout"),
                ("intake", ROOT, 0.0, 1.0, ""),
                ("quota", ROOT, 1.0, 2.0, ""),
                ("budget", ROOT, 2.0, 3.0, ""),
                ("queue", ROOT, 3.0, 50.0, "queue_timeout"),
                ("settle", ROOT, 50.0, 51.0, ""),
            ],
            id="queue",
        ),
    ],
)
def test_a_refusal_ends_the_span_of_the_step_that_refused(
    added: list[tuple[float, Any]],
    end_ms: float,
    reason: str,
    expected: list[tuple[str, str, float, float, str]],
) -> None:
    out = rendered(timed(*added), end_ms=end_ms, outcome="failed", reason=reason)
    assert shape(out) == expected


def test_a_cache_hit_is_looked_up_then_replayed() -> None:
    trace = timed(
        (1.0, PLACED),
        (2.0, events.Cached(hit=True)),
        (3.0, timeline.QUOTA_DONE),
        (3.5, events.Ended("served", "cache_hit")),
        (3.6, events.Replayed("r1")),
        (6.0, events.DELIVERED),
        (7.0, events.Settled(0, 0, 0)),
    )
    assert [s[:4] for s in shape(rendered(trace, end_ms=7.2))] == [
        (ROOT, "-", 0.0, 7.2),
        ("intake", ROOT, 0.0, 1.0),
        ("cache.lookup", ROOT, 1.0, 2.0),
        ("quota", ROOT, 2.0, 3.0),
        ("cache.replay", ROOT, 3.5, 6.0),
        ("settle", ROOT, 6.0, 7.0),
    ]


def test_a_spill_after_the_local_queue_refused() -> None:
    remote = SimpleNamespace(remote=SimpleNamespace(name="region-b"))
    trace = timed(
        (1.0, PLACED),
        (2.0, timeline.QUOTA_DONE),
        (3.0, timeline.BUDGET_DONE),
        (5.0, events.AtRemote(remote)),  # type: ignore[arg-type]
        (40.0, events.SpilledTo("remote/region-b", "queue_full", "ns/remote:region-b")),
        (40.5, events.Ended("served", "", status=200, ttft_ms=20.0, delivered=True)),
        (41.0, SETTLED),
    )
    assert shape(rendered(trace, end_ms=41.0)) == [
        (ROOT, "-", 0.0, 41.0, ""),
        ("intake", ROOT, 0.0, 1.0, ""),
        ("quota", ROOT, 1.0, 2.0, ""),
        ("budget", ROOT, 2.0, 3.0, ""),
        ("queue", ROOT, 3.0, 5.0, "refused"),
        ("spill.remote", "spill", 5.0, 40.0, ""),
        ("spill", ROOT, 5.0, 40.0, ""),
        ("first_byte", "spill.remote", 5.0, 20.0, ""),
        ("relay", "spill.remote", 20.0, 40.0, ""),
        ("settle", ROOT, 40.5, 41.0, ""),
    ]


def test_a_client_that_left_mid_attempt() -> None:
    trace = timed(
        (1.0, PLACED),
        (2.0, timeline.QUOTA_DONE),
        (3.0, timeline.BUDGET_DONE),
        (4.0, events.Started(target())),
        (5.0, ATTEMPT_1),
        (30.0, events.Settled(7, 3, 40)),
    )
    out = rendered(trace, end_ms=30.5, outcome="cancelled", reason="client_disconnected")
    assert ("upstream", ROOT, 5.0, 30.0, "cancelled") in shape(out)


def test_the_engine_is_told_the_attempts_span_and_the_root_joins_the_caller() -> None:
    caller = tc.Parent(b"\x07" * 16, b"\x08" * 8)
    trace = timed((1.0, PLACED), (2.0, ATTEMPT_1), parent=caller)
    headers: dict[str, str] = {}
    timeline.propagate(trace, headers)
    told = tc.parse(headers[tc.HEADER])
    assert told is not None and told.trace_id == trace.trace_id
    trace.append(events.Ended("served", "", status=200, ttft_ms=3.0, delivered=True))
    trace.times.append(T0 + 0.004)
    out = rendered(trace, end_ms=5.0)
    (upstream,) = [s for s in out if s.name == "upstream"]
    assert upstream.span_id == told.span_id  # the engine's spans go under the attempt
    assert out[0].parent_id == caller.span_id and out[0].trace_id == b"\x07" * 16


def test_a_plain_trace_sends_no_header() -> None:
    headers: dict[str, str] = {}
    timeline.propagate(events.Trace("r-1"), headers)
    assert headers == {}


def test_a_timeline_notes_when_each_event_was_added() -> None:
    trace = timed()
    trace.add(PLACED)
    trace.add(timeline.QUOTA_DONE)
    assert len(trace.times) == len(trace) == 2 and trace.times[0] <= trace.times[1]
    assert trace.headers() == {"X-Request-Id": "r-1"}  # the marks show nowhere
