"""Admission to a pool: start now, wait in a bounded per-class queue, or be refused at once.

Classes are served by priority, first come first served within a class. Each class may reserve a
share of the pool's concurrency that no other class can take (the critical class keeps room when
batch traffic floods in). A request that cannot start before its deadline or its class's
maximum queue age — judged from its queue position and the pool's observed service rate — is
refused at once instead of timing out later. Under pressure, lower classes starve first and
their waiters expire first: that is the shedding order. A class may instead accept a degraded
``max_tokens`` cap under pressure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from tokenfleet.api.pool import AdmissionClass
from tokenfleet.gateway.policy.rejections import Reason, Rejected


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClassPolicy:
    """One admission class, from InferencePool.spec.admission (times in seconds)."""

    name: str
    priority: int
    max_queue_depth: int
    max_queue_age: float
    default_deadline: float
    reserved_share: float = 0.0
    degraded_max_tokens: int | None = None

    @classmethod
    def of(cls, c: AdmissionClass) -> ClassPolicy:
        """The class an InferencePool's ``spec.admission.classes`` declares (ms → s, % → share)."""
        return cls(
            name=c.name,
            priority=c.priority,
            max_queue_depth=c.max_queue_depth,
            max_queue_age=c.max_queue_age_ms / 1000,
            default_deadline=c.default_deadline_ms / 1000,
            reserved_share=c.reserved_percent / 100,
            degraded_max_tokens=c.degraded_max_tokens,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A queued request."""

    ticket: int
    cls: str
    enqueued_at: float
    deadline: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolLoad:
    """The pool as admission sees it at one instant."""

    capacity: int  # requests the pool's ready endpoints take at once
    in_flight: Mapping[str, int]  # class → running requests
    queued: Mapping[str, int]  # class → waiting requests
    heads: Mapping[
        str, Waiting
    ]  # class → its oldest waiter (each class is first come first served)
    service_rate: float  # requests completed per second lately; 0 when unknown


@dataclasses.dataclass(frozen=True, slots=True)
class Start:
    """Run now."""


START = Start()  # the common answer, made once (it carries nothing)


@dataclasses.dataclass(frozen=True, slots=True)
class Enqueue:
    """Wait; ``expected_wait`` seconds is the estimate that admitted it."""

    expected_wait: float


Decision = Start | Enqueue | Rejected


def class_for(wanted: str, policies: Mapping[str, ClassPolicy]) -> str:
    """The tenant's class if the pool has it, else the pool's lowest-priority class."""
    if wanted in policies:
        return wanted
    return min(policies.values(), key=lambda c: c.priority).name


def _reserved(policies: Mapping[str, ClassPolicy], capacity: int) -> dict[str, int]:
    return {
        name: math.ceil(capacity * p.reserved_share)
        for name, p in policies.items()
        if p.reserved_share
    }


def can_start(policies: Mapping[str, ClassPolicy], load: PoolLoad, cls: str) -> bool:
    """A slot is free for ``cls``: one of its reserved slots, or a shared one."""
    reserved = _reserved(policies, load.capacity)
    if not reserved:  # the common case, on every request: all slots are shared
        return sum(load.in_flight.values()) < load.capacity
    if load.in_flight.get(cls, 0) < reserved.get(cls, 0):
        return True
    shared_capacity = load.capacity - sum(reserved.values())
    shared_used = sum(max(0, n - reserved.get(c, 0)) for c, n in load.in_flight.items())
    return shared_used < shared_capacity


def _ahead(policies: Mapping[str, ClassPolicy], load: PoolLoad, cls: str) -> int:
    priority = policies[cls].priority
    return sum(
        n for c, n in load.queued.items() if c in policies and policies[c].priority >= priority
    )


def admit(
    *, policies: Mapping[str, ClassPolicy], load: PoolLoad, cls: str, now: float, deadline: float
) -> Decision:
    """Decide for a new request of class ``cls`` that must start by ``deadline``."""
    policy = policies[cls]
    ahead = _ahead(policies, load, cls)
    if ahead == 0 and can_start(policies, load, cls):
        return START
    depth = load.queued.get(cls, 0)
    if depth >= policy.max_queue_depth:
        return Rejected(
            reason=Reason.QUEUE_FULL,
            message=f"the {cls} queue of this model is full ({depth} waiting); retry later",
            retry_after=_wait(ahead + 1, load.service_rate) or 1.0,
        )
    expected = _wait(ahead + 1, load.service_rate)
    latest = min(deadline, now + policy.max_queue_age)
    if expected is not None and now + expected > latest:
        return Rejected(
            reason=Reason.DEADLINE_UNMEETABLE,
            message=f"about {expected:.1f} s of queue ahead of this {cls} request; it would not "
            f"start within {latest - now:.1f} s",
            retry_after=expected,
        )
    return Enqueue(expected_wait=expected or 0.0)


def _wait(position: int, rate: float) -> float | None:
    return position / rate if rate > 0 else None


def expire(
    *, policies: Mapping[str, ClassPolicy], queued: Sequence[Waiting], now: float
) -> list[tuple[Waiting, Rejected]]:
    """Waiters past their class's maximum queue age or their deadline, and why they go."""
    gone = []
    for w in queued:
        policy = policies.get(w.cls)
        if policy is not None and now - w.enqueued_at >= policy.max_queue_age:
            gone.append(
                (
                    w,
                    Rejected(
                        reason=Reason.QUEUE_TIMEOUT,
                        retry_after=1.0,
                        message=f"waited {now - w.enqueued_at:.1f} s in the {w.cls} queue; shed",
                    ),
                )
            )
        elif now >= w.deadline:
            gone.append(
                (
                    w,
                    Rejected(
                        reason=Reason.DEADLINE_EXCEEDED,
                        message="the request's deadline passed while it waited",
                    ),
                )
            )
    return gone


def next_up(*, policies: Mapping[str, ClassPolicy], load: PoolLoad) -> Waiting | None:
    """The waiter to start now: highest priority first, oldest first within a class.

    Only each class's head matters: whether a slot is free depends on the class alone."""
    order = sorted(
        (w for c, w in load.heads.items() if c in policies and load.queued.get(c, 0) > 0),
        key=lambda w: (-policies[w.cls].priority, w.enqueued_at, w.ticket),
    )
    for w in order:
        if can_start(policies, load, w.cls):
            return w
        if policies[w.cls].reserved_share == 0:
            return None  # no shared slot: nobody below it can start either
    return None


def max_tokens(*, policy: ClassPolicy, load: PoolLoad, requested: int) -> int:
    """The class's degraded cap applies while the pool is saturated or has a queue."""
    pressured = any(load.queued.values()) or sum(load.in_flight.values()) >= load.capacity
    if pressured and policy.degraded_max_tokens is not None:
        return min(requested, policy.degraded_max_tokens)
    return requested


def ewma_rate(
    previous: float, completions: int, seconds: float, *, half_life: float = 10.0
) -> float:
    """Completions per second, exponentially weighted with a ``half_life`` in seconds."""
    if seconds <= 0:
        return previous
    if previous <= 0:
        # the first measurement starts the average: decaying from zero would make a fresh
        # gateway believe its pool is slow and refuse a first burst as unmeetable
        return completions / seconds
    weight = float(0.5 ** (seconds / half_life))
    return float(previous * weight + (completions / seconds) * (1 - weight))
