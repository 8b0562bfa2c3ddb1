"""Quota arithmetic (the reference the Redis script is tested against): buckets refill per
minute, reservations are all-or-nothing, settling refunds, the day resets, refusals explain."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy import quotas
from tokenfleet.gateway.policy.quotas import Buckets, Limits
from tokenfleet.gateway.policy.rejections import Reason

T0 = 1_800_000_000.0  # a fixed instant, mid-day UTC


def test_requests_per_minute_bucket_refills_continuously() -> None:
    b, limits = Buckets(), Limits(requests_per_minute=2)
    assert b.reserve(limits, 1, T0) is None
    assert b.reserve(limits, 1, T0) is None
    refused = b.reserve(limits, 1, T0)
    assert refused is not None and refused.reason == Reason.RATE_LIMITED
    assert refused.retry_after == pytest.approx(30.0, abs=0.01)  # one request refills in 30 s
    assert b.reserve(limits, 1, T0 + 30) is None


def test_tokens_per_minute_take_the_whole_reservation_and_settle_refunds() -> None:
    b, limits = Buckets(), Limits(tokens_per_minute=1000)
    assert b.reserve(limits, 800, T0) is None
    refused = b.reserve(limits, 300, T0)
    assert refused is not None and "1000 tokens per minute" in refused.message
    b.settle(limits, refund=700, now=T0)  # used 100 of 800
    assert b.reserve(limits, 300, T0) is None


def test_a_request_bigger_than_the_whole_minute_is_refused_for_good() -> None:
    refused = Buckets().reserve(Limits(tokens_per_minute=100), 500, T0)
    assert refused is not None and refused.retry_after is None and refused.param == "max_tokens"


def test_daily_quota_resets_at_midnight_utc() -> None:
    b, limits = Buckets(), Limits(tokens_per_day=1000)
    assert b.reserve(limits, 900, T0) is None
    refused = b.reserve(limits, 200, T0)
    assert refused is not None and refused.reason == Reason.DAILY_QUOTA
    _, left = quotas.day_of(T0)
    assert refused.retry_after == pytest.approx(left, abs=1)
    assert b.reserve(limits, 200, T0 + left + 1) is None


def test_concurrency_slot_is_freed_by_settle() -> None:
    b, limits = Buckets(), Limits(max_concurrent=1)
    assert b.reserve(limits, 10, T0) is None
    refused = b.reserve(limits, 10, T0)
    assert refused is not None and refused.reason == Reason.CONCURRENCY_LIMIT
    b.settle(limits, refund=0, now=T0)
    assert b.reserve(limits, 10, T0) is None


def test_refusal_takes_nothing() -> None:
    b, limits = Buckets(), Limits(requests_per_minute=10, tokens_per_minute=100, max_concurrent=5)
    assert b.reserve(limits, 150, T0) is not None
    assert b.concurrent == 0
    assert b.reserve(limits, 100, T0) is None  # all 100 tokens were still there


def test_overshoot_is_only_the_prompt_underestimate() -> None:
    b, limits = Buckets(), Limits(tokens_per_minute=1000)
    assert b.reserve(limits, 1000, T0) is None
    b.settle(limits, refund=-50, now=T0)  # the prompt was 50 tokens longer than estimated
    refused = b.reserve(limits, 1, T0)
    assert refused is not None and refused.retry_after == pytest.approx(51 * 60 / 1000, abs=0.01)


def test_unlimited_takes_nothing() -> None:
    b = Buckets()
    for _ in range(1000):
        assert b.reserve(Limits(), 10**6, T0) is None


def test_scaled_limits_split_among_replicas() -> None:
    assert Limits(requests_per_minute=10, tokens_per_minute=1000).scaled(1 / 3) == Limits(
        requests_per_minute=3, tokens_per_minute=333
    )
    assert Limits(max_concurrent=1).scaled(0.25).max_concurrent == 1  # never below one
