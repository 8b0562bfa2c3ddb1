"""SLO-aware admission as tables: token-work wait estimates, the TTFT objective, graded
shedding, the per-process share of a pool's slots, and the ledger's work bookkeeping."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api.pool import Admission, AdmissionClass
from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.policy.admission import ClassPolicy, Enqueue, PoolLoad, Start, Waiting
from tokenfleet.gateway.policy.ledger import Ledger
from tokenfleet.gateway.policy.rejections import Reason, Rejected


def cls(name: str, priority: int, **kw: Any) -> ClassPolicy:
    base: dict[str, Any] = dict(max_queue_depth=100, max_queue_age=5.0, default_deadline=30.0)
    return ClassPolicy(name=name, priority=priority, **{**base, **kw})


POLICIES = {
    "critical": cls("critical", 300, ttft_target=1.0),
    "interactive": cls("interactive", 200, ttft_target=1.0),
    "batch": cls("batch", 100, max_queue_age=30.0),
}


def full(
    *,
    queued_work: dict[str, float],
    queued: dict[str, int] | None = None,
    work_rate: float = 1000.0,
    rate: float = 1.0,
    prefill: float = 0.0,
) -> PoolLoad:
    """A saturated 4-slot pool with ``queued_work`` waiting (one waiter per class unless said)."""
    counts = queued if queued is not None else {c: 1 for c in queued_work}
    heads = {
        c: Waiting(ticket=i, cls=c, enqueued_at=0.0, deadline=99.0) for i, c in enumerate(counts)
    }
    return PoolLoad(
        capacity=4,
        in_flight={"interactive": 4},
        queued=counts,
        heads=heads,
        service_rate=rate,
        queued_work=queued_work,
        work_rate=work_rate,
        prefill=prefill,
    )


def outcome(d: admission.Decision) -> object:
    return d.reason if isinstance(d, Rejected) else d


@pytest.mark.parametrize(
    ("load", "c", "work", "draw", "expected"),
    [
        # 1000 work/s, 1 request/s → 1000 work per request: the slot it needs costs 1 s...
        pytest.param(
            full(queued_work={}), "interactive", 500, 1.0, Enqueue(1.0), id="one-slot-ahead"
        ),
        # ...and 400 work of short prompts ahead wait less than 4,000 of long ones
        pytest.param(
            full(queued_work={}, rate=10.0), "interactive", 50, 1.0, Enqueue(0.1), id="short-mix"
        ),
        pytest.param(
            full(queued_work={"interactive": 400}, rate=10.0),
            "interactive",
            50,
            1.0,
            Enqueue(0.5),
            id="work-ahead-counts",
        ),
        pytest.param(
            full(queued_work={"interactive": 4000}, rate=10.0),
            "interactive",
            50,
            1.0,
            Reason.DEADLINE_UNMEETABLE,
            id="objective-out-of-reach",
        ),
        # the expected prefill is part of the objective: 0.5 s wait + 0.6 s prefill > 1 s
        pytest.param(
            full(queued_work={"interactive": 400}, rate=10.0, prefill=0.6),
            "interactive",
            50,
            1.0,
            Reason.DEADLINE_UNMEETABLE,
            id="prefill-counts",
        ),
        # batch's objective is its 30 s age: the same queue is fine for it...
        pytest.param(
            full(queued_work={"batch": 4000}, rate=10.0),
            "batch",
            50,
            1.0,
            Enqueue(4.1),
            id="batch-long-objective",
        ),
        # ...work of a lower class queued is not ahead of a higher one
        pytest.param(
            full(queued_work={"batch": 4000}, rate=10.0),
            "interactive",
            50,
            1.0,
            Enqueue(0.1),
            id="lower-class-not-ahead",
        ),
        # graded: interactive (not top) at 0.85 of its objective is shed with p = 0.5
        pytest.param(
            full(queued_work={"interactive": 750}, rate=10.0),
            "interactive",
            50,
            0.4,
            Reason.SHED,
            id="graded-shed-low-draw",
        ),
        pytest.param(
            full(queued_work={"interactive": 750}, rate=10.0),
            "interactive",
            50,
            0.6,
            Enqueue(0.85),
            id="graded-admit-high-draw",
        ),
        # the top class is never shed at random, only once its objective is out of reach
        pytest.param(
            full(queued_work={"critical": 750}, rate=10.0),
            "critical",
            50,
            0.0,
            Enqueue(0.85),
            id="top-class-not-graded",
        ),
        # unmeasured work rate: the request count estimate (2 ahead / 1 per s)
        pytest.param(
            full(queued_work={"interactive": 10}, work_rate=0.0, rate=1.0),
            "interactive",
            50,
            1.0,
            Reason.DEADLINE_UNMEETABLE,
            id="falls-back-to-requests",
        ),
    ],
)
def test_admit_slo(load: PoolLoad, c: str, work: float, draw: float, expected: object) -> None:
    got = admission.admit(
        policies=POLICIES, load=load, cls=c, now=0.0, deadline=99.0, work=work, draw=draw
    )
    if isinstance(expected, Enqueue):
        assert isinstance(got, Enqueue)
        assert got.expected_wait == pytest.approx(expected.expected_wait)
    else:
        assert outcome(got) == expected


def test_refusals_carry_retry_after() -> None:
    got = admission.admit(
        policies=POLICIES,
        load=full(queued_work={"interactive": 4000}, rate=10.0),
        cls="interactive",
        now=0.0,
        deadline=99.0,
        work=50,
    )
    assert isinstance(got, Rejected) and got.retry_after is not None and got.retry_after >= 0.1


def test_idle_pool_starts_whatever_the_objective() -> None:
    idle = PoolLoad(capacity=4, in_flight={}, queued={}, heads={}, service_rate=0.0)
    assert (
        admission.admit(policies=POLICIES, load=idle, cls="batch", now=0.0, deadline=1.0, draw=0.0)
        == Start()
    )


@pytest.mark.parametrize(
    ("expected_ttft", "top", "p"),
    [
        (0.5, False, 0.0),
        (0.7, False, 0.0),
        (0.85, False, 0.5),
        (1.0, False, 1.0),
        (3.0, False, 1.0),
        (0.99, True, 0.0),
    ],
)
def test_shed_probability(expected_ttft: float, top: bool, p: float) -> None:
    policy = cls("x", 1, ttft_target=1.0)
    assert admission.shed_probability(
        policy, expected_ttft=expected_ttft, top=top
    ) == pytest.approx(p)


@pytest.mark.parametrize(
    ("policy", "objective", "limit"),
    [
        (cls("a", 1), 5.0, 5.0),
        (cls("a", 1, ttft_target=1.0), 1.0, 1.0),
        (cls("a", 1, ttft_target=9.0), 9.0, 5.0),
    ],
)
def test_objective_and_queue_limit(policy: ClassPolicy, objective: float, limit: float) -> None:
    assert (policy.objective, policy.queue_limit) == (objective, limit)


def test_waiters_past_their_objective_are_shed() -> None:
    waiting = [Waiting(ticket=1, cls="interactive", enqueued_at=0.0, deadline=99.0)]
    assert admission.expire(policies=POLICIES, queued=waiting, now=0.9) == []
    gone = admission.expire(policies=POLICIES, queued=waiting, now=1.0)
    assert [r.reason for _, r in gone] == [Reason.QUEUE_TIMEOUT]


def test_default_classes_carry_objectives() -> None:
    got = {c.name: ClassPolicy.of(c).objective for c in Admission().classes}
    assert got == {"critical": 1.0, "interactive": 1.0, "batch": 30.0}
    assert (
        ClassPolicy.of(AdmissionClass(name="x", priority=1, ttft_target_ms=250)).objective == 0.25
    )


@pytest.mark.parametrize(
    ("capacity", "processes", "share"),
    [(64, 1, 64), (64, 4, 16), (10, 4, 2), (3, 4, 1), (0, 4, 0), (8, 0, 8)],
)
def test_share(capacity: int, processes: int, share: int) -> None:
    assert admission.share(capacity, processes=processes) == share


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "work"), [(2000, 32, 2032.0), (0, 0, 1.0), (10, 5, 15.0)]
)
def test_work(prompt: int, max_tokens: int, work: float) -> None:
    assert admission.work(prompt_tokens=prompt, max_tokens=max_tokens) == work


def test_ledger_counts_work() -> None:
    ledger: Ledger[str] = Ledger(["interactive"])
    a = ledger.enqueue("a", cls="interactive", enqueued_at=0.0, deadline=9.0, work=300.0)
    ledger.enqueue("b", cls="interactive", enqueued_at=0.0, deadline=9.0, work=200.0)
    assert ledger.queued_work["interactive"] == 500.0
    ledger.remove(a)
    assert ledger.queued_work["interactive"] == 200.0
    ledger.start("interactive")
    ledger.release("interactive", work=300.0, prefill=0.2)
    ledger.release("interactive", work=100.0, prefill=None, completed=False)
    ledger.measure(1.0)
    load = ledger.load(4)
    assert (load.work_rate, load.service_rate, load.prefill) == (300.0, 1.0, 0.2)
    assert load.queued_work == {"interactive": 200.0}


def test_ledger_prefill_is_an_average() -> None:
    ledger: Ledger[str] = Ledger()
    for seconds in (1.0, 0.0, 0.0):
        ledger.release("x", prefill=seconds)
    assert ledger.prefill == pytest.approx(0.81)
