"""Prefix hashing and the bounded index; retry budget, backoff and outlier ejection tables."""

from __future__ import annotations

import random

import pytest

from tokenfleet.gateway.policy import prefix, resilience
from tokenfleet.gateway.policy.resilience import BudgetPolicy, EjectionPolicy, Event, Health

DOC = "".join(chr(65 + i % 26) for i in range(4096))


@pytest.mark.parametrize(
    ("a", "b", "shared"),
    [
        pytest.param(dict(text=DOC), dict(text=DOC), 16, id="same-prompt"),
        pytest.param(dict(text=DOC), dict(text=DOC[:1024] + "x" * 3072), 4, id="shared-opening"),
        pytest.param(dict(text=DOC), dict(text="x" + DOC[1:]), 0, id="differs-at-start"),
        pytest.param(dict(text=DOC), dict(text=DOC, salt="other"), 0, id="salt-isolates"),
        pytest.param(dict(text=DOC), dict(text=DOC, model="m2"), 0, id="model-isolates"),
    ],
)
def test_block_hashes_share_exactly_the_common_prefix(
    a: dict[str, str], b: dict[str, str], shared: int
) -> None:
    def hashes(text: str, model: str = "m", salt: str = "s") -> tuple[bytes, ...]:
        return prefix.block_hashes(text, model=model, salt=salt)

    ha, hb = hashes(**a), hashes(**b)
    common = sum(1 for x, y in zip(ha, hb, strict=False) if x == y)
    assert common == shared


def test_partial_blocks_and_long_prompts() -> None:
    assert prefix.block_hashes("x" * 255, model="m", salt="s") == ()
    assert len(prefix.block_hashes("x" * 100_000, model="m", salt="s")) == prefix.MAX_BLOCKS


def test_index_matches_leading_blocks_per_endpoint() -> None:
    index = prefix.PrefixIndex()
    h = prefix.block_hashes(DOC, model="m", salt="s")
    index.record(h[:4], "a")
    index.record(h, "b")
    got = index.match(h)
    assert got.blocks == {"a": 4, "b": 16} and got.total == 16
    assert got.fraction("a") == 0.25
    assert index.match(prefix.block_hashes("z" * 1024, model="m", salt="s")).blocks == {}
    index.forget("b")
    assert index.match(h).blocks == {"a": 4}


def test_index_memory_is_bounded() -> None:
    index = prefix.PrefixIndex(capacity=100, holders=2)
    for i in range(50):
        index.record(prefix.block_hashes(f"{i:04}" * 256, model="m", salt="s"), f"e{i % 5}")
    assert len(index) == 100
    h = prefix.block_hashes("0049" * 256, model="m", salt="s")
    index.record(h, "x")
    index.record(h, "y")
    assert set(index.match(h).blocks) == {"x", "y"}  # only the two most recent holders kept


def run_budget(requests: int, failures_each: int, policy: BudgetPolicy) -> int:
    budget, retries = resilience.Budget(), 0
    for i in range(requests):
        now = i * 0.01
        budget = resilience.count_request(budget, now=now, policy=policy)
        for _ in range(failures_each):
            spent = resilience.try_retry(budget, now=now, policy=policy)
            if spent is None:
                break
            budget, retries = spent, retries + 1
    return retries


@pytest.mark.parametrize(
    ("requests", "failures_each", "policy", "max_retries"),
    [
        pytest.param(1000, 2, BudgetPolicy(), 103, id="outage-capped-at-10pct"),
        pytest.param(1000, 2, BudgetPolicy(ratio=0.2, min_retries=0), 200, id="ratio-configurable"),
        pytest.param(2, 1, BudgetPolicy(), 2, id="quiet-gateway-may-retry"),
    ],
)
def test_retry_budget(
    requests: int, failures_each: int, policy: BudgetPolicy, max_retries: int
) -> None:
    got = run_budget(requests, failures_each, policy)
    assert got <= max_retries
    assert got >= min(max_retries, requests * failures_each) * 0.9


def test_retry_budget_slides() -> None:
    policy = BudgetPolicy(ratio=0.0, min_retries=1, window=10)
    b = resilience.count_request(resilience.Budget(), now=0, policy=policy)
    spent = resilience.try_retry(b, now=0, policy=policy)
    assert spent is not None
    assert resilience.try_retry(spent, now=5, policy=policy) is None
    assert resilience.try_retry(spent, now=11, policy=policy) is not None


def test_backoff_is_jittered_exponential_and_capped() -> None:
    rng = random.Random(2)
    waits = [
        resilience.backoff(a, rng=rng, base=0.1, cap=0.3) for a in (1, 2, 3, 8) for _ in range(50)
    ]
    assert all(0 <= w <= 0.3 for w in waits)
    assert max(waits[:50]) <= 0.1 and len(set(waits)) > 100


P = EjectionPolicy(consecutive=3, min_requests=10, error_rate=0.5, base_ejection=5, window=10)


def feed(
    outcomes: str, *, start: float = 0.0, health: Health = resilience.HEALTHY
) -> tuple[Health, list[Event]]:
    events = []
    for i, c in enumerate(outcomes):
        health, event = resilience.observe(health, ok=c == "+", now=start + i * 0.1, policy=P)
        events.append(event)
    return health, events


@pytest.mark.parametrize(
    ("outcomes", "ejected"),
    [
        pytest.param("+++++", False, id="healthy"),
        pytest.param("--+--+", False, id="no-three-in-a-row-low-volume"),
        pytest.param("+---", True, id="consecutive"),
        pytest.param("+-+-+-+-+-", True, id="error-rate"),
        pytest.param("++++++++-+", False, id="low-error-rate"),
    ],
)
def test_ejection(outcomes: str, ejected: bool) -> None:
    health, events = feed(outcomes)
    assert (Event.EJECTED in events) == ejected
    assert bool(resilience.ejected({"a": health}, now=len(outcomes) * 0.1)) == ejected


def test_half_open_probe_then_growing_ejection() -> None:
    health, _ = feed("---")
    assert health.ejections == 1 and health.ejected_until == pytest.approx(5.2)
    assert resilience.ejected({"a": health}, now=5.0) == {"a"}
    assert resilience.ejected({"a": health}, now=5.3) == frozenset()  # due for a probe
    probing = resilience.chosen(health, now=5.3)
    assert resilience.ejected({"a": probing}, now=5.4) == {"a"}  # one probe at a time
    again, event = resilience.observe(probing, ok=False, now=5.5, policy=P)
    assert event == Event.EJECTED and again.ejections == 2
    assert again.ejected_until == pytest.approx(15.5)  # twice as long
    probing = resilience.chosen(again, now=16)
    back, event = resilience.observe(probing, ok=True, now=16.1, policy=P)
    assert event == Event.READMITTED and not resilience.ejected({"a": back}, now=16.2)
    assert resilience.chosen(back, now=17) == back  # a readmitted endpoint is not probed again
    later, _ = feed("---", start=1000, health=back)
    assert later.ejections == 1  # forgiven after a long quiet spell


def test_a_lost_probe_does_not_block_forever() -> None:
    health, _ = feed("---")
    probing = resilience.chosen(health, now=6)
    assert resilience.ejected({"a": probing}, now=6 + resilience.PROBE_TIMEOUT + 1) == frozenset()
