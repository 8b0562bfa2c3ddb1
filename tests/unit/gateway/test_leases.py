"""Quota leases' pure core (policy.leases): what a lease admits, what it asks for, when it goes
back; what one grant asks for all the requests waiting on a lease (at least the smallest one's
need, at most all of theirs plus the lease's top-up), how its answer is handed out to them, and
— with quotas.Buckets standing for Redis — bursts at once to one process or to six, within the
limit and beyond it."""

from __future__ import annotations

import dataclasses

import pytest

from tokenfleet.gateway.policy import leases, quotas
from tokenfleet.gateway.policy.quotas import Limits
from tokenfleet.gateway.policy.rejections import Rejected

RPM = Limits(requests_per_minute=600)


def test_a_lease_admits_while_it_covers_the_request() -> None:
    lease = leases.Lease(limits=RPM)
    assert not lease.take(10, now=0.0)
    lease.add(2, 25, now=0.0)
    assert lease.take(10, now=1.0) and lease.take(10, now=1.5)
    assert not lease.take(10, now=2.0)  # no request left, though 5 tokens are
    assert (lease.requests, lease.tokens, lease.used_at) == (0, 5, 1.5)
    assert lease.shortfall(10) == (1, 5, 0)  # no concurrency limit: no slots


def test_a_settlement_refunds_into_the_lease_or_leaves_a_debt() -> None:
    lease = leases.Lease(limits=RPM)
    lease.add(1, 100, now=0.0)
    assert lease.take(100, now=0.0)
    lease.settle(60, now=1.0)  # used 40 of 100
    assert lease.tokens == 60
    lease.settle(-80, now=1.0)  # a request that used 80 more than it reserved
    assert lease.tokens == -20 and lease.shortfall(10) == (1, 30, 0)  # the debt comes first
    lease.add(1, 30, now=2.0)
    lease.draw(10, now=2.0)
    assert (lease.requests, lease.tokens) == (0, 0)


@pytest.mark.parametrize(
    ("used_at", "taken_at", "now", "due"),
    [
        (0.0, 0.0, 1.9, False),  # in use, not held long
        (0.0, 0.0, 2.0, True),  # quiet for IDLE_SECONDS
        (9.5, 0.0, 10.0, True),  # busy, but held for HOLD_SECONDS
        (9.5, 1.0, 10.0, False),
    ],
)
def test_a_lease_goes_back_when_idle_or_held_long(
    used_at: float, taken_at: float, now: float, due: bool
) -> None:
    lease = leases.Lease(limits=RPM, requests=3, tokens=10, taken_at=taken_at, used_at=used_at)
    assert lease.due(now) is due


def test_an_empty_lease_has_nothing_to_give_back() -> None:
    assert not leases.Lease(limits=RPM, used_at=0.0).due(100.0)


def test_the_hold_time_starts_with_a_fresh_share() -> None:
    lease = leases.Lease(limits=RPM)
    lease.add(4, 40, now=5.0)
    lease.add(4, 40, now=7.0)  # a top-up of a lease in use keeps its start
    assert lease.taken_at == 5.0


@pytest.mark.parametrize(
    ("limits", "tokens", "share", "expected"),
    [
        # room for 8 requests like this one...
        (Limits(requests_per_minute=6000, tokens_per_minute=1_000_000), 100, 1.0, (7, 700)),
        # ...capped at a tenth of this replica's share of each per-minute limit
        (Limits(requests_per_minute=6000, tokens_per_minute=1_000_000), 100, 0.0005, (0, 0)),
        (Limits(requests_per_minute=40, tokens_per_minute=2_000), 100, 1.0, (3, 100)),
        # small limits: a lease is exactly the request (as exact as no lease)
        (Limits(requests_per_minute=10, tokens_per_minute=600), 110, 1.0, (0, 0)),
        # tokens per day: a thousandth of it at most
        (Limits(tokens_per_day=10_000_000), 404, 1.0, (7, 2828)),
        (Limits(tokens_per_day=1_000_000), 404, 1.0, (7, 596)),
        # an unlimited dimension costs nothing to lease
        (Limits(tokens_per_minute=600), 110, 1.0, (7, 0)),
        (Limits(requests_per_minute=600), 0, 1.0, (7, 0)),
    ],
)
def test_extras_fill_a_lease_up_to_its_caps(
    limits: Limits, tokens: int, share: float, expected: tuple[int, int]
) -> None:
    assert leases.extras(limits, tokens=tokens, share=share) == expected


CONC = Limits(max_concurrent=1000)  # a lease of 8 slots at most (a tenth of 1000, capped)


@pytest.mark.parametrize(
    ("limits", "share", "leasable"),
    [
        (Limits(), 1.0, False),  # nothing to count
        (Limits(requests_per_minute=5), 1.0, True),
        (Limits(tokens_per_day=5), 1.0, True),
        # a concurrency limit is leased only if a lease can hold 2 slots or more
        (Limits(requests_per_minute=5, max_concurrent=2), 1.0, False),
        (Limits(max_concurrent=4), 0.5, False),
        (Limits(max_concurrent=10), 0.5, False),
        (Limits(max_concurrent=19), 1.0, False),
        (Limits(max_concurrent=20), 1.0, True),
        (Limits(max_concurrent=40), 0.5, True),
        (Limits(max_concurrent=39), 0.5, False),
        (Limits(requests_per_minute=10**8, max_concurrent=10**6), 1.0, True),  # the benchmark
        (Limits(max_concurrent=10**6), 1 / 50, True),
    ],
)
def test_which_tenants_are_leased(limits: Limits, share: float, leasable: bool) -> None:
    assert leases.leasable(limits, share=share) is leasable


@pytest.mark.parametrize(
    ("limits", "share", "slots"),
    [
        (Limits(), 1.0, 0),
        (Limits(requests_per_minute=600), 1.0, 0),
        (Limits(max_concurrent=10), 0.5, 0),
        (Limits(max_concurrent=20), 1.0, 2),
        (Limits(max_concurrent=50), 1.0, 5),
        (Limits(max_concurrent=100), 0.5, 5),
        (Limits(max_concurrent=1000), 1.0, leases.REQUESTS_PER_LEASE),
        (Limits(max_concurrent=10**6), 1.0, leases.REQUESTS_PER_LEASE),
    ],
)
def test_a_lease_holds_a_tenth_of_the_replicas_share_of_slots_at_most(
    limits: Limits, share: float, slots: int
) -> None:
    assert leases.slot_share(limits, share) == slots


@pytest.mark.parametrize(
    ("free", "shortfall", "extra"),
    [
        # none free: one for the request, and room for 7 more once it drew its own
        (0, 1, 7),
        (1, 0, 7),  # the request draws the free one; 7 more leave 7 free
        (3, 0, 5),
        (7, 0, 1),
        (8, 0, 0),  # full: a grant is for requests or tokens only
    ],
)
def test_a_grant_asks_for_slots_up_to_the_cap_after_the_request_drew_its_own(
    free: int, shortfall: int, extra: int
) -> None:
    lease = leases.Lease(limits=CONC, free_slots=free)
    asked = leases.ask(lease, [leases.Waiting(tokens=0, limits=CONC)])
    assert asked is not None and (asked.slots, asked.extra_slots) == (shortfall, extra)
    lease.add(1, 0, now=0.0, slots=shortfall + extra)
    lease.draw(0, now=0.0)
    assert lease.free_slots == max(free, 1) - 1 + extra <= lease.max_free_slots - 1


def test_a_leased_request_draws_a_slot_and_its_settlement_brings_it_back() -> None:
    lease = leases.Lease(limits=CONC)
    lease.add(2, 0, now=0.0, slots=1)
    assert lease.take(0, now=0.0) and lease.free_slots == 0
    assert not lease.take(0, now=0.0)  # a request is left, but no slot: no debt of slots
    assert not lease.has_slot() and lease.shortfall(0) == (0, 0, 1)
    assert not lease.settle(0, now=1.0, slot_of=CONC)  # kept as a free slot
    assert lease.free_slots == 1 and lease.take(0, now=1.0)


def test_settlements_may_overfill_a_lease_until_the_surplus_goes_back() -> None:
    lease = leases.Lease(limits=CONC, requests=1, free_slots=7)
    for _ in range(5):  # five requests that ran at once finish
        assert not lease.settle(0, now=0.0, slot_of=CONC)
    assert lease.free_slots == 12 and lease.take(0, now=0.0)  # reused at once
    assert lease.surplus_slots() == 3 and lease.free_slots == lease.max_free_slots == 8
    assert lease.surplus_slots() == 0


def test_a_slot_drawn_under_other_limits_goes_straight_back() -> None:
    lease = leases.Lease(limits=Limits(max_concurrent=500), free_slots=2)
    assert lease.settle(0, now=0.0, slot_of=CONC) and lease.free_slots == 2
    assert not lease.settle(0, now=0.0, slot_of=None) and lease.free_slots == 2


def test_a_give_back_returns_free_slots_only_and_empties_the_lease_first() -> None:
    lease = leases.Lease(limits=CONC, used_at=0.0)
    lease.add(8, 0, now=0.0, slots=8)
    for _ in range(3):
        assert lease.take(0, now=0.0)  # three requests run on three slots
    assert lease.due(leases.IDLE_SECONDS)
    assert lease.hand_back() == (5, 0, 5)  # the three running slots stay counted
    assert not lease.holds() and not lease.take(0, now=3.0)
    lease.keep(5, 0, 5)  # Redis could not take it: held again, tried again
    assert lease.hand_back() == (5, 0, 5)
    # the running requests settle into the emptied lease: free slots of it, given back later
    assert not any([lease.settle(0, now=4.0, slot_of=CONC) for _ in range(3)])
    assert lease.free_slots == 3 and lease.due(4.0 + leases.IDLE_SECONDS)


def test_a_fresh_share_of_slots_only_starts_the_hold_time() -> None:
    lease = leases.Lease(limits=CONC, free_slots=1)
    lease.add(1, 0, now=5.0, slots=0)  # slots held: not a fresh share
    assert lease.taken_at == 0.0


@pytest.mark.parametrize(
    ("outcome", "again"),
    [
        pytest.param(leases.Outcome.APPLIED, False, id="answered"),
        pytest.param(leases.Outcome.NOT_APPLIED, True, id="never-reached-redis"),
        pytest.param(leases.Outcome.UNKNOWN, False, id="answer-lost-counts-as-done"),
    ],
)
def test_only_a_give_back_that_certainly_did_not_run_is_tried_again(
    outcome: leases.Outcome, again: bool
) -> None:
    assert leases.give_back_again(outcome) is again


def waiting(*tokens: int, limits: Limits, rounds: int = 0) -> list[leases.Waiting]:
    return [leases.Waiting(tokens=t, limits=limits, rounds=rounds) for t in tokens]


RPM_TPM = Limits(requests_per_minute=600, tokens_per_minute=1_000_000)
RPM_100 = Limits(requests_per_minute=100)
TPM = Limits(tokens_per_minute=10_000)


@pytest.mark.parametrize(
    ("lease", "asking", "expected"),
    [
        pytest.param(
            leases.Lease(limits=RPM_TPM),
            waiting(100, limits=RPM_TPM),
            (1, 100, 0, 7, 700, 0),
            id="one-request-room-for-8-like-it-as-before",
        ),
        pytest.param(
            leases.Lease(limits=RPM_100),
            waiting(*[0] * 50, limits=RPM_100),
            (1, 0, 0, 49 + 7, 0, 0),
            id="fifty-at-once-one-grant-for-all-and-one-top-up",
        ),
        pytest.param(
            leases.Lease(limits=RPM_100, share=1 / 6),
            waiting(*[0] * 17, limits=RPM_100),
            (1, 0, 0, 16, 0, 0),
            id="a-tenth-of-a-small-share-is-no-top-up-exactly-what-waits",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=5, tokens=20),
            waiting(100, limits=RPM_TPM),
            (0, 80, 0, 3, 700, 0),
            id="the-cap-is-the-leases-what-it-holds-counts",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, tokens=5000),
            waiting(100, limits=RPM_TPM),
            (1, 0, 0, 7, 0, 0),
            id="tokens-held-beyond-the-top-up-none-asked",
        ),
        pytest.param(
            leases.Lease(limits=TPM),
            waiting(500, 100, 300, limits=TPM),
            # at least the smallest (a refusal refuses all three), up to all three and room
            # for 7 more like the smallest (unlimited requests cost nothing)
            (1, 100, 0, 3 + 7 - 1, 900 + 700 - 100, 0),
            id="at-least-what-the-smallest-lacks",
        ),
        pytest.param(
            leases.Lease(limits=CONC),
            waiting(0, 0, 0, 0, 0, limits=CONC),
            (1, 0, 1, 11, 0, 5 + 7 - 1),
            id="a-slot-for-each-and-free-slots-up-to-the-cap-less-one",
        ),
        pytest.param(
            leases.Lease(limits=CONC, free_slots=3, requests=1),
            waiting(0, 0, limits=CONC),
            (0, 0, 0, 2 + 7 - 1, 0, 2 + 7 - 3),
            id="free-slots-held-count",
        ),
    ],
)
def test_one_grant_asks_for_every_waiting_request_and_tops_the_lease_up_to_its_cap(
    lease: leases.Lease, asking: list[leases.Waiting], expected: tuple[int, ...]
) -> None:
    asked = leases.ask(lease, asking)
    assert asked is not None and tuple(asked.args()) == expected


def test_requests_under_other_limits_are_not_asked_for() -> None:
    lease = leases.Lease(limits=RPM_100)
    assert leases.ask(lease, waiting(10, limits=RPM_TPM)) is None
    asked = leases.ask(lease, [*waiting(10, limits=RPM_TPM), *waiting(0, limits=RPM_100)])
    assert asked is not None and (asked.requests, asked.extra_requests) == (1, 7)


A, WAIT, AGAIN, REFUSED, PER = (
    leases.Turn.ADMITTED,
    leases.Turn.WAIT,
    leases.Turn.AGAIN,
    leases.Turn.REFUSED,
    leases.Turn.PER_REQUEST,
)
GRANTED, NO, LOST = leases.Grant.GRANTED, leases.Grant.REFUSED, leases.Grant.UNANSWERED


@pytest.mark.parametrize(
    ("lease", "asking", "grant", "turns"),
    [
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=2, tokens=30),
            waiting(10, 10, 10, limits=RPM_TPM),
            None,
            [A, A, WAIT],
            id="before-a-grant-what-the-lease-holds-goes-at-once",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=3, tokens=30),
            waiting(10, 10, 10, limits=RPM_TPM),
            GRANTED,
            [A, A, A],
            id="granted-in-full-all-admitted",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=2, tokens=30),
            waiting(10, 10, 10, limits=RPM_TPM),
            GRANTED,
            [A, A, AGAIN],
            id="granted-short-the-rest-wait-for-the-next",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=1, tokens=30),
            waiting(10, 10, limits=RPM_TPM, rounds=leases.GRANT_ROUNDS - 1),
            GRANTED,
            [A, PER],
            id="short-on-its-last-round-per-request",
        ),
        pytest.param(
            leases.Lease(limits=RPM_TPM, requests=2, tokens=50),
            waiting(100, 10, limits=RPM_TPM),
            GRANTED,
            [AGAIN, A],
            id="a-big-one-left-short-does-not-hold-small-ones-back",
        ),
        pytest.param(
            leases.Lease(limits=CONC, requests=1, free_slots=1),
            waiting(0, 0, limits=CONC),
            NO,
            [A, REFUSED],
            id="refused-but-the-lease-is-looked-at-again",
        ),
        pytest.param(
            leases.Lease(limits=RPM_100),
            waiting(0, 0, limits=RPM_100),
            NO,
            [REFUSED, REFUSED],
            id="refused-and-nothing-held-all-refused",
        ),
        pytest.param(
            leases.Lease(limits=RPM_100, requests=1),
            waiting(0, 0, limits=RPM_100),
            LOST,
            [A, PER],
            id="unanswered-per-request-unless-held",
        ),
        pytest.param(
            leases.Lease(limits=RPM_100, requests=5),
            waiting(0, limits=RPM_TPM),
            GRANTED,
            [PER],
            id="under-other-limits-per-request",
        ),
    ],
)
def test_a_grants_answer_hands_the_lease_out_to_the_waiting_oldest_first(
    lease: leases.Lease,
    asking: list[leases.Waiting],
    grant: leases.Grant | None,
    turns: list[leases.Turn],
) -> None:
    held = lease.requests
    assert leases.hand_out(lease, asking, grant=grant, now=1.0) == turns
    assert lease.requests == held - turns.count(A)


def test_a_request_that_left_puts_what_it_drew_back() -> None:
    lease = leases.Lease(limits=CONC, requests=1, tokens=10, free_slots=1)
    assert lease.take(10, now=0.0)
    lease.put_back(10)
    assert (lease.requests, lease.tokens, lease.free_slots) == (1, 10, 1)


def serve(limits: Limits, sizes: list[int], *, share: float) -> int:
    """Bursts of ``sizes`` requests (of 10 tokens) at once, one a process, each process's lease
    asking for all its waiting requests in turn; quotas.Buckets stands for Redis, the clock
    stands still (no refill). How many were admitted."""
    shared = quotas.Buckets()
    held = [leases.Lease(limits=limits, share=share) for _ in sizes]
    queues = [waiting(*[10] * n, limits=limits) for n in sizes]
    admitted = 0
    while any(queues):
        for lease, queue in zip(held, queues, strict=True):
            asked = leases.ask(lease, queue)
            if asked is None:
                continue
            got = shared.lease(
                limits,
                requests=asked.requests,
                tokens=asked.tokens,
                slots=asked.slots,
                extra_requests=asked.extra_requests,
                extra_tokens=asked.extra_tokens,
                extra_slots=asked.extra_slots,
                now=0.0,
            )
            if not isinstance(got, Rejected):
                lease.add(got[0], got[1], now=0.0, slots=got[2])
            grant = leases.Grant.REFUSED if isinstance(got, Rejected) else leases.Grant.GRANTED
            turns = leases.hand_out(lease, queue, grant=grant, now=0.0)
            admitted += turns.count(A)
            queue[:] = [
                dataclasses.replace(w, rounds=w.rounds + 1)
                for w, turn in zip(queue, turns, strict=True)
                if turn is AGAIN
            ]
    return admitted


@pytest.mark.parametrize(
    ("limits", "sizes", "share", "admitted"),
    [
        pytest.param(RPM_100, [50], 1.0, 50, id="rpm-100-fifty-at-once"),
        pytest.param(RPM_100, [100], 1.0, 100, id="rpm-100-the-whole-limit-at-once"),
        pytest.param(RPM_100, [150], 1.0, 100, id="rpm-100-beyond-it"),
        pytest.param(RPM_100, [17, 17, 17, 17, 16, 16], 1 / 6, 100, id="rpm-100-six-processes"),
        pytest.param(RPM_100, [40] * 6, 1 / 6, 100, id="rpm-100-six-processes-beyond-it"),
        pytest.param(
            Limits(requests_per_minute=600), [90] * 6, 1 / 6, 540, id="rpm-600-six-processes"
        ),
        # beyond the limit, the three leases served in full keep their top-ups (7 each) for
        # later: the limit less a tenth of it at most is admitted at once
        pytest.param(
            Limits(requests_per_minute=600), [150] * 6, 1 / 6, 600 - 3 * 7, id="rpm-600-beyond"
        ),
        pytest.param(
            Limits(tokens_per_minute=6_000), [600], 1.0, 600, id="tpm-the-whole-limit-at-once"
        ),
        pytest.param(Limits(max_concurrent=60), [60], 1.0, 60, id="slots-the-whole-limit"),
        pytest.param(Limits(max_concurrent=60), [90], 1.0, 60, id="slots-beyond-the-limit"),
    ],
)
def test_bursts_are_admitted_up_to_the_limit_and_never_beyond(
    limits: Limits, sizes: list[int], share: float, admitted: int
) -> None:
    assert serve(limits, sizes, share=share) == admitted
