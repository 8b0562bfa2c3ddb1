"""Retries within a budget, outlier ejection, jittered backoff (pure: state in, state out).

**Retry budget.** Retries amplify an outage: if every request is retried twice, a failing fleet
sees three times the traffic exactly when it can least take it. So retries are allowed only
while they stay under ``ratio`` of the requests over a sliding window (Finagle's and Envoy's
retry budgets), plus a small floor so that a quiet gateway can still retry a lone failure.
Under total outage the amplification is capped at ``1 + ratio`` (plus the floor).

**Outlier ejection.** An endpoint with ``consecutive`` failures in a row, or an error rate of at
least ``error_rate`` over ``min_requests`` or more in a window, is ejected for
``base_ejection × 2^(ejections − 1)`` (capped); after that one probe request is let through
(half-open): success readmits it, failure ejects it again for longer. The ejection count is
forgiven after ``forgive_after`` seconds without a new ejection.

Times are monotonic seconds passed in by the caller.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from tokenfleet.gateway.policy.routing import Rng


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPolicy:
    ratio: float = 0.1
    """Retries allowed per request over the window (0.1: at most 10 % extra load)."""
    window: float = 10.0
    """Seconds the budget looks back."""
    min_retries: int = 3
    """Retries allowed per window whatever the traffic, so a quiet gateway can still retry."""
    buckets: int = 10
    """Window resolution: it slides by window / buckets."""


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """(bucket index, requests, retries) for the buckets of the current window."""

    buckets: tuple[tuple[int, int, int], ...] = ()


def _slide(budget: Budget, now: float, policy: BudgetPolicy) -> tuple[int, list[list[int]]]:
    width = policy.window / policy.buckets
    index = int(now // width)
    kept = [list(b) for b in budget.buckets if b[0] > index - policy.buckets]
    if not kept or kept[-1][0] != index:
        kept.append([index, 0, 0])
    return index, kept


def count_request(budget: Budget, *, now: float, policy: BudgetPolicy) -> Budget:
    """A new request arrived (retries are not requests)."""
    _, kept = _slide(budget, now, policy)
    kept[-1][1] += 1
    return Budget(tuple((b[0], b[1], b[2]) for b in kept))


def try_retry(budget: Budget, *, now: float, policy: BudgetPolicy) -> Budget | None:
    """The budget with one more retry spent, or None when it is exhausted."""
    _, kept = _slide(budget, now, policy)
    requests = sum(b[1] for b in kept)
    retries = sum(b[2] for b in kept)
    if retries + 1 > policy.ratio * requests + policy.min_retries:
        return None
    kept[-1][2] += 1
    return Budget(tuple((b[0], b[1], b[2]) for b in kept))


def backoff(attempt: int, *, rng: Rng, base: float = 0.025, cap: float = 0.5) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): full jitter, exponential, capped."""
    return rng.uniform(0.0, min(cap, base * 2 ** (attempt - 1)))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EjectionPolicy:
    consecutive: int = 5
    """Failures in a row that eject an endpoint."""
    error_rate: float = 0.5
    """Share of failed requests in a window that ejects an endpoint..."""
    min_requests: int = 10
    """...once it saw at least this many requests in the window."""
    window: float = 10.0
    base_ejection: float = 5.0
    """Seconds of the first ejection; each further one doubles it."""
    max_ejection: float = 300.0
    forgive_after: float = 300.0
    """Seconds without a new ejection after which the count starts again from zero."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """What the gateway knows about one endpoint's recent answers."""

    consecutive: int = 0
    window_start: float = 0.0
    ok: int = 0
    failed: int = 0
    ejections: int = 0
    ejected_until: float | None = None
    last_ejection_end: float | None = None
    probe_since: float | None = None
    """When the half-open probe was sent; None when no probe is in flight."""


HEALTHY = Health()


class Event(enum.StrEnum):
    NONE = ""
    EJECTED = "ejected"
    READMITTED = "readmitted"


def observe(
    health: Health, *, ok: bool, now: float, policy: EjectionPolicy
) -> tuple[Health, Event]:
    """An answer (``ok``) or failure (connect error, 5xx) from the endpoint."""
    if health.probe_since is not None:
        if not ok:
            return _eject(health, now=now, policy=policy), Event.EJECTED
        readmitted = Health(
            ejections=health.ejections, last_ejection_end=health.ejected_until, window_start=now
        )
        return readmitted, Event.READMITTED
    if health.ejected_until is not None and now < health.ejected_until:
        return health, Event.NONE  # a late answer from before the ejection
    fresh = now - health.window_start > policy.window
    seen_ok = (0 if fresh else health.ok) + ok
    seen_failed = (0 if fresh else health.failed) + (not ok)
    updated = dataclasses.replace(
        health,
        consecutive=0 if ok else health.consecutive + 1,
        window_start=now if fresh else health.window_start,
        ok=seen_ok,
        failed=seen_failed,
        ejected_until=None,
    )
    total = seen_ok + seen_failed
    if not ok and (
        updated.consecutive >= policy.consecutive
        or (total >= policy.min_requests and seen_failed / total >= policy.error_rate)
    ):
        return _eject(updated, now=now, policy=policy), Event.EJECTED
    return updated, Event.NONE


def _eject(health: Health, *, now: float, policy: EjectionPolicy) -> Health:
    last = health.ejected_until or health.last_ejection_end
    count = 1 if last is not None and now - last > policy.forgive_after else health.ejections + 1
    period = min(policy.max_ejection, policy.base_ejection * 2 ** (count - 1))
    return Health(ejections=count, ejected_until=now + period, window_start=now)


#: A half-open probe unanswered this long (its client left, say) no longer blocks the endpoint.
PROBE_TIMEOUT = 60.0


def ejected(healths: Mapping[str, Health], *, now: float) -> frozenset[str]:
    """Endpoints to skip now: ejected and not yet due, or with a half-open probe in flight."""
    return frozenset(
        url
        for url, h in healths.items()
        if (h.probe_since is not None and now - h.probe_since < PROBE_TIMEOUT)
        or (h.ejected_until is not None and now < h.ejected_until)
    )


def chosen(health: Health, *, now: float) -> Health:
    """The endpoint was picked: past its ejection, this request is its half-open probe."""
    due = health.ejected_until is not None and now >= health.ejected_until
    stuck = health.probe_since is not None and now - health.probe_since >= PROBE_TIMEOUT
    if (due and health.probe_since is None) or stuck:
        return dataclasses.replace(health, probe_since=now)
    return health
