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
    assert lease.shortfall(10) == (1, 5)


def test_a_settlement_refunds_into_the_lease_or_leaves_a_debt() -> None:
    lease = leases.Lease(limits=RPM)
    lease.add(1, 100, now=0.0)
    assert lease.take(100, now=0.0)
    lease.settle(60, now=1.0)  # used 40 of 100
    assert lease.tokens == 60
    lease.settle(-80, now=1.0)  # a request that used 80 more than it reserved
    assert lease.tokens == -20 and lease.shortfall(10) == (1, 30)  # the debt comes first
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


@pytest.mark.parametrize(
    ("limits", "leasable"),
    [
        (Limits(), False),  # nothing to count
        (Limits(requests_per_minute=5), True),
        (Limits(tokens_per_day=5), True),
        (Limits(requests_per_minute=5, max_concurrent=2), False),  # needs the exact count
    ],
)
def test_which_tenants_are_leased(limits: Limits, leasable: bool) -> None:
    assert leases.leasable(limits) is leasable
