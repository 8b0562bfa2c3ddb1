"""A kept request's spans, rendered from its timeline once it has ended.

The stages run one after another and each event of the timeline ends the step before it, so
one walk over the events gives every step its span (times are the events' own)::

    POST /v1/chat/completions   SERVER   the whole request: tenant, model, class, outcome
    ├─ intake                            authenticate, validate, place (tenant, model, pool)
    ├─ cache.lookup                      the response cache's answer (when it concerns it)
    ├─ quota                             the tenant's token quota
    ├─ budget                            its budget (exceeded, downgraded)
    ├─ queue                             the pool's queue for the class: the wait for a slot
    ├─ route                             the routing decision: endpoint, revision, adapter,
    │                                    why, the prefix blocks it believes held there
    ├─ upstream               CLIENT     one attempt at an engine (its span id is the
    │  ├─ first_byte                     traceparent the engine got); failed: the cause
    │  └─ relay                          first byte to the end of the answer
    ├─ route, upstream …                 each retry: backoff and a new choice, a new attempt
    ├─ spill                             a ModelRoute's remotes after a local refusal
    │  └─ spill.remote        CLIENT     one remote's try (first_byte and relay under it)
    ├─ cache.replay                      a cache hit replayed
    └─ settle                            the usage charged (tokens)

A refusal ends the span of the step that refused (error: its reason); the walk's steps are
named by :data:`NEXT`. No attribute holds a key or any text of the prompt or the answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import NamedTuple

from tokenfleet.gateway.policy import trace_context
from tokenfleet.gateway.policy.trace_context import Attribute, Kind, Span
from tokenfleet.gateway.stages import context, events, timeline

#: The step a mark ends → the step that follows it.
NEXT = {"intake": "quota", "quota": "budget", "budget": "queue", "queue": "route"}
#: The steps a refusal can end (their span is closed with the refusal's reason).
STEPS = frozenset({*NEXT, "route"})


class Ending(NamedTuple):
    """How the request ended, as the request counter says, and why its trace is kept."""

    outcome: str
    reason: str
    status: int | None
    kept: trace_context.Kept


@dataclasses.dataclass(slots=True)
class _Open:
    """A span under way (a step's spans are closed at once; attempts and spills stay open)."""

    name: str
    span_id: bytes
    parent_id: bytes
    start: float
    kind: Kind = Kind.INTERNAL
    attributes: dict[str, Attribute] = dataclasses.field(default_factory=dict)
    end: float = 0.0


class _Walk:
    """One walk over a timeline: the steps' spans, in order."""

    def __init__(
        self, trace: timeline.Timeline, *, started: float, new_id: Callable[[], bytes]
    ) -> None:
        self.trace, self.new_id, self.started = trace, new_id, started
        self.closed: list[tuple[_Open, str]] = []  # (span, error)
        self.root: dict[str, Attribute] = {}
        self.since, self.step = started, "intake"
        self.pending: dict[str, Attribute] = {}  # attributes of the step under way
        self.attempt: _Open | None = None  # an upstream attempt or remote try under way
        self.answered: _Open | None = None  # the attempt (or remote try) that answered
        self.spill: _Open | None = None
        self.adapter = ""

    def close_step(
        self,
        name: str,
        at: float,
        attrs: Mapping[str, Attribute] | None = None,
        *,
        error: str = "",
    ) -> None:
        """The step under way ends at ``at`` (its span from the previous event's time)."""
        span = _Open(name, self.new_id(), self.trace.root_id, self.since, end=at)
        span.attributes.update(self.pending)
        span.attributes.update(attrs or {})
        self.closed.append((span, error))
        self.pending, self.since = {}, at

    def open_out(self, name: str, index: int, at: float, parent: bytes) -> _Open:
        span_id = self.trace.outbound.get(index) or self.new_id()
        self.attempt = _Open(name, span_id, parent, at, kind=Kind.CLIENT)
        return self.attempt

    def close_out(self, at: float, *, error: str = "") -> _Open:
        span, self.attempt = self.attempt, None
        assert span is not None
        span.end, self.since = at, at
        self.closed.append((span, error))
        return span

    def event(self, index: int, event: events.Event, at: float) -> None:
        """One event: the step it ends, or what it says of the request or the step."""
        match event:
            case events.Placed():
                _placed(self, event, at)
            case events.Cached():
                self.close_step("cache.lookup", at, {"tokenfleet.cache.hit": event.hit})
            case timeline.Mark():
                self.close_step(event.stage, at)
                self.step = NEXT.get(event.stage, self.step)
            case events.Started():
                _started(self, event, at)
            case events.Attempted():
                _attempted(self, index, event, at)
            case timeline.AttemptFailed():
                _attempt_failed(self, event, at)
            case events.AtRemote():
                _at_remote(self, index, event, at)
            case events.SpilledTo() | events.SpillTried():
                _spill_ended(self, event, at)
            case events.Ended():
                _ended(self, event, at)
            case events.Delivered() if self.step == "cache.replay":
                self.close_step("cache.replay", at)
                self.step = "settle"
            case events.Settled():
                _settled(self, event, at)
            case _:
                self.note(event)

    def note(self, event: events.Event) -> None:
        """An event that ends no step: who asks, what for, what the step under way decided."""
        match event:
            case events.Authenticated():
                self.root["tokenfleet.tenant"] = event.tenant
            case events.Directed():
                self.root["tokenfleet.model_route"] = event.header_value
            case events.Asked():
                self.root["gen_ai.request.model"] = event.model
            case events.BudgetExceeded():
                self.pending["tokenfleet.budget.exceeded"] = True
            case events.Downgraded():
                self.pending["tokenfleet.downgraded_from"] = event.asked
            case events.FellBack():
                self.pending["tokenfleet.fallback_from"] = event.model
                self.pending["tokenfleet.fallback_reason"] = event.why


def _placed(w: _Walk, e: events.Placed, at: float) -> None:
    w.root.update(
        {
            "tokenfleet.tenant": e.tenant,
            "gen_ai.request.model": e.model,
            "tokenfleet.pool": e.pool,
            "tokenfleet.class": e.cls,
        }
    )
    w.close_step("intake", at)
    w.step = "quota"


def _started(w: _Walk, e: events.Started, at: float) -> None:
    target = e.target
    adapter = target.model.adapter
    w.adapter = adapter.name if adapter is not None else ""
    w.root.update({"tokenfleet.pool": target.pool.key, "tokenfleet.class": target.cls})
    w.close_step("queue", at, {"tokenfleet.pool": target.pool.key, "tokenfleet.class": target.cls})
    w.step = "route"


def _attempted(w: _Walk, index: int, e: events.Attempted, at: float) -> None:
    decided: dict[str, Attribute] = {
        "tokenfleet.endpoint": e.endpoint,
        "tokenfleet.revision": e.revision,
        "tokenfleet.route.reason": e.why,
        "tokenfleet.attempt": e.attempt,
        "tokenfleet.prefix.blocks": e.prefix_total,
        "tokenfleet.prefix.hit_blocks": e.prefix_blocks,
    }
    if w.adapter:
        decided["tokenfleet.adapter"] = w.adapter
    w.close_step("route", at, decided)
    span = w.open_out("upstream", index, at, w.trace.root_id)
    span.attributes.update(
        {
            "server.address": e.endpoint,
            "tokenfleet.revision": e.revision,
            "tokenfleet.attempt": e.attempt,
        }
    )
    w.root["tokenfleet.revision"] = e.revision
    w.step = "attempt"


def _attempt_failed(w: _Walk, e: timeline.AttemptFailed, at: float) -> None:
    if w.attempt is not None:
        w.attempt.attributes["http.response.status_code"] = e.status
        w.close_out(at, error=e.cause)
    w.step = "route"  # the backoff and the next choice


def _at_remote(w: _Walk, index: int, e: events.AtRemote, at: float) -> None:
    if e.spilled is None:  # that remote failed before answering
        if w.attempt is not None:
            w.close_out(at, error="remote failed")
        return
    if w.spill is None:
        if w.step == "queue":  # the local queue refused it: that step ends here
            w.close_step("queue", at, error="refused")
        w.spill = _Open("spill", w.new_id(), w.trace.root_id, w.since)
    span = w.open_out("spill.remote", index, at, w.spill.span_id)
    span.attributes["tokenfleet.remote"] = e.spilled.remote.name
    w.step = "spill"


def _spill_ended(w: _Walk, e: events.SpilledTo | events.SpillTried, at: float) -> None:
    if isinstance(e, events.SpillTried):
        _close_spill(w, at, error="no remote answered", tried=e.summary)
        return
    if w.attempt is not None:
        w.answered = w.close_out(at)
    w.root.update({"tokenfleet.target": e.target, "tokenfleet.spill.reason": e.reason})
    _close_spill(w, at, error="", target=e.target)


def _close_spill(w: _Walk, at: float, *, error: str, **attrs: str) -> None:
    spill, w.spill = w.spill, None
    if spill is None:
        return
    spill.end, w.since = at, at
    spill.attributes.update({f"tokenfleet.spill.{k}": v for k, v in attrs.items()})
    w.closed.append((spill, error))


def _ended(w: _Walk, e: events.Ended, at: float) -> None:
    if e.status is not None:
        w.root["http.response.status_code"] = e.status
    if w.attempt is not None:
        if e.status is not None:
            w.attempt.attributes["http.response.status_code"] = e.status
        failed = e.outcome not in ("served", "cancelled")
        w.answered = w.close_out(at, error=e.reason if failed else "")
    elif e.outcome == "served" and w.answered is None:  # a cache hit, replayed next
        w.since, w.step = at, "cache.replay"
        return
    elif w.answered is None and w.step in STEPS:  # the step under way refused it
        w.close_step(w.step, at, error=e.reason)
    if w.answered is not None and e.ttft_ms is not None:
        _first_byte(w, w.answered, e.ttft_ms)
    w.since, w.step = at, "settle"


def _first_byte(w: _Walk, out: _Open, ttft_ms: float) -> None:
    """The answering attempt's wait for its first byte, and the relay after it (the first
    byte's time is the request's TTFT, in ms from its start)."""
    first = min(max(out.start, w.started + ttft_ms / 1000), out.end)
    for name, start, end in (("first_byte", out.start, first), ("relay", first, out.end)):
        w.closed.append((_Open(name, w.new_id(), out.span_id, start, end=end), ""))


def _settled(w: _Walk, e: events.Settled, at: float) -> None:
    if w.attempt is not None:  # the client left mid-attempt: settled at once
        w.close_out(at, error="cancelled")
    tokens: dict[str, Attribute] = {
        "gen_ai.usage.input_tokens": e.prompt,
        "gen_ai.usage.output_tokens": e.completion,
        "tokenfleet.reserved_tokens": e.reserved,
    }
    w.root.update(tokens)
    w.close_step("settle", at, tokens)
    w.step = ""


def render(
    trace: timeline.Timeline,
    *,
    identity: context.Identity,
    end: float,
    ending: Ending,
    to_unix: float,
    new_id: Callable[[], bytes],
) -> list[Span]:
    """Every span of the ended request, root first (``end``: when it ended, monotonic;
    ``to_unix``: seconds to add to a monotonic time for Unix time)."""
    w = _Walk(trace, started=identity.started, new_id=new_id)
    for index, (event, at) in enumerate(zip(trace, trace.times, strict=True)):
        w.event(index, event, at)
    failed = "" if ending.outcome == "served" else (ending.reason or ending.outcome)
    if w.attempt is not None:  # the client left (or the gateway stopped) mid-attempt
        w.close_out(end, error=failed)
    if w.spill is not None:
        _close_spill(w, end, error=failed)
    if w.step in STEPS:  # refused by the step under way (intake and quota add no Ended)
        w.close_step(w.step, end, error=failed)
    attributes: dict[str, Attribute] = {
        "http.request.method": "POST",
        "url.path": identity.path,
        "tokenfleet.request_id": identity.id,
        "tokenfleet.outcome": ending.outcome,
        "tokenfleet.trace.kept": ending.kept.value,
        **w.root,
    }
    if ending.reason:
        attributes["tokenfleet.reason"] = ending.reason
    if ending.status is not None:
        attributes["http.response.status_code"] = ending.status
    root = _Open(f"POST {identity.path}", trace.root_id, b"", identity.started, Kind.SERVER)
    root.attributes, root.end = attributes, end
    error = failed if ending.kept is trace_context.Kept.ERROR else ""
    parent = trace.parent.span_id if trace.parent is not None else None

    def span(o: _Open, error: str, parent_id: bytes | None) -> Span:
        return Span(
            name=o.name,
            trace_id=trace.trace_id,
            span_id=o.span_id,
            parent_id=parent_id,
            start_ns=int((o.start + to_unix) * 1e9),
            end_ns=int((o.end + to_unix) * 1e9),
            kind=o.kind,
            attributes=o.attributes,
            error=error,
        )

    return [span(root, error, parent)] + [span(o, err, o.parent_id) for o, err in w.closed]
