"""A Tenant's usage this period and its budget's used units, from the gateway's usage counters as
Prometheus reports their growth: which period a tenant is in, what each budget kind can be told
from tokens alone, an unreadable Prometheus leaving usage out; and the PromQL read. Priced per
pool: a hand-computed cost over priced, unpriced and foreign-currency pools, a currency budget's
limit, spent and remaining, and lastUsed that never moves back."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from tokenfleet.accounting import cost
from tokenfleet.api.tenant import UsageStatus
from tokenfleet.operator.plan import tenant_status
from tokenfleet.signals import queries

NOW = datetime.datetime(2026, 12, 17, 15, 30, tzinfo=datetime.UTC)
COUNTERS = {"requests": 12, "prompt_tokens": 3000, "completion_tokens": 400}


def tenant(budget: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"allowedModels": ["*"]}
    if budget is not None:
        spec["budget"] = budget
    return {"metadata": {"name": "t", "namespace": "ns", "generation": 1}, "spec": spec}


@pytest.mark.parametrize(
    ("budget", "start", "used"),
    [
        pytest.param(None, "2026-12-01T00:00:00Z", None, id="no-budget-monthly-usage"),
        pytest.param(
            {"period": "Daily", "tokens": 10000, "action": "Reject"},
            "2026-12-17T00:00:00Z",
            3400,
            id="daily-token-budget",
        ),
        pytest.param(
            {"tokens": 10000, "action": "Notify"},
            "2026-12-01T00:00:00Z",
            3400,
            id="monthly-token-budget",
        ),
        pytest.param(
            {"amount": "5", "currency": "USD", "action": "Reject"},
            "2026-12-01T00:00:00Z",
            None,
            id="currency-budget-needs-prices",
        ),
    ],
)
def test_usage_of_the_current_period(
    budget: dict[str, Any] | None, start: str, used: int | None
) -> None:
    body = tenant(budget)
    period = tenant_status.period_of(body, NOW)
    use, got = tenant_status.usage_of(body=body, counters=COUNTERS, period=period)
    assert use == UsageStatus(
        period_start=start, requests=12, prompt_tokens=3000, completion_tokens=400
    )
    assert got == used


def test_an_unreadable_prometheus_leaves_usage_out() -> None:
    body = tenant({"tokens": 10, "action": "Reject"})
    period = tenant_status.period_of(body, NOW)
    assert tenant_status.usage_of(body=body, counters=None, period=period) == (None, None)


def test_a_tenant_without_traffic_used_nothing() -> None:
    body = tenant({"tokens": 10, "action": "Reject"})
    use, used = tenant_status.usage_of(
        body=body, counters={}, period=tenant_status.period_of(body, NOW)
    )
    assert use is not None and (use.requests, used) == (0, 0)


def test_the_status_carries_usage_and_the_budget_state() -> None:
    body = tenant({"tokens": 3000, "action": "Notify"})
    use, used = tenant_status.usage_of(
        body=body, counters=COUNTERS, period=tenant_status.period_of(body, NOW)
    )
    status, events = tenant_status.plan_tenant(body=body, now=NOW, usage=use, budget_used=used)
    assert status.usage == use
    assert status.budget is not None and status.budget.state == "Exhausted"
    assert [e.reason for e in events] == ["BudgetSpent"]


def test_the_query_sums_every_model_pool_outcome_and_replica_by_tenant() -> None:
    got = queries.tenant_usage("u", 3600)
    assert got == (
        "sum by (tenant) (increase(u[3600s]) + (min_over_time(u[3600s]) unless u offset 3600s)"
        " or increase(u[3600s]))"
    )
    assert "[1s]" in queries.tenant_usage("u", 0)


# Hand-computed: ns/big at 2.00/M prompt and 8.00/M output, ns/small at 0.25/M and 1.00/M (USD),
# ns/euro at 1.00/M and 1.00/M (EUR), ns/free unpriced.
RATES: dict[str, cost.Rate | None] = {
    "ns/big": cost.Rate(input_per_million=2.0, output_per_million=8.0),
    "ns/small": cost.Rate(input_per_million=0.25, output_per_million=1.0),
    "ns/euro": cost.Rate(input_per_million=1.0, output_per_million=1.0, currency="EUR"),
    "ns/free": None,
}
BY_POOL = {
    # 1,000,000 × 2 + 100,000 × 8 = 2,800,000 micro-USD = 2.80 USD
    "ns/big": {"requests": 10, "prompt_tokens": 1_000_000, "completion_tokens": 100_000},
    # 400,000 × 0.25 + 50,000 × 1 = 150,000 micro-USD = 0.15 USD → 2.95 USD in all
    "ns/small": {"requests": 5, "prompt_tokens": 400_000, "completion_tokens": 50_000},
    # 3 × 1 + 7 × 1 = 10 micro-EUR
    "ns/euro": {"requests": 1, "prompt_tokens": 3, "completion_tokens": 7},
    "ns/free": {"requests": 2, "prompt_tokens": 500, "completion_tokens": 500},  # costs nothing
}


def test_totals_sum_the_pools() -> None:
    assert tenant_status.totals(BY_POOL) == {
        "requests": 18,
        "prompt_tokens": 1_400_503,
        "completion_tokens": 150_507,
    }


def usage(
    body: dict[str, Any], by_pool: dict[str, Any] | None = None
) -> tuple[UsageStatus | None, int | None]:
    """``usage_of`` over ``by_pool`` (default every pool of BY_POOL) at NOW's period."""
    pools = BY_POOL if by_pool is None else by_pool
    return tenant_status.usage_of(
        body=body,
        counters=tenant_status.totals(pools),
        period=tenant_status.period_of(body, NOW),
        by_pool=pools,
        rates=RATES,
    )


@pytest.mark.parametrize(
    ("budget", "used"),
    [
        pytest.param(None, None, id="no-budget-cost-only"),
        pytest.param({"tokens": 10_000_000}, 1_551_010, id="token-budget-counts-every-pool"),
        pytest.param({"amount": 5, "action": "Notify"}, 2_950_000, id="usd-budget-usd-pools"),
        pytest.param({"amount": 5, "currency": "EUR"}, 10, id="eur-budget-eur-pool"),
    ],
)
def test_a_hand_computed_cost_and_a_currency_budgets_used_units(
    budget: dict[str, Any] | None, used: int | None
) -> None:
    use, got = usage(tenant(budget))
    assert use is not None and use.cost == "0.00001 EUR, 2.95 USD"
    assert got == used


def test_unpriced_usage_has_no_cost_and_charges_a_currency_budget_nothing() -> None:
    use, got = usage(tenant({"amount": 5}), {"ns/free": BY_POOL["ns/free"]})
    assert use is not None and (use.cost, got) == ("", 0)


def test_a_spent_currency_budget_in_status() -> None:
    body = tenant({"amount": 2.5, "action": "Notify", "period": "Daily"})
    use, used = usage(body)
    status, events = tenant_status.plan_tenant(body=body, now=NOW, usage=use, budget_used=used)
    assert status.budget is not None
    assert (status.budget.limit, status.budget.spent, status.budget.remaining) == (
        "2.50 USD",
        "2.95 USD",
        "0.00 USD",
    )
    assert (status.budget.state, status.budget.used_percent, status.budget.resets_at) == (
        "Exhausted",
        118,
        "2026-12-18T00:00:00Z",
    )
    assert [e.reason for e in events] == ["BudgetSpent"]
    assert "118% of the daily budget used" in events[0].message


def test_pool_rates_from_the_pools_specs() -> None:
    def pool(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": name}, "spec": spec}

    prices = {"perGpuHour": 1, "perMillionInputTokens": 2, "perMillionOutputTokens": 8}
    rates = tenant_status.pool_rates(
        [pool("big", {"cost": prices}), pool("plain", {}), pool("bad", {"replicas": "x"})]
    )
    assert rates == {
        "ns/big": cost.Rate(input_per_million=2.0, output_per_million=8.0),
        "ns/plain": None,
    }


EARLIER = datetime.datetime(2026, 12, 17, 9, 0, 5, 700_000, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("old", "seen", "expected"),
    [
        pytest.param(None, None, None, id="never-served"),
        pytest.param(None, EARLIER, "2026-12-17T09:00:05Z", id="first-seen"),
        pytest.param("2026-12-17T08:00:00Z", EARLIER, "2026-12-17T09:00:05Z", id="moves-on"),
        pytest.param("2026-12-17T10:00:00Z", EARLIER, "2026-12-17T10:00:00Z", id="never-back"),
        pytest.param("2026-12-17T10:00:00Z", None, "2026-12-17T10:00:00Z", id="out-of-window"),
        pytest.param("garbage", EARLIER, "2026-12-17T09:00:05Z", id="unreadable-old"),
    ],
)
def test_last_used(old: str | None, seen: datetime.datetime | None, expected: str | None) -> None:
    assert tenant_status.latest(old, seen) == expected
    body = {**tenant(), "status": {"lastUsed": old}} if old else tenant()
    status, _ = tenant_status.plan_tenant(body=body, now=NOW, last_used=seen)
    assert status.last_used == expected


def test_the_queries_by_pool_and_of_the_last_served_gauge() -> None:
    assert queries.tenant_usage("u", 60, by="tenant, pool").startswith(
        "sum by (tenant, pool) (increase(u[60s])"
    )
    assert queries.tenant_last_served(86400) == (
        "max by (tenant) (max_over_time(tokenfleet_usage_last_served_timestamp_seconds[86400s]))"
    )


def test_plan_from_what_a_pass_read() -> None:
    body = tenant({"amount": 2.5, "action": "Notify", "period": "Daily"})
    today = tenant_status.period_of(body, NOW).start
    inputs = tenant_status.Inputs(
        key_secrets=None,
        usage={today: {"ns/t": BY_POOL, "ns/other": {"ns/big": {"requests": 1}}}},
        last_served={"ns/t": EARLIER},
        rates=RATES,
    )
    status, _ = tenant_status.plan_from(body=body, inputs=inputs, now=NOW)
    assert status.usage is not None and (status.usage.requests, status.usage.cost) == (
        18,
        "0.00001 EUR, 2.95 USD",
    )
    assert status.budget is not None and status.budget.spent == "2.95 USD"
    assert status.last_used == "2026-12-17T09:00:05Z"
    # Prometheus did not answer for this period: usage and budget left out, not zero.
    unread = dataclasses.replace(inputs, usage={}, last_served={})
    status, _ = tenant_status.plan_from(body=body, inputs=unread, now=NOW)
    assert (status.usage, status.budget, status.last_used) == (None, None, None)
