"""Admission as tables: start, queue or refuse; reserved shares; deadline feasibility; expiry;
who starts next; the degraded max_tokens cap; the service-rate estimate."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.policy.admission import ClassPolicy, Enqueue, PoolLoad, Start, Waiting
from tokenfleet.gateway.policy.rejections import Reason, Rejected


def cls(name: str, priority: int, **kw: Any) -> ClassPolicy:
    base: dict[str, Any] = dict(max_queue_depth=3, max_queue_age=5.0, default_deadline=30.0)
    return ClassPolicy(name=name, priority=priority, **{**base, **kw})


POLICIES = {
    "critical": cls("critical", 300, reserved_share=0.25),
    "interactive": cls("interactive", 200),
    "batch": cls("batch", 100, max_queue_age=2.0, degraded_max_tokens=64),
}


def w(ticket: int, c: str, at: float = 0.0, deadline: float = 100.0) -> Waiting:
    return Waiting(ticket=ticket, cls=c, enqueued_at=at, deadline=deadline)


def load(
    capacity: int = 4, rate: float = 0.0, queued: list[Waiting] | None = None, **in_flight: int
) -> PoolLoad:
    waiting = queued or []
    heads: dict[str, Waiting] = {}
    for x in sorted(waiting, key=lambda x: (x.enqueued_at, x.ticket), reverse=True):
        heads[x.cls] = x
    counts = {c: sum(1 for x in waiting if x.cls == c) for c in heads}
    return PoolLoad(
        capacity=capacity, in_flight=in_flight, queued=counts, heads=heads, service_rate=rate
    )


@pytest.mark.parametrize(
    ("the_load", "c", "deadline", "expected"),
    [
        pytest.param(load(), "batch", 100, Start(), id="idle-starts"),
        pytest.param(load(interactive=2), "interactive", 100, Start(), id="shared-slot-left"),
        pytest.param(
            load(interactive=3), "interactive", 100, Enqueue(0.0), id="shared-full-queues"
        ),
        pytest.param(load(interactive=3), "critical", 100, Start(), id="critical-uses-its-reserve"),
        pytest.param(
            load(interactive=3, critical=1), "critical", 100, Enqueue(0.0), id="reserve-used-up"
        ),
        pytest.param(
            load(queued=[w(1, "interactive")]),
            "interactive",
            100,
            Enqueue(0.0),
            id="no-overtaking-same-class",
        ),
        pytest.param(
            load(queued=[w(1, "batch")]), "interactive", 100, Start(), id="overtakes-lower-class"
        ),
        pytest.param(
            load(interactive=3, rate=2.0), "interactive", 100, Enqueue(0.5), id="estimate-from-rate"
        ),
        pytest.param(
            load(interactive=3, rate=0.1, queued=[w(1, "interactive")]),
            "interactive",
            10,
            Reason.DEADLINE_UNMEETABLE,
            id="deadline-unmeetable",
        ),
        pytest.param(
            load(interactive=3, rate=0.4),
            "batch",
            100,
            Reason.DEADLINE_UNMEETABLE,
            id="beyond-max-queue-age",
        ),
        pytest.param(
            load(interactive=3, queued=[w(i, "batch") for i in range(3)]),
            "batch",
            100,
            Reason.QUEUE_FULL,
            id="queue-full",
        ),
        pytest.param(load(capacity=0), "interactive", 100, Enqueue(0.0), id="no-capacity-waits"),
    ],
)
def test_admit(the_load: PoolLoad, c: str, deadline: float, expected: Any) -> None:
    got = admission.admit(policies=POLICIES, load=the_load, cls=c, now=0.0, deadline=deadline)
    if isinstance(expected, Reason):
        assert isinstance(got, Rejected) and got.reason == expected
        assert got.retry_after is not None and got.retry_after > 0
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("the_load", "expected"),
    [
        pytest.param(
            load(interactive=3, queued=[w(1, "batch"), w(2, "interactive", at=1)]),
            None,
            id="full-nobody-starts",
        ),
        pytest.param(
            load(interactive=2, queued=[w(1, "batch"), w(2, "interactive", at=1)]),
            2,
            id="higher-class-first",
        ),
        pytest.param(
            load(interactive=2, queued=[w(1, "interactive", at=2), w(2, "interactive", at=1)]),
            2,
            id="oldest-first",
        ),
        pytest.param(
            load(interactive=3, queued=[w(1, "interactive"), w(2, "critical", at=5)]),
            2,
            id="critical-into-reserve",
        ),
        pytest.param(
            load(interactive=3, critical=1, queued=[w(1, "critical")]), None, id="all-used"
        ),
        pytest.param(load(queued=[]), None, id="empty"),
    ],
)
def test_next_up(the_load: PoolLoad, expected: int | None) -> None:
    got = admission.next_up(policies=POLICIES, load=the_load)
    assert (got.ticket if got else None) == expected


def test_expire_by_max_age_then_deadline() -> None:
    queued = [
        w(1, "batch", at=0.0),
        w(2, "interactive", at=0.0, deadline=3.0),
        w(3, "interactive", at=2.5),
    ]
    gone = admission.expire(policies=POLICIES, queued=queued, now=3.0)
    assert [(x.ticket, r.reason) for x, r in gone] == [
        (1, Reason.QUEUE_TIMEOUT),
        (2, Reason.DEADLINE_EXCEEDED),
    ]


def test_a_higher_class_queuing_ahead_refuses_the_waiters_it_puts_out_of_reach() -> None:
    """At 2 requests/s, an interactive waiter with 3 s of patience left can start after at most
    5 critical requests; a sixth queued ahead of it refuses it now, not when its 5 s pass. A batch
    waiter with more deadline but its 2 s age limit goes first; one of its own class never
    displaces it; nobody is refused while the pool has no measured rate."""
    inter = w(1, "interactive", at=0.0, deadline=3.0)
    batch = w(2, "batch", at=0.5)
    criticals = [w(10 + i, "critical", at=1.0) for i in range(5)]
    at_5 = load(rate=2.0, queued=[inter, batch, *criticals])
    gone = admission.displaced(
        policies=POLICIES, load=at_5, fronts=[inter, batch], by="critical", now=1.0
    )
    # batch: best start (5+1)/2 = 3 s after 1.0, its limit is 0.5 + 2 → refused; interactive:
    # 3 s ≤ its 2 s left? no: deadline 3.0 - 1.0 = 2 s < 3 s → refused too
    assert [(x.ticket, r.reason) for x, r in gone] == [
        (1, Reason.DEADLINE_UNMEETABLE),
        (2, Reason.DEADLINE_UNMEETABLE),
    ]
    assert "higher-priority requests queued ahead" in gone[0][1].message
    roomy = w(1, "interactive", at=0.0, deadline=100.0)
    at_3 = load(rate=2.0, queued=[roomy, *criticals[:3]])  # (3+1)/2 = 2 s ≤ 5 s of age limit
    assert not admission.displaced(
        policies=POLICIES, load=at_3, fronts=[roomy], by="critical", now=1.0
    )
    at_9 = load(rate=2.0, queued=[roomy, *[w(20 + i, "critical") for i in range(9)]])
    assert admission.displaced(policies=POLICIES, load=at_9, fronts=[roomy], by="critical", now=1.0)
    assert not admission.displaced(  # its own class never displaces it
        policies=POLICIES, load=at_9, fronts=[roomy], by="interactive", now=1.0
    )
    assert not admission.displaced(  # no rate measured yet: no estimate to refuse on
        policies=POLICIES,
        load=load(queued=[roomy, *criticals]),
        fronts=[roomy],
        by="critical",
        now=1.0,
    )


@pytest.mark.parametrize(
    ("the_load", "c", "requested", "expected"),
    [
        pytest.param(load(), "batch", 500, 500, id="calm"),
        pytest.param(load(interactive=4), "batch", 500, 64, id="saturated-caps"),
        pytest.param(load(queued=[w(1, "batch")]), "batch", 500, 64, id="queue-caps"),
        pytest.param(load(queued=[w(1, "batch")]), "batch", 10, 10, id="below-cap"),
        pytest.param(
            load(interactive=4), "interactive", 500, 500, id="class-without-degraded-mode"
        ),
    ],
)
def test_degraded_max_tokens(the_load: PoolLoad, c: str, requested: int, expected: int) -> None:
    assert admission.max_tokens(policy=POLICIES[c], load=the_load, requested=requested) == expected


@pytest.mark.parametrize(
    ("requested", "sequences", "expected"),
    [
        pytest.param(500, 1, 64, id="one-sequence"),
        pytest.param(500, 4, 16, id="four-share-the-cap"),
        pytest.param(10, 4, 10, id="below-its-share"),
        pytest.param(500, 100, 1, id="never-below-one"),
    ],
)
def test_the_degraded_cap_bounds_all_sequences_together(
    requested: int, sequences: int, expected: int
) -> None:
    """Issue 35: under pressure a class caps what a request generates in all, not per choice."""
    got = admission.max_tokens(
        policy=POLICIES["batch"],
        load=load(interactive=4),
        requested=requested,
        sequences=sequences,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("prompt_tokens", "output_tokens", "expected"),
    [
        pytest.param(10, 100, 110.0, id="prompt-plus-output"),
        pytest.param(10, 8 * 100, 810.0, id="eight-sequences"),
        pytest.param(0, 0, 1.0, id="never-zero"),
    ],
)
def test_the_work_counts_every_reserved_output_token(
    prompt_tokens: int, output_tokens: int, expected: float
) -> None:
    assert admission.work(prompt_tokens=prompt_tokens, max_tokens=output_tokens) == expected


def test_service_rate_converges_and_ignores_zero_intervals() -> None:
    rate = 0.0
    for _ in range(50):
        rate = admission.ewma_rate(rate, 10, 1.0)
    assert 9.5 < rate <= 10.0
    assert admission.ewma_rate(rate, 5, 0.0) == rate


def test_the_first_rate_measurement_is_taken_whole() -> None:
    # decaying from zero, 3 completions in 1 s would read as 0.2/s and shed a first burst
    assert admission.ewma_rate(0.0, 3, 1.0) == 3.0
    assert admission.ewma_rate(3.0, 0, 1.0) < 3.0
