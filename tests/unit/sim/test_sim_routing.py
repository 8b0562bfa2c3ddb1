"""The simulated gateway routes as the gateway does: each attempt's request is built by
``routing.ask`` with the gateway's counter and zone, so RoundRobin turns over the replicas and
same-zone replicas are preferred. Matrix: routing policy × the gateway zones of the stream,
over one pool of six replicas in three zones at a light load (replicas mostly idle)."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.replica import Request
from tokenfleet.sim.scenario import Scenario


def light_load(*, policy: str = "PrefixAware", zones: list[str] | None = None) -> Scenario:
    """Six replicas (two per zone), 4 requests a second of short answers, one shared prefix."""
    stream: dict[str, Any] = {
        "name": "chat",
        "class": "c",
        "rate": [{"at": 0, "rps": 4}],
        "inputTokens": {"mean": 300, "dist": "fixed"},
        "outputTokens": {"mean": 10, "dist": "fixed"},
        "sharedPrefix": {"share": 1.0, "groups": 1, "tokens": 256},
    }
    if zones is not None:
        stream["zones"] = zones
    return Scenario.model_validate(
        {
            "name": "routing",
            "durationSeconds": 60,
            "seed": 5,
            "performance": {"coldStartSeconds": 0},
            "pools": [
                {
                    "name": "p",
                    "spec": {
                        "zones": {"names": ["a", "b", "c"], "tolerateLoss": 0},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 6, "max": 6},
                        "autoscaling": {"enabled": False},
                        "routing": {"policy": policy},
                        "admission": {
                            "classes": [
                                {"name": "c", "priority": 1, "maxQueueDepth": 1000},
                            ]
                        },
                    },
                }
            ],
            "streams": [stream],
        }
    )


def served_by(sc: Scenario) -> tuple[Simulation, list[Request]]:
    sim = Simulation(sc, "static-peak")
    served: list[Request] = []
    sim.rec.watch = lambda req: served.append(req) if req.outcome == "served" else None
    sim.run()
    assert len(served) > 200
    assert sorted(r.zone for r in sim.pools["p"].ready) == ["a", "a", "b", "b", "c", "c"]
    return sim, served


def test_round_robin_turns_over_every_replica() -> None:
    sim, served = served_by(light_load(policy="RoundRobin"))
    per_replica = collections.Counter(r.replica.url for r in served if r.replica is not None)
    assert set(per_replica) == {r.url for r in sim.pools["p"].ready}
    assert max(per_replica.values()) - min(per_replica.values()) <= 1, per_replica


def test_prefix_aware_keeps_one_prefix_on_the_replicas_that_hold_it() -> None:
    """The contrast: the same traffic under PrefixAware stays where its prefix is cached."""
    _, served = served_by(light_load(policy="PrefixAware"))
    per_replica = collections.Counter(r.replica.url for r in served if r.replica is not None)
    assert len(per_replica) <= 2, per_replica


@pytest.mark.parametrize(
    ("zones", "expected"),
    [
        pytest.param(["a"], {"a"}, id="gateway-in-a-prefers-a"),
        pytest.param(["b", "c"], {"b", "c"}, id="gateways-in-b-and-c-avoid-a"),
    ],
)
def test_requests_prefer_replicas_in_their_gateways_zone(
    zones: list[str], expected: set[str]
) -> None:
    _, served = served_by(light_load(policy="LeastLoad", zones=zones))
    local = [r for r in served if r.replica is not None and r.replica.zone == r.zone]
    assert {r.zone for r in served} == set(zones)
    assert len(local) > 0.9 * len(served)  # the rest spilled: both local replicas were busy
    per_zone = collections.Counter(r.replica.zone for r in served if r.replica is not None)
    assert {z for z, n in per_zone.items() if n > 0.05 * len(served)} == expected, per_zone


def test_without_gateway_zones_requests_spread_over_every_zone() -> None:
    _, served = served_by(light_load(policy="LeastLoad"))
    per_zone = collections.Counter(r.replica.zone for r in served if r.replica is not None)
    assert set(per_zone) == {"a", "b", "c"}
    assert min(per_zone.values()) > 0.2 * len(served), per_zone
