"""SLO-aware admission as tables: token-work wait estimates, the TTFT objective, graded
shedding, the per-process share of a pool's slots, and the ledger's work bookkeeping."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api.pool import Admission, AdmissionClass, InferencePoolSpec
from tokenfleet.gateway import catalog
from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.policy.admission import ClassPolicy, Enqueue, PoolLoad, Start, Waiting
from tokenfleet.gateway.policy.queue_book import QueueBook
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
    queued_cost: dict[str, float],
    queued: dict[str, int] | None = None,
    mean_cost: float = 100.0,
    rate: float = 10.0,
    prefill: float = 0.0,
    waiting: dict[str, dict[str, int]] | None = None,
) -> PoolLoad:
    """A saturated 4-slot pool serving ``rate`` average requests (``mean_cost`` token work each)
    a second, with ``queued_cost`` waiting (one waiter per class unless said)."""
    counts = queued if queued is not None else {c: 1 for c in queued_cost}
    heads = {
        c: Waiting(ticket=i, cls=c, enqueued_at=0.0, deadline=99.0) for i, c in enumerate(counts)
    }
    return PoolLoad(
        capacity=4,
        in_flight={"interactive": 4},
        queued=counts,
        heads=heads,
        service_rate=rate,
        queued_cost=queued_cost,
        mean_cost=mean_cost,
        prefill=prefill,
        waiting=waiting or {},
    )


def outcome(d: admission.Decision) -> object:
    return d.reason if isinstance(d, Rejected) else d


@pytest.mark.parametrize(
    ("load", "c", "draw", "tenant", "expected"),
    [
        # nobody waits, every slot busy: the slot it needs frees in 1 / 10 s
        pytest.param(full(queued_cost={}), "interactive", 1.0, "", Enqueue(0.1), id="next-slot"),
        # 400 work ahead are 4 average requests: (4 + 1) / 10 s
        pytest.param(
            full(queued_cost={"interactive": 400}),
            "interactive",
            1.0,
            "",
            Enqueue(0.5),
            id="work-ahead-counts",
        ),
        # four short prompts ahead weigh one average request, not four
        pytest.param(
            full(queued_cost={"interactive": 100}, queued={"interactive": 4}),
            "interactive",
            1.0,
            "",
            Enqueue(0.2),
            id="short-prompts-weigh-less",
        ),
        pytest.param(
            full(queued_cost={"interactive": 4000}),
            "interactive",
            1.0,
            "",
            Reason.DEADLINE_UNMEETABLE,
            id="objective-out-of-reach",
        ),
        # the expected prefill comes out of the objective: 0.5 s wait > 1 s − 0.6 s
        pytest.param(
            full(queued_cost={"interactive": 400}, prefill=0.6),
            "interactive",
            1.0,
            "",
            Reason.DEADLINE_UNMEETABLE,
            id="prefill-counts",
        ),
        # batch's objective is its 30 s age: the same queue is fine for it...
        pytest.param(
            full(queued_cost={"batch": 4000}),
            "batch",
            1.0,
            "",
            Enqueue(4.1),
            id="batch-long-objective",
        ),
        # ...and work of a lower class queued is not ahead of a higher one
        pytest.param(
            full(queued_cost={"batch": 4000}),
            "interactive",
            1.0,
            "",
            Enqueue(0.1),
            id="lower-class-not-ahead",
        ),
        # graded: interactive (not top) at 0.85 of its objective is shed with p = 0.5
        pytest.param(
            full(queued_cost={"interactive": 750}),
            "interactive",
            0.4,
            "",
            Reason.SHED,
            id="graded-shed-low-draw",
        ),
        pytest.param(
            full(queued_cost={"interactive": 750}),
            "interactive",
            0.6,
            "",
            Enqueue(0.85),
            id="graded-admit-high-draw",
        ),
        # the top class is never shed at random, only once its objective is out of reach
        pytest.param(
            full(queued_cost={"critical": 750}),
            "critical",
            0.0,
            "",
            Enqueue(0.85),
            id="top-class-not-graded",
        ),
        # fair queuing: a new tenant is behind one of each other tenant's waiters (2 of 4)
        pytest.param(
            full(
                queued_cost={"interactive": 400},
                queued={"interactive": 4},
                waiting={"interactive": {"a": 2, "b": 2}},
            ),
            "interactive",
            1.0,
            "c",
            Enqueue(0.3),
            id="fair-position-in-work",
        ),
        # no average request measured yet: waiters count as requests (1 ahead + 1) / 1 per s
        pytest.param(
            full(queued_cost={"interactive": 10}, mean_cost=0.0, rate=1.0),
            "interactive",
            1.0,
            "",
            Reason.DEADLINE_UNMEETABLE,
            id="falls-back-to-requests",
        ),
        # a pool nothing completed on: no estimate, the request queues (its age limit rules)
        pytest.param(
            full(queued_cost={"interactive": 4000}, rate=0.0),
            "interactive",
            0.0,
            "",
            Enqueue(0.0),
            id="cold-pool-queues",
        ),
    ],
)
def test_admit_slo(load: PoolLoad, c: str, draw: float, tenant: str, expected: object) -> None:
    got = admission.admit(
        policies=POLICIES, load=load, cls=c, now=0.0, deadline=99.0, draw=draw, tenant=tenant
    )
    if isinstance(expected, Enqueue):
        assert isinstance(got, Enqueue), got
        assert got.expected_wait == pytest.approx(expected.expected_wait)
        assert got.patience == pytest.approx(POLICIES[c].patience(load.prefill))  # for the shell
    else:
        assert outcome(got) == expected


def test_refusals_carry_retry_after() -> None:
    got = admission.admit(
        policies=POLICIES,
        load=full(queued_cost={"interactive": 4000}),
        cls="interactive",
        now=0.0,
        deadline=99.0,
    )
    assert isinstance(got, Rejected) and got.retry_after is not None and got.retry_after >= 0.1


def test_idle_pool_starts_whatever_the_objective() -> None:
    idle = PoolLoad(capacity=4, in_flight={}, queued={}, heads={}, service_rate=0.0)
    assert (
        admission.admit(policies=POLICIES, load=idle, cls="batch", now=0.0, deadline=1.0, draw=0.0)
        == Start()
    )


@pytest.mark.parametrize(
    ("expected", "patience", "top", "p"),
    [
        (0.5, 1.0, False, 0.0),
        (0.7, 1.0, False, 0.0),
        (0.85, 1.0, False, 0.5),
        (1.0, 1.0, False, 1.0),
        (3.0, 1.0, False, 1.0),
        (0.99, 1.0, True, 0.0),  # the top class: never at random
        (0.425, 0.5, False, 0.5),  # a prefill took half the objective: graded over the rest
        (0.1, 0.0, False, 0.0),  # no patience left: the budget check refuses, not the draw
    ],
)
def test_shed_probability(expected: float, patience: float, top: bool, p: float) -> None:
    policy = cls("x", 1, ttft_target=1.0)
    got = admission.shed_probability(policy, expected=expected, patience=patience, top=top)
    assert got == pytest.approx(p)


def test_reservations_leave_a_shared_slot() -> None:
    """A process with a small share of the pool (4 processes, 1 or 2 slots each) keeps a slot
    every class can use: rounding reservations up must not starve the other classes."""
    policies = {**POLICIES, "critical": cls("critical", 300, reserved_share=0.1)}
    for capacity, reserved in ((1, {}), (2, {"critical": 1}), (64, {"critical": 7})):
        assert admission._reserved(policies, capacity) == reserved
        load = PoolLoad(capacity=capacity, in_flight={}, queued={}, heads={}, service_rate=0.0)
        assert admission.can_start(policies, load, "batch")


@pytest.mark.parametrize(
    ("policy", "prefill", "patience"),
    [
        (cls("a", 1), 0.3, 5.0),  # no objective: the age limit, whatever the prefill
        (cls("a", 1, ttft_target=1.0), 0.0, 1.0),
        (cls("a", 1, ttft_target=1.0), 0.3, 0.7),  # its first token must still come in time
        (cls("a", 1, ttft_target=1.0), 0.9, 0.25),  # never below a quarter of the objective
        (cls("a", 1, ttft_target=9.0), 0.0, 5.0),  # nor above the age limit
    ],
)
def test_patience(policy: ClassPolicy, prefill: float, patience: float) -> None:
    assert policy.patience(prefill) == pytest.approx(patience)


def test_waiters_past_their_objective_are_shed() -> None:
    waiting = [Waiting(ticket=1, cls="interactive", enqueued_at=0.0, deadline=99.0)]
    assert admission.expire(policies=POLICIES, queued=waiting, now=0.9) == []
    gone = admission.expire(policies=POLICIES, queued=waiting, now=1.0)
    assert [r.reason for _, r in gone] == [Reason.QUEUE_TIMEOUT]
    # with a 0.4 s prefill its first token is late from 0.6 s on
    assert admission.expire(policies=POLICIES, queued=waiting, now=0.6, prefill=0.4) != []


def test_default_classes_carry_objectives() -> None:
    got = {c.name: ClassPolicy.of(c).patience(0.0) for c in Admission().classes}
    assert got == {"critical": 1.0, "interactive": 1.0, "batch": 30.0}
    assert (
        ClassPolicy.of(AdmissionClass(name="x", priority=1, ttft_target_ms=250)).patience(0.0)
        == 0.25
    )


def test_a_pool_ttft_objective_is_the_patience_of_the_classes_it_is_measured_on() -> None:
    """The pool's ttftObjective tightens the classes whose queueing drives scaling (critical
    and interactive by default, not batch); a class with a tighter target of its own keeps it;
    the gateway's catalog builds its classes this way."""
    spec = InferencePoolSpec.model_validate(
        {"autoscaling": {"ttftObjective": {"percentile": 95, "milliseconds": 600}}}
    )
    assert spec.ttft_targets_ms() == {"critical": 600, "interactive": 600, "batch": None}
    pool = catalog.pool_of("ns/chat", spec)
    assert {n: round(c.patience(0.0), 3) for n, c in pool.classes.items()} == {
        "critical": 0.6,
        "interactive": 0.6,
        "batch": 30.0,
    }
    tight = InferencePoolSpec.model_validate(
        {
            "autoscaling": {"ttftObjective": {"milliseconds": 600}, "queueAgeClasses": ["fast"]},
            "admission": {
                "classes": [
                    {"name": "fast", "priority": 2, "ttftTargetMs": 300},
                    {"name": "slow", "priority": 1},
                ]
            },
        }
    )
    assert tight.ttft_targets_ms() == {"fast": 300, "slow": None}
    assert InferencePoolSpec().ttft_targets_ms() == {
        "critical": 1000,
        "interactive": 1000,
        "batch": None,
    }


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
    ledger: QueueBook[str] = QueueBook(["interactive"])
    a = ledger.enqueue("a", cls="interactive", enqueued_at=0.0, deadline=9.0, cost=300.0)
    ledger.enqueue("b", cls="interactive", enqueued_at=0.0, deadline=9.0, cost=200.0)
    assert ledger.queued_cost["interactive"] == 500.0
    ledger.remove(a)
    assert ledger.queued_cost["interactive"] == 200.0
    ledger.start("interactive")
    ledger.release("interactive", held_seconds=2.0, cost=300.0, prefill=0.2)
    ledger.release("interactive", cost=100.0, prefill=None, completed=False)  # not counted
    load = ledger.load(4)
    assert (load.mean_cost, load.service_rate, load.prefill) == (300.0, 2.0, 0.2)
    assert load.queued_cost == {"interactive": 200.0}


def test_ledger_averages_are_weighted() -> None:
    ledger: QueueBook[str] = QueueBook()
    for seconds in (1.0, 0.0, 0.0):
        ledger.release("x", prefill=seconds)
    assert ledger.prefill == pytest.approx(0.81)
    for cost in (100.0, 200.0):
        ledger.release("x", held_seconds=1.0, cost=cost)
    assert ledger.mean_cost == pytest.approx(120.0)
