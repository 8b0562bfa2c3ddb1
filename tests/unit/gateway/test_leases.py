"""Quota leases' pure core (policy.leases): what a lease admits, what it asks for, when it goes
back."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy import leases
from tokenfleet.gateway.policy.quotas import Limits

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
    assert lease.shortfall(0)[2] == shortfall and lease.extra_slots() == extra
    lease.add(1, 0, now=0.0, slots=shortfall + extra)
    lease.draw(0, now=0.0)
    assert lease.free_slots == max(free, 1) - 1 + extra <= lease.max_free_slots - 1


def test_while_a_grant_is_under_way_others_ask_only_for_their_own_slot() -> None:
    lease = leases.Lease(limits=CONC, asking=1)
    assert lease.shortfall(0)[2] == 1 and lease.extra_slots() == 0


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
