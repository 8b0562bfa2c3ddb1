"""Budgets across gateway replicas, on a real redis-server: two stores (two replicas) racing for
the last units of a Reject budget never overspend; Downgrade and Notify keep counting and act;
settlement refunds what was not used; the next period starts from zero; the script's count
equals Tally's, the Python reference, after the same operations."""

from __future__ import annotations

import asyncio
import datetime
import itertools

from support.gateway import Redis
from tokenfleet.accounting import budget
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway.budget_store import BudgetStore

NOW = datetime.datetime(2026, 12, 1, 11, 0, tzinfo=datetime.UTC)
_tenants = itertools.count()


def _tenant() -> str:
    return f"ns/t{next(_tenants)}"


def test_two_replicas_never_overspend_a_reject_budget(redis: Redis) -> None:
    spec = Budget(tokens=1000, action="Reject", period="Daily")
    tenant = _tenant()

    async def race() -> list[budget.Verdict]:
        a, b = BudgetStore(redis.url), BudgetStore(redis.url)
        calls = [
            (a if i % 2 else b).reserve(tenant=tenant, spec=spec, amount=100, now=NOW)
            for i in range(40)
        ]
        results = await asyncio.gather(*calls)
        await a.close()
        await b.close()
        return [v for v, _ in results]

    verdicts = asyncio.run(race())
    assert sum(v.serve for v in verdicts) == 10
    refused = [v for v in verdicts if not v.serve]
    assert len(refused) == 30 and refused[0].retry_after == 13 * 3600
    assert "resets at 2026-12-02T00:00:00Z" in refused[0].message


def test_actions_settlement_and_the_next_period(redis: Redis) -> None:
    async def scenario() -> None:
        store = BudgetStore(redis.url)
        local = BudgetStore(None)  # the same operations through Tally
        down = Budget(tokens=300, action="Downgrade", downgradeTo="small", period="Daily")
        tenant = _tenant()
        for s in (store, local):
            v1, h1 = await s.reserve(tenant=tenant, spec=down, amount=200, now=NOW)
            assert (v1.serve, v1.model) == (True, None)
            assert await s.settle(h1, used=120) == 120  # 80 refunded
            v2, h2 = await s.reserve(tenant=tenant, spec=down, amount=200, now=NOW)
            assert (v2.serve, v2.model, v2.exceeded) == (True, "small", True)  # 120+200 > 300
            assert await s.settle(h2, used=200) == 320  # usage goes on counting
            tomorrow = NOW + datetime.timedelta(days=1)
            v3, _ = await s.reserve(tenant=tenant, spec=down, amount=200, now=tomorrow)
            assert v3.model is None and not v3.exceeded
        notify = Budget(tokens=10, action="Notify")
        v, _ = await store.reserve(tenant=_tenant(), spec=notify, amount=50, now=NOW)
        assert (v.serve, v.exceeded) == (True, True)
        await store.close()

    asyncio.run(scenario())
