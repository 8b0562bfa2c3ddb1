"""A request's trace with the moment each event was added, and the W3C trace context it
carries to the engines: what its spans are rendered from (:mod:`.spans`).

With tracing off a request's trace is a plain :class:`~.events.Trace`, whose ``add`` is
``list.append``: nothing here runs. With tracing on it is a :class:`Timeline`, whose ``add``
also notes ``time.monotonic()`` — the clock of the request's identity and of its first byte.
The stages run one after another, so each event ends the step before it: a stage's span runs
from the event before to its own. The stages whose decision shows in no header or log line
mark their end here (:data:`QUOTA_DONE`, :data:`BUDGET_DONE`, :class:`AttemptFailed`), so
that their spans have an end too; on a plain trace those marks are inert entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from tokenfleet.gateway.policy import trace_context
from tokenfleet.gateway.stages import events


class Mark(NamedTuple):
    """A stage that decided nothing a header or the log shows has ended (its span's end)."""

    stage: str

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        pass


QUOTA_DONE = Mark("quota")
BUDGET_DONE = Mark("budget")


class AttemptFailed(NamedTuple):
    """An attempt failed before any byte reached the client (it may be tried elsewhere):
    ``cause`` as the retry metric names it, ``status`` the refusal it would be."""

    cause: str
    status: int

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        pass


def _outbound(event: events.Event) -> bool:
    """An event after which the request goes out: an attempt at an engine, or at a remote."""
    kind = type(event)
    return kind is events.Attempted or (
        kind is events.AtRemote and event.spilled is not None  # type: ignore[attr-defined]
    )


class Timeline(events.Trace):
    """A trace whose events carry the moment they were added, with the request's trace id,
    its root span's id, its caller's context (if any) and the head-sampling draw."""

    __slots__ = ("_new_id", "outbound", "parent", "root_id", "sampled", "times", "trace_id")

    def __init__(
        self,
        request_id: str,
        *,
        trace_id: bytes,
        root_id: bytes,
        parent: trace_context.Parent | None,
        sampled: bool,
        new_id: Callable[[], bytes],
    ) -> None:
        """``new_id``: a fresh 8-byte span id (the tracer's random source)."""
        super().__init__(request_id)
        self.times: list[float] = []  # monotonic seconds, one per event
        self.trace_id, self.root_id, self.parent = trace_id, root_id, parent
        self.sampled = sampled
        self.outbound: dict[int, bytes] = {}  # event index → the span id engines were told
        self._new_id = new_id

    def add(self, event: events.Event) -> None:
        self.append(event)
        self.times.append(time.monotonic())

    def traceparent(self) -> str:
        """The header for the request going out now: its parent is the span of the latest
        attempt (or remote try), which keeps that id when the spans are rendered."""
        index = next((i for i in range(len(self) - 1, -1, -1) if _outbound(self[i])), -1)
        span = self.outbound.get(index)
        if span is None:
            span = self.outbound[index] = self._new_id()
        return trace_context.traceparent(self.trace_id, span, sampled=self.sampled)


def propagate(trace: events.Trace, headers: dict[str, str]) -> None:
    """Add the W3C trace context to an outgoing request's ``headers`` when ``trace`` is timed
    (tracing is on); nothing otherwise."""
    if type(trace) is Timeline:
        headers[trace_context.HEADER] = trace.traceparent()
        if trace.parent is not None and trace.parent.state:
            headers[trace_context.STATE_HEADER] = trace.parent.state
