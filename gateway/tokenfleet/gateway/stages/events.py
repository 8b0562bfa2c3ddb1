"""What the stages decided about one request, as typed events, and the trace they go in.

The trace is append-only: a stage adds what it decided (the route that directed it, the cache's
answer, the budget's verdict, a downgrade, a fallback, each attempt's endpoint and revision, the
remote it spilled to) and never changes what another added. Each event says what it shows in
the response's headers and in the access log; the headers are rendered from the trace when an
answer starts, the log line and the request counter once, at the end (:mod:`.report`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol

from tokenfleet.accounting import cost
from tokenfleet.api.route import Remote
from tokenfleet.gateway import budget_store, proxy
from tokenfleet.gateway.policy import spill as spill_rules
from tokenfleet.gateway.route_catalog import RouteEntry
from tokenfleet.gateway.targets import Target

ID_HEADER = "X-Request-Id"
#: Pins a request to one revision (testing a canary); the response names the revision served.
REVISION_HEADER = "X-TokenFleet-Revision"
FALLBACK_HEADER = "X-TokenFleet-Fallback-From"
ROUTE_HEADER = "X-TokenFleet-Route"
CACHE_HEADER = "X-TokenFleet-Cache"
#: Set when the tenant's budget is spent and its action served the request anyway.
BUDGET_HEADER = "X-TokenFleet-Budget"
#: The model the request asked for, when a spent Downgrade budget served another.
DOWNGRADE_HEADER = "X-TokenFleet-Downgraded-From"
TARGET_HEADER = "X-TokenFleet-Target"
SPILL_REASON_HEADER = "X-TokenFleet-Spill-Reason"
#: Response headers of the local attempt that do not describe a spilled answer.
LOCAL_ONLY = (REVISION_HEADER, FALLBACK_HEADER)


class Event(Protocol):
    """What a stage decided, as it shows in the response's headers and the access log."""

    def header(self, out: dict[str, str]) -> None: ...

    def note(self, log: dict[str, Any]) -> None: ...


class Authenticated(NamedTuple):
    """Who asks (before intake placed it: a refusal's log still says)."""

    tenant: str

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        log["tenant"] = self.tenant


class Directed(NamedTuple):
    """A ModelRoute chose the served model (its rule or default, for the header)."""

    header_value: str

    def header(self, out: dict[str, str]) -> None:
        out[ROUTE_HEADER] = self.header_value

    def note(self, log: dict[str, Any]) -> None:
        log["model_route"] = self.header_value


class Asked(NamedTuple):
    """The model the request is for, when intake refused to place it."""

    model: str

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        log["model"] = self.model


class Placed(NamedTuple):
    """Intake placed it: for whom, the model (a route's choice, if a route directed it), and
    the pool and class it goes to."""

    tenant: str
    model: str
    pool: str
    cls: str

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        log["tenant"] = self.tenant
        log["model"] = self.model
        log["pool"] = self.pool
        log["class"] = self.cls


class Cached(NamedTuple):
    """The response cache's answer (a request it does not concern has none)."""

    hit: bool

    def header(self, out: dict[str, str]) -> None:
        out[CACHE_HEADER] = "hit" if self.hit else "miss"

    def note(self, log: dict[str, Any]) -> None:
        pass


class Replayed(NamedTuple):
    """A hit is the answer: the revision that generated it."""

    revision: str

    def header(self, out: dict[str, str]) -> None:
        if self.revision:
            out[REVISION_HEADER] = self.revision

    def note(self, log: dict[str, Any]) -> None:
        pass


class BudgetExceeded(NamedTuple):
    """The tenant's budget is spent and its action served the request anyway."""

    message: str

    def header(self, out: dict[str, str]) -> None:
        out[BUDGET_HEADER] = "exceeded"

    def note(self, log: dict[str, Any]) -> None:
        log["budget"] = self.message


class Downgraded(NamedTuple):
    """A spent Downgrade budget re-placed the request on a cheaper model (its pool, its class)."""

    asked: str
    model: str
    pool: str
    cls: str

    def header(self, out: dict[str, str]) -> None:
        out[DOWNGRADE_HEADER] = self.asked

    def note(self, log: dict[str, Any]) -> None:
        log["downgraded_from"] = self.asked
        log["model"] = self.model
        log["pool"] = self.pool
        log["class"] = self.cls


class FellBack(NamedTuple):
    """The model could not take it: its fallback runs it (in this pool and class)."""

    model: str
    why: str
    pool: str
    cls: str

    def header(self, out: dict[str, str]) -> None:
        out[FALLBACK_HEADER] = self.model

    def note(self, log: dict[str, Any]) -> None:
        log["fallback_from"] = self.model
        log["fallback_reason"] = self.why
        log["pool"] = self.pool
        log["class"] = self.cls


class Started(NamedTuple):
    """A slot in its pool's queue was granted: where it runs."""

    target: Target

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        pass


class Attempted(NamedTuple):
    """An attempt is on its way to an endpoint (logged even if the client leaves mid-way)."""

    endpoint: str
    why: str  # the routing reason
    attempt: int  # 1 for the first
    revision: str  # the endpoint's ("" when it has none)
    prefix_blocks: int = 0  # the prompt's leading blocks believed held there (routing's belief)
    prefix_total: int = 0  # the prompt's blocks (0: routing read no prefix)

    def header(self, out: dict[str, str]) -> None:
        if self.revision:
            out[REVISION_HEADER] = self.revision

    def note(self, log: dict[str, Any]) -> None:
        log["endpoint"] = self.endpoint
        log["route_reason"] = self.why
        log["attempts"] = self.attempt


@dataclasses.dataclass(slots=True, kw_only=True)
class Spilled:
    """A request sent to a ModelRoute's remote: what the answer, the metrics and settlement
    need. It exists from the moment the request goes out, so a client that leaves mid-way is
    settled as the remote's (its spend hold included), not as the local pool's."""

    entry: RouteEntry
    remote: Remote
    hold: budget_store.Held | None
    asked: str  # the model name sent to the remote
    outcome: proxy.Outcome = dataclasses.field(default_factory=proxy.Outcome)

    @property
    def label(self) -> str:
        """Names the remote as a target: X-TokenFleet-Target, the access log, metrics."""
        return f"remote/{self.remote.name}"

    @property
    def model(self) -> str:
        """The model that answered (another gateway says which), else the one asked for."""
        return self.outcome.served_by or self.asked

    @property
    def pool(self) -> str:
        """The usage ledger's pool key of what it served: by target."""
        prefix = f"{self.entry.namespace}/" if self.entry.namespace else ""
        return f"{prefix}remote:{self.remote.name}"

    @property
    def rate(self) -> cost.Rate:
        return spill_rules.rate(self.remote, self.entry.currency)


class AtRemote(NamedTuple):
    """A remote has the request (``spilled`` None: that try failed before answering)."""

    spilled: Spilled | None

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        pass


class SpilledTo(NamedTuple):
    """A remote answered: where, why, and under which pool key its usage is kept."""

    target: str  # remote/<name>
    reason: str  # the local refusal's code
    pool: str

    def header(self, out: dict[str, str]) -> None:
        for local in LOCAL_ONLY:
            out.pop(local, None)
        out[TARGET_HEADER] = self.target
        out[SPILL_REASON_HEADER] = self.reason

    def note(self, log: dict[str, Any]) -> None:
        log["target"] = self.target
        log["spill_reason"] = self.reason
        log["pool"] = self.pool


class SpillTried(NamedTuple):
    """No remote answered: what happened at each."""

    summary: str

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        log["spill_tried"] = self.summary


class Ended(NamedTuple):
    """How it ended (outcome, reason), as the counter and the log say; ``status`` and
    ``ttft_ms`` when an answer came, ``delivered`` once the whole of it went out."""

    outcome: str
    reason: str
    status: int | None = None
    ttft_ms: float | None = None
    delivered: bool = False

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        if self.ttft_ms is not None:
            log["ttft_ms"] = self.ttft_ms
        if self.status is not None:
            log["status"] = self.status


class Delivered(NamedTuple):
    """The whole answer went out: what comes after cannot undo it."""

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        pass


class Settled(NamedTuple):
    """The usage it was charged (and the model a remote answered with)."""

    prompt: int
    completion: int
    reserved: int
    model: str = ""

    def header(self, out: dict[str, str]) -> None:
        pass

    def note(self, log: dict[str, Any]) -> None:
        if self.model:
            log["model"] = self.model
        log["prompt_tokens"] = self.prompt
        log["completion_tokens"] = self.completion
        log["reserved_tokens"] = self.reserved


DELIVERED = Delivered()


#: The events that show in the response's headers.
HEADING: frozenset[type[Event]] = frozenset(
    {Directed, Cached, Replayed, BudgetExceeded, Downgraded, FellBack, Attempted, SpilledTo}
)


class Trace(list[Event]):
    """What the stages decided about one request, in order; append-only (:meth:`add`)."""

    __slots__ = ("_folded", "_rendered")

    #: A stage adds what it decided (list.append itself: this runs several times a request).
    add = list.append

    def __init__(self, request_id: str) -> None:
        super().__init__()
        self._rendered = {ID_HEADER: request_id}
        self._folded = 0  # events rendered into _rendered so far

    def headers(self) -> dict[str, str]:
        """The response's headers as the trace has them now (a copy, the caller's to add to).
        Each event is folded in once: a later rendering takes only what came since."""
        return dict(self._render())

    def header(self, name: str) -> str:
        """One response header as the trace has it now ("" when it has none)."""
        return self._render().get(name, "")

    def _render(self) -> dict[str, str]:
        rendered, folded = self._rendered, self._folded
        if folded < len(self):
            for event in self[folded:]:
                if type(event) in HEADING:  # the rest add nothing: no call for them
                    event.header(rendered)
            self._folded = len(self)
        return rendered

    def where(self) -> tuple[Target | None, Spilled | None, Ended | None, bool]:
        """Where the request stands, in one pass from the latest event back: the target whose
        queue gave it a slot (None: it never started), the remote that has it, how it ended,
        and whether the whole answer went out."""
        served: Target | None = None
        spilled: Spilled | None = None
        ended: Ended | None = None
        delivered = started = remote = False
        for event in reversed(self):
            kind = type(event)
            if kind is Ended:
                if ended is None:
                    ended = event  # type: ignore[assignment]
                    delivered = delivered or event.delivered  # type: ignore[attr-defined]
            elif kind is Started and not started:
                started, served = True, event.target  # type: ignore[attr-defined]
            elif kind is AtRemote and not remote:
                remote, spilled = True, event.spilled  # type: ignore[attr-defined]
            elif kind is Delivered:
                delivered = True
        return served, spilled, ended, delivered
