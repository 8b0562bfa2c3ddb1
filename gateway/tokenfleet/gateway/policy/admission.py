"""Admission to a pool: start now, wait in a bounded per-class queue, or be refused at once.

Classes are served by priority, first come first served within a class. Each class may reserve a
share of the pool's concurrency that no other class can take (the critical class keeps room when
batch traffic floods in).

SLO-aware: each class has a time-to-first-token objective (``ttft_target``). A request whose
expected start plus its expected prefill would miss that objective, its deadline or its class's
maximum queue age is refused at once (a fast 429/503 with ``Retry-After``) instead of waiting
to fail: an admitted request is one that can still meet its objective, so an overload sheds the
excess instead of making every request late. The expected start is the *work* queued ahead (in
token units: prompt plus output tokens, :func:`work`) over the pool's measured work rate, so a
queue of long prompts counts as longer than one of short ones. Below the top class, shedding is
graded: as a request's expected TTFT approaches its objective it is refused with a probability
rising from 0 at ``shed_from`` × the objective to 1 at the objective (the caller passes the
uniform ``draw``), so the cliff becomes a slope and lower classes give way first. Under
pressure, lower classes starve first and their waiters expire first. A class may instead accept
a degraded ``max_tokens`` cap under pressure.
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
    ttft_target: float = 0.0
    """Seconds to first token the class promises; 0 → its ``max_queue_age`` (no tighter)."""
    shed_from: float = 0.7
    """Graded shedding starts at this share of the objective (not for the top class)."""

    @property
    def objective(self) -> float:
        """The TTFT objective admission holds this class to (seconds)."""
        return self.ttft_target if self.ttft_target > 0 else self.max_queue_age

    @property
    def queue_limit(self) -> float:
        """Longest a waiter may wait: past its objective its first token is late anyway."""
        return min(self.max_queue_age, self.objective)

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
            ttft_target=(c.ttft_target_ms or 0) / 1000,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A queued request."""

    ticket: int
    cls: str
    enqueued_at: float
    deadline: float
    work: float = 1.0
    """Token work the request brings (:func:`work`); 1 when the caller does not count work."""


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
    queued_work: Mapping[str, float] | None = None
    """Class → token work waiting; None → each waiter counts 1 (callers that count requests)."""
    work_rate: float = 0.0
    """Token work completed per second lately; 0 → fall back to ``service_rate``."""
    prefill: float = 0.0
    """Seconds from a slot to the first token lately (the expected prefill); 0 when unknown."""


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


def share(capacity: int, *, processes: int) -> int:
    """One gateway process's part of a pool's ``capacity`` when ``processes`` share it.

    Rounded down, so the processes together stay within the engines' slots, but at least one
    while the pool has any (a process that could start nothing would refuse every request);
    with more processes than slots the engines' own queues absorb the difference."""
    if capacity <= 0:
        return 0
    return max(1, capacity // max(1, processes))


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


def work(*, prompt_tokens: int, max_tokens: int) -> float:
    """A request's token work: what it costs the engine, counted as prompt plus output tokens.

    One unit per token either way: a token of prefill is cheaper than one of decode, but a
    decoding request also holds its slot, and admission is about slots freeing up."""
    return float(max(1, prompt_tokens + max_tokens))


def _ahead(policies: Mapping[str, ClassPolicy], load: PoolLoad, cls: str) -> tuple[int, float]:
    """Requests and token work queued at or above ``cls``'s priority (served before it)."""
    priority = policies[cls].priority
    counted = [c for c in load.queued if c in policies and policies[c].priority >= priority]
    n = sum(load.queued[c] for c in counted)
    if load.queued_work is None:
        return n, float(n)
    return n, sum(load.queued_work.get(c, 0.0) for c in counted)


def expected_wait(load: PoolLoad, *, ahead: int, ahead_work: float, own: float) -> float | None:
    """Seconds until a request with ``ahead`` requests (``ahead_work`` token work) queued
    before it starts; None while the pool's rate is unknown.

    In work when the pool measures it (``work_rate``), else in requests. The request starts once
    the work ahead of it and one more request's worth (the slot it takes) have finished."""
    if load.work_rate > 0 and load.queued_work is not None:
        per_request = load.work_rate / load.service_rate if load.service_rate > 0 else own
        return (ahead_work + per_request) / load.work_rate
    return _wait(ahead + 1, load.service_rate)


def shed_probability(policy: ClassPolicy, *, expected_ttft: float, top: bool) -> float:
    """Graded shedding: 0 below ``shed_from`` × the objective, rising to 1 at it (never for
    the top class, which is shed only once its objective is out of reach)."""
    if top or policy.shed_from >= 1:
        return 0.0
    ratio = expected_ttft / policy.objective
    return min(1.0, max(0.0, (ratio - policy.shed_from) / (1 - policy.shed_from)))


def admit(
    *,
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    cls: str,
    now: float,
    deadline: float,
    work: float = 1.0,
    draw: float = 1.0,
) -> Decision:
    """Decide for a new request of class ``cls`` that must start by ``deadline``.

    ``work``: the request's token work (:func:`work`); ``draw``: a uniform number in [0, 1)
    from the caller's seeded source, for graded shedding (1.0 → never shed at random)."""
    policy = policies[cls]
    ahead, ahead_work = _ahead(policies, load, cls)
    if ahead == 0 and can_start(policies, load, cls):
        return START
    depth = load.queued.get(cls, 0)
    expected = expected_wait(load, ahead=ahead, ahead_work=ahead_work, own=work)
    if depth >= policy.max_queue_depth:
        return Rejected(
            reason=Reason.QUEUE_FULL,
            message=f"the {cls} queue of this model is full ({depth} waiting); retry later",
            retry_after=expected or 1.0,
        )
    if expected is None:
        return Enqueue(expected_wait=0.0)
    budget = min(deadline - now, _budget(policy, load))
    return _feasible(policies, load, cls=cls, expected=expected, budget=budget, draw=draw)


def _budget(policy: ClassPolicy, load: PoolLoad) -> float:
    """Seconds a request of ``policy`` may wait: its age limit, and its objective less prefill."""
    return min(policy.max_queue_age, policy.objective - load.prefill)


def _feasible(
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    *,
    cls: str,
    expected: float,
    budget: float,
    draw: float,
) -> Decision:
    policy = policies[cls]
    if expected > budget:
        return Rejected(
            reason=Reason.DEADLINE_UNMEETABLE,
            message=f"about {expected:.1f} s of queue ahead of this {cls} request; it would not "
            f"start within {max(0.0, budget):.1f} s (its objective and deadline)",
            retry_after=max(expected, 0.1),
        )
    top = policy.priority >= max(p.priority for p in policies.values())
    p = shed_probability(policy, expected_ttft=expected + load.prefill, top=top)
    if draw < p:
        return Rejected(
            reason=Reason.SHED,
            message=f"the pool is near its limit for the {cls} class; shed ({p:.0%} of such "
            "requests are)",
            retry_after=max(expected, 0.1),
        )
    return Enqueue(expected_wait=expected)


def _wait(position: float, rate: float) -> float | None:
    return position / rate if rate > 0 else None


def expire(
    *, policies: Mapping[str, ClassPolicy], queued: Sequence[Waiting], now: float
) -> list[tuple[Waiting, Rejected]]:
    """Waiters past their class's maximum queue age or their deadline, and why they go."""
    gone = []
    for w in queued:
        policy = policies.get(w.cls)
        if policy is not None and now - w.enqueued_at >= policy.queue_limit:
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
    previous: float, completions: float, seconds: float, *, half_life: float = 10.0
) -> float:
    """Completions (or work) per second, exponentially weighted with a ``half_life`` in s."""
    if seconds <= 0:
        return previous
    if previous <= 0:
        # the first measurement starts the average: decaying from zero would make a fresh
        # gateway believe its pool is slow and refuse a first burst as unmeetable
        return completions / seconds
    weight = float(0.5 ** (seconds / half_life))
    return float(previous * weight + (completions / seconds) * (1 - weight))


#: Weight of a new sample in the expected prefill: ~10 requests of memory, so it follows a
#: change of prompt mix or cache hit ratio within a second at a few requests per second.
PREFILL_WEIGHT = 0.1


def ewma_sample(previous: float, sample: float, *, weight: float = PREFILL_WEIGHT) -> float:
    """An average of per-request samples (the first one starts it)."""
    if previous <= 0:
        return sample
    return previous + weight * (sample - previous)
