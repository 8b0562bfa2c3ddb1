"""Fair queuing inside the admission ledger and core: which waiter of a class starts next
(lowest virtual counter among the class's tenants, weighted by share), that priority classes stay
strictly ordered, that a tenant alone gets every slot (work-conserving), what a returning idle
tenant is charged, settling and refunds, and admission's fair position and per-tenant depth."""

from __future__ import annotations

import collections
from typing import Any

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
        pytest.param("flood", {"flood": 2}, SEEN, 3, 1, id="a-quarter-of-3-slots-is-still-one"),
        pytest.param("flood", {"flood": 1}, SEEN, 2, 1, id="one-of-2-slots"),
        pytest.param("flood", {"flood": 1}, SEEN, 1, 0, id="a-single-slot-is-never-held"),
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


# ---- the fair order by virtual finish (issue 36: a light tenant 1 % served on make up) ------

#: A flood of 3,000-token prompts (counter units prompt + 2 × output: 3,200 each; token work
#: prompt + max_tokens: 3,100) and a light tenant's 300-token ones (320 units; 310 tokens).
FLOOD_WORK, FLOOD_COST = 3200.0, 3100.0
LIGHT_WORK, LIGHT_COST = 320.0, 310.0


@pytest.mark.parametrize(
    ("waiting", "counters", "tenant", "work", "want"),
    [
        pytest.param(
            {"flood": 20},
            {"flood": 50_000.0},
            "light",
            LIGHT_WORK,
            0,
            id="a-light-request-goes-before-the-floods-long-ones",
        ),
        pytest.param(
            {"flood": 20},
            {"flood": 50_000.0},
            "flood",
            FLOOD_WORK,
            20,
            id="the-flood-waits-behind-itself",
        ),
        pytest.param(
            {"flood": 20, "light": 1},
            {"flood": 50_000.0, "light": 50_000.0},
            "light",
            LIGHT_WORK,
            1,
            id="its-own-waiter-first",
        ),
        pytest.param(
            {"flood": 20},
            {"flood": 50_000.0, "light": 60_000.0},
            "light",
            LIGHT_WORK,
            3,
            id="a-tenant-served-more-than-the-flood-waits-for-it",
        ),
    ],
)
def test_finish_position(
    waiting: dict[str, int], counters: dict[str, float], tenant: str, work: float, want: int
) -> None:
    per = {"flood": FLOOD_WORK, "light": LIGHT_WORK}
    count, cost = admission.finish_position(
        waiting=waiting,
        waiting_work={t: n * per[t] for t, n in waiting.items()},
        waiting_cost={
            t: n * (FLOOD_COST if t == "flood" else LIGHT_COST) for t, n in waiting.items()
        },
        counters=counters,
        seen={},
        tenant=tenant,
        work=work,
        share=1.0,
    )
    assert count == want
    own = waiting.get(tenant, 0)
    assert cost == pytest.approx(
        own * (FLOOD_COST if tenant == "flood" else LIGHT_COST)
        + (want - own) * (FLOOD_COST if tenant != "flood" else LIGHT_COST)
    )


@pytest.mark.parametrize(
    "waiting",
    [{"heavy": 30}, {"heavy": 30, "b": 2, "light": 1}, {"a": 1, "b": 1}, {"a": 3, "light": 2}],
)
def test_with_equal_counters_and_work_the_finish_order_is_round_robin(
    waiting: dict[str, int],
) -> None:
    count, _ = admission.finish_position(
        waiting=waiting,
        waiting_work={t: n * 100.0 for t, n in waiting.items()},
        waiting_cost={t: n * 100.0 for t, n in waiting.items()},
        counters=dict.fromkeys(waiting, 7.0),
        seen={},
        tenant="light",
        work=100.0,
        share=1.0,
    )
    assert count == admission.fair_position(waiting, "light")


def test_a_larger_share_moves_a_tenant_forward() -> None:
    args: dict[str, Any] = {
        "waiting": {"flood": 10},
        "waiting_work": {"flood": 10 * 100.0},
        "waiting_cost": {"flood": 10 * 100.0},
        "counters": {"flood": 0.0, "big": 0.0},
        "seen": {},
        "tenant": "big",
        "work": 400.0,
    }
    assert admission.finish_position(**args, share=1.0)[0] == 4
    assert admission.finish_position(**args, share=4.0)[0] == 1


def flooded(*, light_waiting: int = 0) -> tuple[dict[str, ClassPolicy], admission.PoolLoad]:
    """One process's view of make up's fair-test pool under the flood: 3 slots all taken by the
    flood's long requests, 20 of them waiting, ~2 completions a second, a mean prefill of 0.9 s
    (3,000 tokens at 0.3 ms), and the default interactive class (1 s objective, 2 s age)."""
    policy = ClassPolicy(
        name="interactive",
        priority=200,
        max_queue_depth=256,
        max_queue_age=2.0,
        default_deadline=60.0,
        ttft_target=1.0,
    )
    head = Waiting(ticket=1, cls="interactive", enqueued_at=0.0, deadline=60.0, tenant="flood")
    waiting = {"flood": 20} | ({"light": light_waiting} if light_waiting else {})
    load = admission.PoolLoad(
        capacity=3,
        in_flight={"interactive": 3},
        queued={"interactive": 20 + light_waiting},
        heads={"interactive": head},
        service_rate=2.1,
        waiting={"interactive": waiting},
        holding={"interactive": {"flood": 3}},
        queued_cost={"interactive": 20 * FLOOD_COST + light_waiting * LIGHT_COST},
        mean_cost=FLOOD_COST,
        prefill=0.9,
        counters={"interactive": {"flood": 80_000.0}},
        waiting_work={"interactive": {"flood": 20 * FLOOD_WORK}},
        waiting_cost={"interactive": {"flood": 20 * FLOOD_COST}},
    )
    return {"interactive": policy}, load


def test_a_light_request_beside_a_flood_waits_for_the_next_slot_instead_of_being_refused() -> None:
    """The make-up measurement of issue 36: the light tenant's request was refused at once
    (``deadline_unmeetable``) because admission placed it behind a flood request (round robin)
    and measured its patience with the flood's 0.9 s prefill (leaving 0.25 s of a 1 s
    objective). In fair order it is next, and its own prefill is a tenth of the flood's."""
    policies, load = flooded()
    got = admission.admit(
        policies=policies,
        load=load,
        cls="interactive",
        now=10.0,
        deadline=70.0,
        tenant="light",
        fair_work=LIGHT_WORK,
        tenant_share=1.0,
        cost=LIGHT_COST,
    )
    assert isinstance(got, Enqueue), got
    assert got.expected_wait == pytest.approx(1 / 2.1)
    assert got.patience == pytest.approx(1.0 - 0.9 * LIGHT_COST / FLOOD_COST)
    # unknown work (fair queuing off, or a caller that passes none): the old estimate refuses
    old = admission.admit(
        policies=policies, load=load, cls="interactive", now=10.0, deadline=70.0, tenant="light"
    )
    assert isinstance(old, Rejected) and old.reason is Reason.DEADLINE_UNMEETABLE


def test_the_flood_itself_is_still_refused_when_its_queue_cannot_start_in_time() -> None:
    policies, load = flooded()
    got = admission.admit(
        policies=policies,
        load=load,
        cls="interactive",
        now=10.0,
        deadline=70.0,
        tenant="flood",
        fair_work=FLOOD_WORK,
        tenant_share=1.0,
        cost=FLOOD_COST,
    )
    assert isinstance(got, Rejected) and got.reason is Reason.DEADLINE_UNMEETABLE
