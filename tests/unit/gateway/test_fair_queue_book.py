"""Fair queuing inside the admission ledger and core: which waiter of a class starts next
(lowest virtual counter among the class's tenants, weighted by share), that priority classes stay
strictly ordered, that a tenant alone gets every slot (work-conserving), what a returning idle
tenant is charged, settling and refunds, and admission's fair position and per-tenant depth."""

from __future__ import annotations

import collections

import pytest

from tokenfleet.gateway.policy import admission, fairness
from tokenfleet.gateway.policy.admission import ClassPolicy, Enqueue, Waiting
from tokenfleet.gateway.policy.queue_book import QueueBook
from tokenfleet.gateway.policy.rejections import Reason, Rejected

POLICIES = {
    "hi": ClassPolicy(
        name="hi", priority=200, max_queue_depth=100, max_queue_age=5.0, default_deadline=30.0
    ),
    "lo": ClassPolicy(
        name="lo", priority=100, max_queue_depth=100, max_queue_age=5.0, default_deadline=30.0
    ),
}


def wait(
    ledger: QueueBook[str],
    tenant: str,
    *,
    cls: str = "lo",
    at: float = 0.0,
    work: float = 100.0,
    share: float = 1.0,
) -> Waiting:
    return ledger.enqueue(
        f"{tenant}@{at}",
        cls=cls,
        enqueued_at=at,
        deadline=at + 60,
        tenant=tenant,
        share=share,
        work=work,
    )


def replay(
    arrivals: dict[str, tuple[int, float, float]], *, starts: int
) -> collections.Counter[str]:
    """One slot, every tenant backlogged (``count`` waiters of ``work`` each, with ``share``):
    start the head, finish it, repeat; how many starts each tenant got."""
    ledger: QueueBook[str] = QueueBook()
    t = 0.0
    for tenant, (count, work, share) in arrivals.items():
        for _ in range(count):
            t += 0.001
            wait(ledger, tenant, at=t, work=work, share=share)
    got: collections.Counter[str] = collections.Counter()
    for _ in range(starts):
        head = admission.next_up(policies=POLICIES, load=ledger.load(1))
        assert head is not None
        assert ledger.begin(head) is not None
        got[head.tenant] += 1
        ledger.release("lo", tenant=head.tenant, share=head.share)
    return got


@pytest.mark.parametrize(
    ("arrivals", "want"),
    [
        pytest.param(
            {"a": (50, 100.0, 1.0), "b": (50, 100.0, 1.0)},
            {"a": 20, "b": 20},
            id="equal-work-alternates",
        ),
        pytest.param(
            {"a": (50, 100.0, 1.0), "b": (50, 100.0, 3.0)},
            {"a": 10, "b": 30},
            id="share-3-gets-three-quarters",
        ),
        pytest.param(
            {"heavy": (50, 1000.0, 1.0), "light": (50, 100.0, 1.0)},
            {"heavy": 3, "light": 37},
            id="ten-times-the-work-ten-times-fewer-starts",
        ),
        pytest.param({"alone": (50, 1000.0, 1.0)}, {"alone": 40}, id="alone-gets-every-slot"),
        pytest.param({"": (50, 1000.0, 1.0)}, {"": 40}, id="no-tenant-first-come-first-served"),
    ],
)
def test_backlogged_tenants_get_starts_in_proportion_to_share_over_work(
    arrivals: dict[str, tuple[int, float, float]], want: dict[str, int]
) -> None:
    assert dict(replay(arrivals, starts=40)) == want


def test_the_head_is_the_lowest_counter_then_the_oldest() -> None:
    ledger: QueueBook[str] = QueueBook()
    flood = [wait(ledger, "heavy", at=float(i)) for i in range(5)]
    assert ledger.heads["lo"] is flood[0]
    ledger.begin(flood[0])  # heavy is charged 100
    late = wait(ledger, "light", at=9.0)  # joins at heavy's 100: a tie, the older goes first
    assert ledger.heads["lo"] is flood[1]
    ledger.begin(flood[1])  # heavy at 200: the newcomer is next
    assert ledger.heads["lo"] is late
    assert ledger.oldest_age("lo", 10.0) == 8.0  # the oldest waiter is heavy's, not the head
    assert {w.tenant for w in ledger.fronts("lo")} == {"heavy", "light"}
    assert ledger.waiting == {"lo": {"heavy": 3, "light": 1}}


def test_priority_classes_stay_strictly_ordered_whatever_the_counters() -> None:
    ledger: QueueBook[str] = QueueBook()
    ledger.start("hi", tenant="t", work=1e9)  # t has used far more in hi
    ledger.release("hi", tenant="t")
    wait(ledger, "cheap", cls="lo", at=0.0)
    hi = wait(ledger, "t", cls="hi", at=1.0, work=1e9)
    assert admission.next_up(policies=POLICIES, load=ledger.load(1)) is hi


def test_a_returning_idle_tenant_is_lifted_and_banks_no_credit() -> None:
    ledger: QueueBook[str] = QueueBook()
    ledger.start("lo", tenant="busy", work=500.0)
    ledger.start("lo", tenant="quiet", work=100.0)
    ledger.release("lo", tenant="quiet")  # quiet goes idle at 100 while busy runs at 500
    ledger.start("lo", tenant="busy", work=300.0)
    ledger.start("lo", tenant="quiet", work=0.0)
    assert ledger.counters["lo"] == {"busy": 800.0, "quiet": 800.0}


def test_a_settled_request_is_charged_what_it_did_and_idle_classes_forget() -> None:
    ledger: QueueBook[str] = QueueBook()
    ledger.start("lo", tenant="a", work=fairness.work(prompt_tokens=100, output_tokens=50))
    ledger.start("lo", tenant="b", work=10.0)
    correction = fairness.work(prompt_tokens=0, output_tokens=10 - 50)  # cancelled early
    ledger.release("lo", tenant="a", correction=correction)
    assert ledger.counters["lo"] == {"a": 120.0, "b": 210.0}  # b joined at a's 200
    ledger.release("lo", tenant="b")
    assert ledger.counters["lo"] == {}
    assert ledger.in_flight["lo"] == 0


def test_waiters_leaving_from_the_middle_keep_each_line_in_order() -> None:
    ledger: QueueBook[str] = QueueBook()
    a = [wait(ledger, "a", at=float(i)) for i in range(3)]
    b = wait(ledger, "b", at=5.0)
    assert ledger.remove(a[1]) == "a@1.0"
    assert ledger.remove(a[1]) is None
    assert ledger.begin(a[0]) == "a@0.0"  # a charged: b is next
    assert ledger.heads["lo"] is b
    assert ledger.begin(b) == "b@5.0"
    assert ledger.heads["lo"] is a[2]
    assert ledger.remove(a[2]) == "a@2.0"
    assert "lo" not in ledger.heads and ledger.waiting == {"lo": {}}


FLOOD = {"heavy": 30}


@pytest.mark.parametrize(
    ("waiting", "tenant", "want"),
    [
        pytest.param({}, "a", 0, id="empty"),
        pytest.param(FLOOD, "light", 1, id="light-behind-a-flood-is-next-round"),
        pytest.param(FLOOD, "heavy", 30, id="the-flood-waits-behind-itself"),
        pytest.param({"heavy": 30, "b": 2, "light": 1}, "light", 5, id="round-robin"),
        pytest.param({"": 30}, "", 30, id="first-come-first-served"),
    ],
)
def test_fair_position(waiting: dict[str, int], tenant: str, want: int) -> None:
    assert admission.fair_position(waiting, tenant) == want


def loaded(
    waiting: dict[str, int], *, depth: int = 100
) -> tuple[dict[str, ClassPolicy], admission.PoolLoad]:
    policy = ClassPolicy(
        name="lo", priority=1, max_queue_depth=depth, max_queue_age=2.0, default_deadline=30.0
    )
    n = sum(waiting.values())
    head = Waiting(ticket=1, cls="lo", enqueued_at=0.0, deadline=60.0)
    load = admission.PoolLoad(
        capacity=4,
        in_flight={"lo": 4},
        queued={"lo": n},
        heads={"lo": head},
        service_rate=10.0,
        waiting={"lo": waiting},
    )
    return {"lo": policy}, load


@pytest.mark.parametrize(
    ("waiting", "tenant", "depth", "want"),
    [
        pytest.param(
            {"heavy": 30},
            "light",
            100,
            Enqueue(expected_wait=0.2),
            id="light-tenant-admitted-at-its-fair-position",
        ),
        pytest.param(
            {"heavy": 30},
            "heavy",
            100,
            Reason.DEADLINE_UNMEETABLE,
            id="the-flood-refused-by-its-own-queue",
        ),
        pytest.param(
            {"": 30},
            "",
            100,
            Reason.DEADLINE_UNMEETABLE,
            id="without-tenants-the-whole-queue-counts",
        ),
        pytest.param(
            {"heavy": 10},
            "light",
            10,
            Enqueue(expected_wait=0.2),
            id="a-queue-full-of-one-tenant-admits-another",
        ),
        pytest.param(
            {"heavy": 10}, "heavy", 10, Reason.QUEUE_FULL, id="full-for-the-tenant-holding-it"
        ),
        pytest.param(
            {"heavy": 5, "light": 5}, "light", 10, Reason.QUEUE_FULL, id="full-for-each-at-its-part"
        ),
    ],
)
def test_admission_reads_the_tenants_fair_position(
    waiting: dict[str, int], tenant: str, depth: int, want: object
) -> None:
    policies, load = loaded(waiting, depth=depth)
    got = admission.admit(
        policies=policies, load=load, cls="lo", now=0.0, deadline=60.0, tenant=tenant
    )
    if isinstance(want, Reason):
        assert isinstance(got, Rejected) and got.reason is want
    else:
        assert got == want


@pytest.mark.parametrize(
    ("heads", "counters", "want"),
    [
        pytest.param(
            [
                fairness.Head(tenant="flood", ticket=1, work=3200.0),
                fairness.Head(tenant="light", ticket=9, work=320.0),
            ],
            {"flood": 5000.0, "light": 5000.0},
            "light",
            id="a-tie-goes-to-the-cheaper-head",
        ),
        pytest.param(
            [
                fairness.Head(tenant="flood", ticket=1, work=3200.0),
                fairness.Head(tenant="light", ticket=9, work=320.0),
            ],
            {"flood": 5000.0, "light": 8000.0},
            "flood",
            id="a-cheap-head-does-not-jump-a-lower-counter",
        ),
        pytest.param(
            [
                fairness.Head(tenant="gold", ticket=9, work=3000.0, share=3.0),
                fairness.Head(tenant="std", ticket=1, work=2000.0),
            ],
            {"gold": 0.0, "std": 0.0},
            "gold",
            id="the-charge-is-divided-by-the-share",
        ),
    ],
)
def test_pick_orders_by_the_counter_after_the_heads_charge(
    heads: list[fairness.Head], counters: dict[str, float], want: str
) -> None:
    got = fairness.pick(heads, counters)
    assert got is not None and got.tenant == want


SEEN = {"flood": (9.5, 1.0), "light-a": (9.0, 1.0), "light-b": (5.0, 1.0)}


@pytest.mark.parametrize(
    ("tenant", "holding", "seen", "capacity", "want"),
    [
        pytest.param("flood", {"flood": 5}, {"flood": (9.9, 1.0)}, 6, 0, id="alone-takes-all"),
        pytest.param("flood", {"flood": 5}, SEEN, 6, 1, id="leaves-one-for-a-present-tenant"),
        pytest.param("flood", {"flood": 40}, SEEN, 48, 1, id="one-per-present-tenant"),
        pytest.param(
            "flood", {"flood": 40}, {**SEEN, "light-b": (9.0, 1.0)}, 48, 2, id="two-present"
        ),
        pytest.param("flood", {"flood": 1}, SEEN, 6, 0, id="below-its-fair-part-no-headroom"),
        pytest.param("light-a", {"flood": 5}, SEEN, 6, 0, id="the-light-tenant-is-not-held"),
        pytest.param(
            "flood", {"flood": 3}, {**SEEN, "flood": (9.5, 3.0)}, 6, 0, id="share-3-owns-more"
        ),
        pytest.param("flood", {"flood": 2}, SEEN, 3, 0, id="a-quarter-of-3-slots-is-none"),
    ],
)
def test_headroom(
    tenant: str,
    holding: dict[str, int],
    seen: dict[str, tuple[float, float]],
    capacity: int,
    want: int,
) -> None:
    got = fairness.headroom(tenant=tenant, capacity=capacity, holding=holding, seen=seen, now=10.0)
    assert got == want


def test_a_flood_leaves_a_slot_while_others_are_present_and_takes_it_once_alone() -> None:
    ledger: QueueBook[str] = QueueBook()
    for at in (0.0, 0.1, 0.2, 0.3, 0.4):
        ledger.start("lo", tenant="flood", work=3200.0, now=at)
    ledger.start("lo", tenant="light", work=320.0, now=0.5)
    ledger.release("lo", tenant="light")
    held = wait(ledger, "flood", at=0.6, work=3200.0)
    assert admission.next_up(policies=POLICIES, load=ledger.load(6), now=1.0) is None
    assert admission.next_up(policies=POLICIES, load=ledger.load(6), now=3.0) is held
    light = wait(ledger, "light", at=1.0, work=320.0)
    assert admission.next_up(policies=POLICIES, load=ledger.load(6), now=1.0) is light
    got = admission.admit(
        policies=POLICIES, load=ledger.load(6), cls="lo", now=1.0, deadline=60.0, tenant="flood"
    )
    assert isinstance(got, Enqueue)
