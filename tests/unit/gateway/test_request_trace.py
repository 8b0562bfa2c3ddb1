"""A request's trace (gateway/stages/events.py): what the stages decided, appended in order, and
the response headers and access-log fields rendered from it — the last revision an attempt had
stays, a spilled answer drops the local attempt's revision and fallback, a second rendering
(only what came since) equals a full one — and where the request stands (served where, at which
remote, how it ended, delivered or not), read in one pass. Every event that adds a header is
one the renderer asks."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tokenfleet.gateway.stages import events

REQUEST_ID = "r-1"
ALL_EVENTS = [
    cls
    for _, cls in inspect.getmembers(events, inspect.isclass)
    if cls.__module__ == events.__name__ and hasattr(cls, "_fields") and hasattr(cls, "header")
]


def trace(*added: Any) -> events.Trace:
    t = events.Trace(REQUEST_ID)
    for event in added:
        t.add(event)
    return t


def attempt(n: int, revision: str) -> events.Attempted:
    return events.Attempted(f"http://e{n}", "least_loaded", n, revision)


@pytest.mark.parametrize(
    ("added", "headers"),
    [
        pytest.param((), {"X-Request-Id": REQUEST_ID}, id="nothing-decided"),
        pytest.param(
            (events.Directed("auto/rule=short"), events.Cached(hit=False), attempt(1, "r1")),
            {
                "X-Request-Id": REQUEST_ID,
                "X-TokenFleet-Route": "auto/rule=short",
                "X-TokenFleet-Cache": "miss",
                "X-TokenFleet-Revision": "r1",
            },
            id="route-cache-revision",
        ),
        pytest.param(
            (attempt(1, "r1"), attempt(2, "")),
            {"X-Request-Id": REQUEST_ID, "X-TokenFleet-Revision": "r1"},
            id="a-later-endpoint-without-revision-keeps-the-last",
        ),
        pytest.param(
            (
                events.BudgetExceeded("spent"),
                events.FellBack("big", "no_capacity", "ns/p", "standard"),
                attempt(1, "r1"),
                events.SpilledTo("remote/b", "no_healthy_upstream", "ns/remote:b"),
            ),
            {
                "X-Request-Id": REQUEST_ID,
                "X-TokenFleet-Budget": "exceeded",
                "X-TokenFleet-Target": "remote/b",
                "X-TokenFleet-Spill-Reason": "no_healthy_upstream",
            },
            id="a-spilled-answer-drops-the-local-revision-and-fallback",
        ),
    ],
)
def test_headers_are_rendered_from_the_trace(
    added: tuple[Any, ...], headers: dict[str, str]
) -> None:
    assert trace(*added).headers() == headers
    halves = trace(*added[:1])
    halves.headers()  # rendered once midway: the rest is folded in after
    for event in added[1:]:
        halves.add(event)
    assert halves.headers() == headers
    assert halves.header("X-TokenFleet-Revision") == headers.get("X-TokenFleet-Revision", "")


def test_a_rendering_is_the_callers_to_change() -> None:
    t = trace(attempt(1, "r1"))
    t.headers()["X-TokenFleet-Model"] = "m"
    assert "X-TokenFleet-Model" not in t.headers()


def test_the_log_takes_each_events_fields_in_order() -> None:
    log: dict[str, Any] = {}
    for event in trace(
        events.Placed("ns/t", "chat", "ns/p", "standard"),
        events.Downgraded("chat", "small", "ns/q", "batch"),
        attempt(1, "r1"),
        events.Ended("served", "", status=200, ttft_ms=12.5, delivered=True),
        events.Settled(10, 5, 40),
    ):
        event.note(log)
    assert log == {
        "tenant": "ns/t",
        "model": "small",
        "pool": "ns/q",
        "class": "batch",
        "downgraded_from": "chat",
        "endpoint": "http://e1",
        "route_reason": "least_loaded",
        "attempts": 1,
        "ttft_ms": 12.5,
        "status": 200,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "reserved_tokens": 40,
    }


def test_where_a_request_stands_is_read_from_the_latest_events() -> None:
    assert trace().where() == (None, None, None, False)
    ended = events.Ended("served", "cache_hit")
    assert trace(ended, events.DELIVERED).where() == (None, None, ended, True)
    served = events.Ended("served", "", status=200, delivered=True)
    assert trace(served).where()[3] is True
    left = trace(events.AtRemote(None))
    assert left.where()[1] is None


@pytest.mark.parametrize("cls", ALL_EVENTS, ids=lambda c: c.__name__)
def test_every_event_that_adds_a_header_is_rendered(cls: Any) -> None:
    event = cls._make(["x"] * len(cls._fields))
    out = {
        "X-Request-Id": REQUEST_ID,
        "X-TokenFleet-Revision": "r",
        "X-TokenFleet-Fallback-From": "m",
    }
    before = dict(out)
    event.header(out)
    assert (out != before) == (cls in events.HEADING)
