"""How many processes share the engines' slots (policy.fleet): the registry's count when it
answers, else the last one, else the configured one; and a new count re-divides every pool's
slots in the process's live catalog (the registry itself runs against real Redis:
tests/integration/test_gateway_fleet.py)."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.catalog import Catalog, Pool
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.policy import fleet, routing


@pytest.mark.parametrize(
    ("counted", "last", "configured", "use"),
    [
        pytest.param(3, None, 1, 3, id="the-registry-answers"),
        pytest.param(0, 2, 1, 1, id="after-leaving-at-least-itself"),
        pytest.param(None, 3, 6, 3, id="redis-away-keeps-the-last-count"),
        pytest.param(None, None, 6, 6, id="never-answered-the-configured-count"),
        pytest.param(None, None, 0, 1, id="configured-at-least-one"),
    ],
)
def test_count_to_use(counted: int | None, last: int | None, configured: int, use: int) -> None:
    assert fleet.count_to_use(counted, last=last, configured=configured) == use


def test_the_fleet_key_names_the_fleet() -> None:
    assert fleet.key("prod/tf") == "tokenfleet:gateway-processes:prod/tf"
    assert fleet.TTL_SECONDS >= 2 * fleet.BEAT_SECONDS  # a late beat is not a death


def test_a_new_count_divides_every_pools_slots_again() -> None:
    live = Live(processes=1)
    endpoints = [
        routing.Endpoint(url=f"http://10.0.0.{i}:8000", models=frozenset({"m"}), pool="ns/chat",
                         max_concurrency=8)
        for i in range(3)
    ]  # fmt: skip
    pool = Pool(key="ns/chat", classes={}, max_input_tokens=4096)
    live.swap(Catalog(pools={"ns/chat": pool}, endpoints=routing.Snapshot(tuple(endpoints))))
    assert live.capacity("ns/chat") == 24
    assert live.set_processes(3) is True
    assert live.capacity("ns/chat") == 8
    assert live.set_processes(3) is False  # unchanged: nothing recomputed
    assert live.set_processes(50) is True
    assert live.capacity("ns/chat") == 1  # never 0 while the pool has slots
