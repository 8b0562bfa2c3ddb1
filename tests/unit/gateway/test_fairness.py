"""The virtual-token-counter scheduler: lift, charge, settle, pick, forget — and the shares it
produces when one tenant floods (table cases plus a small closed-loop replay, no clock)."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy import fairness
from tokenfleet.gateway.policy.fairness import Head, Weights


@pytest.mark.parametrize(
    ("counters", "tenant", "active", "want"),
    [
        pytest.param({}, "a", set(), {"a": 0.0}, id="first-tenant-starts-at-zero"),
        pytest.param({"b": 50.0}, "a", {"b"}, {"a": 50.0, "b": 50.0}, id="new-tenant-lifted"),
        pytest.param(
            {"a": 10.0, "b": 50.0, "c": 80.0},
            "a",
            {"b", "c"},
            {"a": 50.0, "b": 50.0, "c": 80.0},
            id="idle-tenant-banks-no-credit",
        ),
        pytest.param(
            {"a": 90.0, "b": 50.0}, "a", {"b"}, {"a": 90.0, "b": 50.0}, id="heavy-user-keeps-debt"
        ),
        pytest.param(
            {"a": 10.0, "b": 50.0}, "a", {"a", "b"}, {"a": 10.0, "b": 50.0}, id="active-unchanged"
        ),
    ],
)
def test_lift(
    counters: dict[str, float], tenant: str, active: set[str], want: dict[str, float]
) -> None:
    assert fairness.lift(counters, tenant=tenant, active=active) == want
    assert fairness.lift(counters, tenant=tenant, active=active) is not counters


@pytest.mark.parametrize(
    ("share", "amount", "want"),
    [
        pytest.param(1.0, 300.0, 300.0, id="share-1"),
        pytest.param(3.0, 300.0, 100.0, id="share-3-pays-a-third"),
        pytest.param(0.5, 300.0, 600.0, id="share-half-pays-double"),
    ],
)
def test_charge_divides_work_by_share(share: float, amount: float, want: float) -> None:
    assert fairness.charge({}, tenant="a", amount=amount, share=share) == {"a": want}


def test_charge_refuses_a_share_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="share must be positive"):
        fairness.charge({}, tenant="a", amount=1.0, share=0.0)


@pytest.mark.parametrize(
    ("reserved", "produced", "want"),
    [
        pytest.param(100, 100, 0.0, id="as-reserved"),
        pytest.param(100, 30, -140.0, id="cancelled-early-refunds-unmade-output"),
        pytest.param(100, 120, 40.0, id="more-than-reserved"),
    ],
)
def test_settle_corrects_the_output_part(reserved: int, produced: int, want: float) -> None:
    got = fairness.settle(
        {"a": 0.0}, tenant="a", reserved_output=reserved, produced_output=produced, share=1.0
    )
    assert got == {"a": want}


def test_work_weighs_output_twice_prompt_by_default() -> None:
    assert fairness.work(prompt_tokens=1000, output_tokens=100) == 1200.0
    assert fairness.work(prompt_tokens=10, output_tokens=1, weights=Weights(output=5)) == 15.0


@pytest.mark.parametrize(
    ("heads", "counters", "want"),
    [
        pytest.param([], {}, None, id="nobody-waits"),
        pytest.param([Head(tenant="a", ticket=9)], {"a": 1e9}, "a", id="alone-always-served"),
        pytest.param(
            [Head(tenant="a", ticket=1), Head(tenant="b", ticket=2)],
            {"a": 500.0, "b": 10.0},
            "b",
            id="lowest-counter",
        ),
        pytest.param(
            [Head(tenant="a", ticket=7), Head(tenant="b", ticket=3)],
            {"a": 5.0, "b": 5.0},
            "b",
            id="tie-oldest-ticket",
        ),
    ],
)
def test_pick(heads: list[Head], counters: dict[str, float], want: str | None) -> None:
    got = fairness.pick(heads, counters)
    assert (got.tenant if got else None) == want


def test_forget_drops_idle_tenants_and_rebases() -> None:
    got = fairness.forget({"a": 100.0, "b": 140.0, "gone": 3.0}, active={"a", "b"})
    assert got == {"a": 0.0, "b": 40.0}
    assert fairness.forget({"a": 1.0}, active=set()) == {}


def _replay(*, shares: dict[str, float], prompt: dict[str, int], steps: int) -> dict[str, float]:
    """Every tenant always has a request waiting; one slot; returns work served per tenant."""
    counters: dict[str, float] = {}
    for t in shares:
        counters = fairness.lift(counters, tenant=t, active=set(counters))
    served = dict.fromkeys(shares, 0.0)
    for ticket in range(steps):
        head = fairness.pick([Head(tenant=t, ticket=ticket) for t in shares], counters)
        assert head is not None
        amount = fairness.work(prompt_tokens=prompt[head.tenant], output_tokens=32)
        counters = fairness.charge(
            counters, tenant=head.tenant, amount=amount, share=shares[head.tenant]
        )
        served[head.tenant] += amount
    return served


def test_a_flooding_tenant_gets_its_share_of_work_not_of_requests() -> None:
    served = _replay(
        shares={"flood": 1.0, "small": 1.0}, prompt={"flood": 3000, "small": 300}, steps=2000
    )
    ratio = served["flood"] / served["small"]
    assert 0.9 < ratio < 1.1, served  # equal work, so "small" starts ~10x more requests


def test_shares_weight_the_split() -> None:
    served = _replay(shares={"gold": 3.0, "std": 1.0}, prompt={"gold": 500, "std": 500}, steps=4000)
    assert 2.8 < served["gold"] / served["std"] < 3.2, served


def test_alone_a_tenant_gets_every_slot() -> None:
    served = _replay(shares={"only": 1.0}, prompt={"only": 3000}, steps=100)
    assert served["only"] == 100 * fairness.work(prompt_tokens=3000, output_tokens=32)
