"""A Tenant's usage this period and its budget's used units, from the gateway's usage counters as
Prometheus reports their growth: which period a tenant is in, what each budget kind can be told
from tokens alone, an unreadable Prometheus leaving usage out; and the PromQL read."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

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
