"""Admission to a pool: start now, wait in a bounded per-class queue, or be refused at once.

Classes are served by priority; within a class the tenants share fairly (the ledger's heads are
the fair choice, :mod:`~tokenfleet.gateway.policy.fairness`). Each class may reserve a
share of the pool's concurrency that no other class can take (the critical class keeps room when
batch traffic floods in).

SLO-aware: a class may promise a time to first token (``ttft_target``; the default pools give
critical and interactive 1 s). A request whose expected wait exceeds its patience — the
objective less the pool's expected prefill, within a quarter of the objective and the class's
maximum queue age (:meth:`ClassPolicy.patience`) — or the time to its deadline is refused at
once (a fast 429/503 with ``Retry-After``) instead of waiting to fail, and a waiter is shed once
its patience has passed — or at once when requests of a higher class queue ahead of it and put
its start out of reach (:func:`displaced`): an admitted request is one that can still meet its
objective, so an overload sheds the excess instead of making every request late. The expected
start is the token *work* queued ahead (prompt plus reserved output, :func:`work`), in units of
the average request's work, over the requests per second the slots sustain: a queue of long
prompts counts as longer than one of short ones, and an idle minute does not make a pool look
slow. Below the top class shedding is graded: as a request's expected wait nears the patience it
has (its objective less the expected prefill) it is refused with a probability rising from 0 at
``shed_from`` × that patience to 1 at it (the caller passes the uniform ``draw``), so the cliff
becomes a slope and lower classes give way first. Under pressure, lower classes starve first and
their waiters expire first: that is the shedding order. A class may instead accept a degraded
``max_tokens`` cap under pressure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from tokenfleet.api.pool import AdmissionClass
from tokenfleet.gateway.policy import fairness
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
    """Seconds to first token the class promises; 0 → none beyond ``max_queue_age``."""
    shed_from: float = 0.7
    """Graded shedding starts at this share of the patience (never for the top class)."""

    def patience(self, prefill: float) -> float:
        """Seconds a waiter may wait when a prefill takes ``prefill`` seconds: its age limit,
        and for a class with an objective the time its first token can still come in time.

        Never below :data:`MIN_PATIENCE` of the objective: on a pool whose prefill alone misses
        it, requests still queue briefly instead of every waiter being refused."""
        if self.ttft_target <= 0:
            return self.max_queue_age
        left = max(self.ttft_target - prefill, self.ttft_target * MIN_PATIENCE)
        return min(self.max_queue_age, left)

    @classmethod
    def of(cls, c: AdmissionClass, *, ttft_target_ms: int | None = -1) -> ClassPolicy:
        """The class an InferencePool's ``spec.admission.classes`` declares (ms → s, % → share);
        ``ttft_target_ms`` replaces its own (``InferencePoolSpec.ttft_targets_ms``: tightened
        to the pool's TTFT objective)."""
        target = c.ttft_target_ms if ttft_target_ms == -1 else ttft_target_ms
        return cls(
            name=c.name,
            priority=c.priority,
            max_queue_depth=c.max_queue_depth,
            max_queue_age=c.max_queue_age_ms / 1000,
            default_deadline=c.default_deadline_ms / 1000,
            reserved_share=c.reserved_percent / 100,
            degraded_max_tokens=c.degraded_max_tokens,
            ttft_target=(target or 0) / 1000,
        )


#: The least share of its objective a class's waiters may wait (:meth:`ClassPolicy.patience`).
MIN_PATIENCE = 0.25


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A queued request."""

    ticket: int
    cls: str
    enqueued_at: float
    deadline: float
    tenant: str = ""  # "" for every waiter: first come first served
    share: float = 1.0  # the tenant's weight in its class (Tenant.spec.share)
    work: float = 0.0  # counter units charged when it starts (fairness.work)
    cost: float = 1.0  # token work it brings (admission.work): what the queue estimate counts
    patience: float = -1.0  # seconds it may wait, fixed when it queued; < 0 → its class's now


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolLoad:
    """The pool as admission sees it at one instant."""

    capacity: int  # requests the pool's ready endpoints take at once
    in_flight: Mapping[str, int]  # class → running requests
    queued: Mapping[str, int]  # class → waiting requests
    heads: Mapping[str, Waiting]  # class → the waiter it starts next (the fair choice)
    service_rate: float  # requests completed per second lately; 0 when unknown
    waiting: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    """Class → tenant → waiting; a class missing here counts as one tenant (first come first
    served)."""
    holding: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    """Class → tenant → running."""
    seen: Mapping[str, Mapping[str, tuple[float, float]]] = dataclasses.field(default_factory=dict)
    """Class → tenant → (last arrival, share): who is present, for headroom."""
    queued_cost: Mapping[str, float] | None = None
    """Class → token work waiting (:func:`work`); None → each waiter counts as an average one."""
    mean_cost: float = 0.0
    """Token work of an average completed request lately; 0 → waits counted in requests."""
    prefill: float = 0.0
    """Seconds from a slot to the first token lately (the expected prefill); 0 when unknown."""
    counters: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """Class → tenant → virtual token counter (:mod:`~tokenfleet.gateway.policy.fairness`)."""
    waiting_work: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """Class → tenant → counter units its waiters will be charged (before its share)."""
    waiting_cost: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """Class → tenant → token work (:func:`work`) of its waiters."""


@dataclasses.dataclass(frozen=True, slots=True)
class Start:
    """Run now."""


START = Start()  # the common answer, made once (it carries nothing)


@dataclasses.dataclass(frozen=True, slots=True)
class Enqueue:
    """Wait; ``expected_wait`` seconds is the estimate that admitted it, ``patience`` the seconds
    it may wait before it is shed (:meth:`ClassPolicy.patience` now: the shell holds it to that)."""

    expected_wait: float
    patience: float = dataclasses.field(default=-1.0, compare=False)


Decision = Start | Enqueue | Rejected


def class_for(wanted: str, policies: Mapping[str, ClassPolicy]) -> str:
    """The tenant's class if the pool has it, else the pool's lowest-priority class."""
    if wanted in policies:
        return wanted
    return min(policies.values(), key=lambda c: c.priority).name


def _reserved(policies: Mapping[str, ClassPolicy], capacity: int) -> dict[str, int]:
    """Slots each class keeps for itself: its share rounded up (a class that reserves keeps at
    least one), but never all of them — at least one stays shared, or a process whose share of
    the pool is small (:func:`share`) would start nothing of the other classes."""
    reserved = {
        name: math.ceil(capacity * p.reserved_share)
        for name, p in policies.items()
        if p.reserved_share
    }
    while reserved and sum(reserved.values()) > max(0, capacity - 1):
        largest = max(reserved, key=lambda name: (reserved[name], name))
        reserved[largest] -= 1
        if not reserved[largest]:
            del reserved[largest]
    return reserved


def share(capacity: int, *, processes: int) -> int:
    """One gateway process's part of a pool's ``capacity`` when ``processes`` share it.

    Rounded down, so the processes together stay within the engines' slots, but at least one
    while the pool has any (a process that could start nothing would refuse every request);
    with more processes than slots the engines' own queues absorb the difference."""
    if capacity <= 0:
        return 0
    return max(1, capacity // max(1, processes))


def work(*, prompt_tokens: int, max_tokens: int) -> float:
    """A request's token work as admission counts it: prompt plus reserved output tokens
    (``max_tokens`` of all its sequences: a batch of prompts, n or best_of, is that much work).

    One unit per token either way: a prefill token is cheaper than a decoded one, but a
    decoding request also holds its slot, and admission waits for slots to free."""
    return float(max(1, prompt_tokens + max_tokens))


def can_start(
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    cls: str,
    *,
    tenant: str = "",
    now: float | None = None,
) -> bool:
    """A slot is free for ``cls``: one of its reserved slots, or a shared one beyond the
    headroom ``tenant`` leaves the other tenants of its class (:func:`fairness.headroom`, when
    ``now`` is given)."""
    seen = load.seen.get(cls) if now is not None and tenant else None
    reserved = _reserved(policies, load.capacity)
    room = (
        fairness.headroom(
            tenant=tenant,
            # the slots this class can use: the fair part is of those, not of the others'
            capacity=load.capacity - sum(n for c, n in reserved.items() if c != cls),
            holding=load.holding.get(cls, {}),
            seen=seen,
            now=now,
        )
        if seen is not None and len(seen) > 1 and now is not None  # alone: no headroom
        else 0
    )
    if not reserved:  # the common case, on every request: all slots are shared
        return sum(load.in_flight.values()) + room < load.capacity
    if load.in_flight.get(cls, 0) < reserved.get(cls, 0):
        return True
    shared_capacity = load.capacity - sum(reserved.values())
    shared_used = sum(max(0, n - reserved.get(c, 0)) for c, n in load.in_flight.items())
    return shared_used + room < shared_capacity


def _ahead(
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    cls: str,
    tenant: str,
    *,
    fair_work: float = 0.0,
    tenant_share: float = 1.0,
) -> tuple[int, float]:
    """Waiters that start before a new request of ``tenant`` — all of the higher classes and
    the other classes of its priority, and in its own class its fair position (by virtual
    finish, :func:`finish_position`, when the request's counter ``fair_work`` is given and the
    class keeps counters; else :func:`fair_position`) — and their token work counted in average
    requests (the queued work over ``load.mean_cost``; their number when that is unknown)."""
    if not load.heads:  # nobody waits anywhere: the common case, on every request
        return 0, 0.0
    priority = policies[cls].priority
    before = [
        c
        for c in load.queued
        if c != cls and c in policies and policies[c].priority >= priority and load.queued[c]
    ]
    by_tenant = load.waiting.get(cls)
    costs = load.queued_cost
    own = load.queued.get(cls, 0)
    own_cost: float | None = None  # token work of the class's waiters ahead, when known
    if by_tenant and tenant and fair_work > 0 and cls in load.counters:
        mine_f, own_cost = finish_position(
            waiting=by_tenant,
            waiting_work=load.waiting_work.get(cls, {}),
            waiting_cost=load.waiting_cost.get(cls, {}),
            counters=load.counters[cls],
            seen=load.seen.get(cls, {}),
            tenant=tenant,
            work=fair_work,
            share=tenant_share,
        )
        mine = math.ceil(mine_f)
    elif by_tenant:
        mine = fair_position(by_tenant, tenant)
    else:
        mine = own
    n = mine + sum(load.queued[c] for c in before)
    if costs is None or load.mean_cost <= 0:
        return n, float(n)
    work_ahead = sum(costs.get(c, 0.0) for c in before)
    if own_cost is not None:
        work_ahead += own_cost
    elif mine and own:
        # a fair position is a count; it brings the class's mean work per waiter
        work_ahead += mine * costs.get(cls, 0.0) / own
    return n, work_ahead / load.mean_cost


def finish_position(
    *,
    waiting: Mapping[str, int],
    waiting_work: Mapping[str, float],
    waiting_cost: Mapping[str, float],
    counters: Mapping[str, float],
    seen: Mapping[str, tuple[float, float]],
    tenant: str,
    work: float,
    share: float,
) -> tuple[float, float]:
    """Waiters of a class that start before a new request of ``tenant`` under fair queuing, and
    their token work: the order :func:`fairness.pick` will follow, estimated from the counters.

    The new request's virtual finish is its tenant's counter (an idle tenant's lifted to the
    lowest active one, :func:`fairness.lift`) plus its own waiters' work and its ``work``, over
    its ``share``. Another tenant's waiters, each charged its line's mean work over its share,
    go before it while their finishes are not later (a tie goes to the older ticket: theirs).
    So a light request beside a flood of long ones is next, not behind one of them: the flood's
    head finishes a long request's work later. With equal counters and equal work this is
    :func:`fair_position`'s round robin. O(tenants waiting)."""
    share = share if share > 0 else 1.0
    if tenant in counters:
        counter = counters[tenant]
    else:
        active = [counters[t] for t in waiting if t != tenant and t in counters]
        counter = min(active) if active else 0.0
    finish = counter + (waiting_work.get(tenant, 0.0) + work) / share
    count = float(waiting.get(tenant, 0))
    cost = waiting_cost.get(tenant, 0.0)
    for other, n in waiting.items():
        if other == tenant or n <= 0:
            continue
        their_share = seen[other][1] if other in seen else 1.0
        step = waiting_work.get(other, 0.0) / n / (their_share if their_share > 0 else 1.0)
        if step <= 0:
            k = n
        else:
            # a hair of slack, so a float sum that should tie still counts as a tie
            k = min(n, max(0, math.floor((finish - counters.get(other, 0.0)) / step + 1e-9)))
        count += k
        cost += k * waiting_cost.get(other, 0.0) / n
    return count, cost


def fair_position(waiting: Mapping[str, int], tenant: str) -> int:
    """Waiters of a class ahead of a new request of ``tenant`` under fair sharing, counted as
    round robin: its own waiters, and of each other tenant as many as will start before its
    new one (at most one more than its own). O(tenants waiting).

    Counters are left out on purpose: the estimate stays cheap and monotone, errs against the
    light tenant (every other tenant goes first in each round) and for the heavy one, whose
    waiters the class's age limit still sheds."""
    mine = waiting.get(tenant, 0)
    return mine + sum(min(n, mine + 1) for t, n in waiting.items() if t != tenant)


def _full(policy: ClassPolicy, load: PoolLoad, cls: str, tenant: str) -> bool:
    """The class's queue is full for ``tenant``: at its depth, and the tenant already holds its
    part of it (depth ÷ tenants waiting), so a flood fills the queue for itself only. A class
    queue may so hold up to about twice its depth, never more."""
    depth = load.queued.get(cls, 0)
    if depth < policy.max_queue_depth:
        return False
    by_tenant = load.waiting.get(cls)
    if not by_tenant:
        return True
    tenants = len(by_tenant) + (tenant not in by_tenant)
    return by_tenant.get(tenant, 0) >= math.ceil(policy.max_queue_depth / tenants)


def admit(
    *,
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    cls: str,
    now: float,
    deadline: float,
    tenant: str = "",
    draw: float = 1.0,
    fair_work: float = 0.0,
    tenant_share: float = 1.0,
    cost: float = 0.0,
) -> Decision:
    """Decide for a new request of ``tenant`` in class ``cls`` that must start by ``deadline``.

    ``draw``: a uniform number in [0, 1) from the caller's seeded source, for graded shedding
    (1.0 → never shed at random). ``fair_work`` (counter units, :func:`fairness.work`) and
    ``tenant_share`` place the request in its class's fair order (:func:`finish_position`);
    ``cost`` (token work, :func:`work`) scales the pool's expected prefill to this request's
    own (:func:`own_prefill`): a short prompt beside long ones keeps the patience its
    objective leaves it. Unknown (0): the tenant counted round robin, the pool's mean prefill."""
    policy = policies[cls]
    ahead, ahead_work = _ahead(
        policies, load, cls, tenant, fair_work=fair_work, tenant_share=tenant_share
    )
    if ahead == 0 and can_start(policies, load, cls, tenant=tenant, now=now):
        return START
    expected = _wait(ahead_work + 1, load.service_rate)
    if _full(policy, load, cls, tenant):
        depth = load.queued.get(cls, 0)
        return Rejected(
            reason=Reason.QUEUE_FULL,
            message=f"the {cls} queue of this model is full ({depth} waiting); retry later",
            retry_after=expected or 1.0,
        )
    patience = policy.patience(own_prefill(load, cost))
    if expected is None:  # a pool nothing completed on yet: no estimate, the age limit rules
        return Enqueue(expected_wait=0.0, patience=patience)
    budget = min(deadline - now, patience)
    if expected > budget:
        return Rejected(
            reason=Reason.DEADLINE_UNMEETABLE,
            message=f"about {expected:.1f} s of queue ahead of this {cls} request; it would not "
            f"start within {max(0.0, budget):.1f} s (its objective and deadline)",
            retry_after=max(expected, 0.1),
        )
    top = policy.priority >= max(p.priority for p in policies.values())
    p = shed_probability(policy, expected=expected, patience=budget, top=top)
    if draw < p:
        return Rejected(
            reason=Reason.SHED,
            message=f"the pool is near its limit for the {cls} class; shed ({p:.0%} of such "
            "requests are now)",
            retry_after=max(expected, 0.1),
        )
    return Enqueue(expected_wait=expected, patience=patience)


def own_prefill(load: PoolLoad, cost: float) -> float:
    """The prefill a request of ``cost`` token work can expect: the pool's mean prefill scaled
    by its work against the mean request's (prefill time grows with the prompt). Unknown
    (``cost`` 0, or no mean yet): the pool's mean."""
    if cost <= 0 or load.mean_cost <= 0:
        return load.prefill
    return load.prefill * cost / load.mean_cost


def shed_probability(policy: ClassPolicy, *, expected: float, patience: float, top: bool) -> float:
    """Graded shedding: 0 while the ``expected`` wait is below ``shed_from`` × the ``patience``
    it may have (its objective less the expected prefill, or its deadline), rising to 1 at it;
    never for the top class, which is refused only once its objective is out of reach."""
    if top or policy.shed_from >= 1 or patience <= 0:
        return 0.0
    ratio = expected / patience
    return min(1.0, max(0.0, (ratio - policy.shed_from) / (1 - policy.shed_from)))


def _wait(position: float, rate: float) -> float | None:
    return position / rate if rate > 0 else None


def expire(
    *,
    policies: Mapping[str, ClassPolicy],
    queued: Sequence[Waiting],
    now: float,
    prefill: float = 0.0,
) -> list[tuple[Waiting, Rejected]]:
    """Waiters past their class's patience (:meth:`ClassPolicy.patience` with the pool's
    ``prefill``) or their deadline, and why they go."""
    gone = []
    for w in queued:
        policy = policies.get(w.cls)
        limit = w.patience if w.patience >= 0 or policy is None else policy.patience(prefill)
        if policy is not None and now - w.enqueued_at >= limit:
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


def displaced(
    *,
    policies: Mapping[str, ClassPolicy],
    load: PoolLoad,
    fronts: Sequence[Waiting],
    by: str,
    now: float,
) -> list[tuple[Waiting, Rejected]]:
    """Waiters a request of class ``by`` pushed out of reach by queuing ahead of them: of the
    ``fronts`` (each tenant's oldest waiter of a class below ``by``), those whose *best* start —
    behind only the work queued in higher classes, its own line's earlier waiters being none —
    now falls past their patience or deadline. They are refused at once rather than held until
    the limit passes, so an overload's refusals stay fast when priorities reorder the queue.

    Conservative: fair order within the waiter's own class and equal-priority classes could only
    delay it further, so a waiter kept here may still time out, but none refused could have
    started in time at the pool's measured rate."""
    rate = load.service_rate
    top = policies.get(by)
    costs = load.queued_cost
    if top is None or rate <= 0:
        return []
    gone = []
    for w in fronts:
        policy = policies.get(w.cls)
        if policy is None or policy.priority >= top.priority:
            continue
        higher = [
            c
            for c, n in load.queued.items()
            if n and c in policies and policies[c].priority > policy.priority
        ]
        if costs is not None and load.mean_cost > 0:
            ahead = sum(costs.get(c, 0.0) for c in higher) / load.mean_cost
        else:
            ahead = float(sum(load.queued[c] for c in higher))
        limit = w.patience if w.patience >= 0 else policy.patience(load.prefill)
        budget = min(w.deadline, w.enqueued_at + limit) - now
        expected = (ahead + 1) / rate
        if expected > budget:
            gone.append(
                (
                    w,
                    Rejected(
                        reason=Reason.DEADLINE_UNMEETABLE,
                        message=f"higher-priority requests queued ahead of this {w.cls} request: "
                        f"about {expected:.1f} s before it could start, {max(0.0, budget):.1f} s "
                        "left of its objective and deadline",
                        retry_after=max(expected, 0.1),
                    ),
                )
            )
    return gone


def next_up(
    *, policies: Mapping[str, ClassPolicy], load: PoolLoad, now: float | None = None
) -> Waiting | None:
    """The waiter to start now: highest priority first, each class's head (its fair choice).

    Only each class's head matters: whether a slot is free depends on the class and the head's
    tenant alone. A head held back by its headroom (``now`` given) holds its class and those
    below back too: the free slot is kept for the class's other tenants."""
    order = sorted(
        (w for c, w in load.heads.items() if c in policies and load.queued.get(c, 0) > 0),
        key=lambda w: (-policies[w.cls].priority, w.enqueued_at, w.ticket),
    )
    for w in order:
        if can_start(policies, load, w.cls, tenant=w.tenant, now=now):
            return w
        if policies[w.cls].reserved_share == 0:
            return None  # no shared slot: nobody below it can start either
    return None


def max_tokens(*, policy: ClassPolicy, load: PoolLoad, requested: int, sequences: int = 1) -> int:
    """The max_tokens per sequence to run with: the class's degraded cap applies while the
    pool is saturated or has a queue, to all ``sequences`` of the request together (each gets
    its share, at least 1)."""
    pressured = any(load.queued.values()) or sum(load.in_flight.values()) >= load.capacity
    if pressured and policy.degraded_max_tokens is not None:
        return min(requested, max(1, policy.degraded_max_tokens // max(1, sequences)))
    return requested


def ewma_rate(
    previous: float, completions: float, seconds: float, *, half_life: float = 10.0
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
