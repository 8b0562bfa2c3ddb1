"""Every Redis-backed store declares, as data, what it does while Redis does not answer, on the
one backend its process shares: the quota and the budget fail open or closed as
``--quota-failure`` says, the response cache misses, the usage ledger buffers and replays. The
app factory builds one backend and puts every store on it. (What each mode does with a real
Redis stopped and started again: tests/integration/test_gateway_redis_outage.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from tokenfleet.gateway.app import create_app
from tokenfleet.gateway.budget_store import BudgetStore
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.quota_store import QuotaStore
from tokenfleet.gateway.redis_backend import Backend, Failure, Mode
from tokenfleet.gateway.response_store import ResponseStore
from tokenfleet.gateway.state import STATE
from tokenfleet.gateway.usage_ledger import UsageLedger

URL = "redis://127.0.0.1:6379/0"  # never dialled: building a store does not connect


@pytest.mark.parametrize(
    ("build", "store", "mode"),
    [
        pytest.param(
            lambda b: QuotaStore(backend=b, failure="open", replicas=1).failure,
            "quota",
            Mode.OPEN,
            id="quota-open",
        ),
        pytest.param(
            lambda b: QuotaStore(backend=b, failure="closed", replicas=1).failure,
            "quota",
            Mode.CLOSED,
            id="quota-closed",
        ),
        pytest.param(
            lambda b: BudgetStore(backend=b, failure="open").failure,
            "budget",
            Mode.OPEN,
            id="budget-follows-open",
        ),
        pytest.param(
            lambda b: BudgetStore(backend=b, failure="closed").failure,
            "budget",
            Mode.CLOSED,
            id="budget-follows-closed",
        ),
        pytest.param(
            lambda b: ResponseStore(backend=b).failure, "response cache", Mode.MISS, id="cache"
        ),
        pytest.param(
            lambda b: UsageLedger(backend=b, registry=CollectorRegistry()).failure,
            "usage ledger",
            Mode.BUFFER,
            id="usage-ledger",
        ),
    ],
)
def test_each_store_declares_its_failure_mode(
    build: Callable[[Backend], Failure], store: str, mode: Mode
) -> None:
    backend = Backend(URL)
    failure = build(backend)
    assert (failure.store, failure.mode) == (store, mode)
    assert backend.failures == [failure]  # logged with every outage


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_the_app_puts_every_store_on_one_backend(policy: str) -> None:
    settings = Settings(redis_url=URL, quota_failure=policy)  # type: ignore[arg-type]
    state = create_app(settings, metrics_registry=CollectorRegistry())[STATE]
    declared = {f.store: f.mode for f in state.redis.failures}
    assert declared == {
        "quota": Mode(policy),
        "budget": Mode(policy),
        "response cache": Mode.MISS,
        "usage ledger": Mode.BUFFER,
    }


def test_without_redis_nothing_is_shared_and_nothing_fails() -> None:
    backend = Backend(None)
    assert not backend.configured and not backend.usable() and backend.healthy
