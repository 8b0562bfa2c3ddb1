"""Placement as a table: zones × health × warm floor × tolerateLoss × max, ties, zero and one
zone; then the surge-then-drain transition and zone health verdicts."""

from __future__ import annotations

import collections
import datetime

import pytest

from tokenfleet.operator.policy import placement, zones
from tokenfleet.operator.policy.placement import Why, Zone


def zs(*spec: str, current: dict[str, int] | None = None) -> list[Zone]:
    """Zones from names; a trailing '!' marks a lost zone."""
    current = current or {}
    return [
        Zone(name=s.rstrip("!"), healthy=not s.endswith("!"), current=current.get(s.rstrip("!"), 0))
        for s in spec
    ]


ABC = ("a", "b", "c")

CASES = [
    # id, demand, zones, min, max, warm, tolerate, expected per zone, why
    ("min-6-even", 0, zs(*ABC), 6, 24, 1, 0, {"a": 2, "b": 2, "c": 2}, Why.MIN_REPLICAS),
    (
        "min-7-remainder-deterministic",
        0,
        zs(*ABC),
        7,
        24,
        1,
        0,
        {"a": 3, "b": 2, "c": 2},
        Why.MIN_REPLICAS,
    ),
    ("min-8", 0, zs(*ABC), 8, 24, 1, 0, {"a": 3, "b": 3, "c": 2}, Why.MIN_REPLICAS),
    (
        "min-2-warm-floor-decides",
        0,
        zs(*ABC),
        2,
        24,
        1,
        0,
        {"a": 1, "b": 1, "c": 1},
        Why.WARM_FLOOR,
    ),
    ("warm-2-per-zone", 0, zs(*ABC), 3, 24, 2, 0, {"a": 2, "b": 2, "c": 2}, Why.WARM_FLOOR),
    ("warm-0-min-0", 0, zs(*ABC), 0, 24, 0, 0, {"a": 0, "b": 0, "c": 0}, Why.MIN_REPLICAS),
    ("demand-above-min", 10, zs(*ABC), 6, 24, 1, 0, {"a": 4, "b": 3, "c": 3}, Why.DEMAND),
    ("demand-below-min", 2, zs(*ABC), 6, 24, 1, 0, {"a": 2, "b": 2, "c": 2}, Why.MIN_REPLICAS),
    ("demand-capped-at-max", 40, zs(*ABC), 6, 24, 1, 0, {"a": 8, "b": 8, "c": 8}, Why.MAX_REPLICAS),
    ("max-caps-remainder", 0, zs(*ABC), 5, 5, 1, 0, {"a": 2, "b": 2, "c": 1}, Why.MIN_REPLICAS),
    ("tolerate-1-of-3", 0, zs(*ABC), 6, 24, 1, 1, {"a": 3, "b": 3, "c": 3}, Why.ZONE_LOSS_HEADROOM),
    (
        "tolerate-1-of-3-min-4",
        0,
        zs(*ABC),
        4,
        24,
        1,
        1,
        {"a": 2, "b": 2, "c": 2},
        Why.ZONE_LOSS_HEADROOM,
    ),
    ("tolerate-2-of-3", 0, zs(*ABC), 3, 24, 1, 2, {"a": 3, "b": 3, "c": 3}, Why.ZONE_LOSS_HEADROOM),
    (
        "tolerate-1-of-4",
        0,
        zs("a", "b", "c", "d"),
        6,
        24,
        1,
        1,
        {"a": 2, "b": 2, "c": 2, "d": 2},
        Why.ZONE_LOSS_HEADROOM,
    ),
    (
        "tolerate-headroom-capped",
        0,
        zs(*ABC),
        6,
        7,
        1,
        1,
        {"a": 3, "b": 2, "c": 2},
        Why.MAX_REPLICAS,
    ),
    (
        "tolerate-all-zones-clamped",
        0,
        zs("a", "b"),
        2,
        24,
        1,
        5,
        {"a": 2, "b": 2},
        Why.ZONE_LOSS_HEADROOM,
    ),
    (
        "one-zone-lost-moves-share",
        0,
        zs("a", "b!", "c"),
        6,
        24,
        1,
        0,
        {"a": 3, "b": 0, "c": 3},
        Why.MIN_REPLICAS,
    ),
    (
        "one-zone-lost-odd",
        0,
        zs("a", "b!", "c"),
        7,
        24,
        1,
        0,
        {"a": 4, "b": 0, "c": 3},
        Why.MIN_REPLICAS,
    ),
    (
        "two-zones-lost",
        0,
        zs("a!", "b!", "c"),
        6,
        24,
        1,
        0,
        {"a": 0, "b": 0, "c": 6},
        Why.MIN_REPLICAS,
    ),
    (
        "lost-zone-spends-the-tolerance",
        0,
        zs("a", "b!", "c"),
        6,
        24,
        1,
        1,
        {"a": 3, "b": 0, "c": 3},
        Why.MIN_REPLICAS,
    ),
    (
        "tolerate-2-one-lost",
        0,
        zs("a", "b!", "c", "d"),
        6,
        24,
        1,
        2,
        {"a": 3, "b": 0, "c": 3, "d": 3},
        Why.ZONE_LOSS_HEADROOM,
    ),
    (
        "all-zones-lost",
        0,
        zs("a!", "b!", "c!"),
        6,
        24,
        1,
        0,
        {"a": 0, "b": 0, "c": 0},
        Why.NO_HEALTHY_ZONE,
    ),
    ("no-zones", 0, [], 6, 24, 1, 0, {}, Why.NO_HEALTHY_ZONE),
    ("one-zone", 0, zs("only"), 4, 24, 1, 1, {"only": 4}, Why.MIN_REPLICAS),
    ("one-zone-warm-floor", 0, zs("only"), 0, 24, 2, 0, {"only": 2}, Why.WARM_FLOOR),
    (
        "tie-favours-zone-with-more",
        0,
        zs(*ABC, current={"c": 5}),
        7,
        24,
        1,
        0,
        {"a": 2, "b": 2, "c": 3},
        Why.MIN_REPLICAS,
    ),
    (
        "tie-two-remainders",
        0,
        zs(*ABC, current={"b": 1, "c": 1}),
        8,
        24,
        1,
        0,
        {"a": 2, "b": 3, "c": 3},
        Why.MIN_REPLICAS,
    ),
    (
        "warm-floor-capped-by-max",
        0,
        zs(*ABC),
        0,
        2,
        1,
        0,
        {"a": 1, "b": 1, "c": 0},
        Why.MAX_REPLICAS,
    ),
    (
        "zone-names-unsorted",
        0,
        zs("c", "a", "b"),
        7,
        24,
        1,
        0,
        {"a": 3, "b": 2, "c": 2},
        Why.MIN_REPLICAS,
    ),
]


@pytest.mark.parametrize(
    ("demand", "zone_list", "min_r", "max_r", "warm", "tolerate", "expected", "why"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_place(
    demand: int,
    zone_list: list[Zone],
    min_r: int,
    max_r: int,
    warm: int,
    tolerate: int,
    expected: dict[str, int],
    why: Why,
) -> None:
    got = placement.place(
        demand=demand,
        zones=zone_list,
        min_replicas=min_r,
        max_replicas=max_r,
        warm_per_zone=warm,
        tolerate_loss=tolerate,
    )
    assert got.per_zone == expected
    assert got.why == why, got.message
    assert got.total == sum(expected.values())
    assert got.total <= max_r
    assert got.message


@pytest.mark.parametrize("tolerate", [0, 1, 2])
@pytest.mark.parametrize("min_r", [0, 1, 5, 9, 13])
def test_headroom_really_survives_losing_the_largest_zones(tolerate: int, min_r: int) -> None:
    got = placement.place(
        demand=0,
        zones=zs(*ABC),
        min_replicas=min_r,
        max_replicas=1000,
        warm_per_zone=0,
        tolerate_loss=tolerate,
    )
    largest = sorted(got.per_zone.values(), reverse=True)[:tolerate]
    assert got.total - sum(largest) >= min_r
    assert max(got.per_zone.values()) - min(got.per_zone.values()) <= 1  # as even as possible


def test_inputs_are_not_mutated() -> None:
    zone_list = zs(*ABC)
    before = list(zone_list)
    placement.place(
        demand=5, zones=zone_list, min_replicas=1, max_replicas=9, warm_per_zone=1, tolerate_loss=1
    )
    assert zone_list == before


def z(name: str, current: int, ready: int, healthy: bool = True) -> Zone:
    return Zone(name=name, healthy=healthy, current=current, ready=ready)


@pytest.mark.parametrize(
    ("target", "zone_list", "expected"),
    [
        pytest.param(
            {"a": 2, "b": 2, "c": 2},
            [z("a", 3, 3), z("b", 0, 0), z("c", 3, 3)],
            {"a": 3, "b": 2, "c": 3},
            id="zone-back-surge-first",
        ),
        pytest.param(
            {"a": 2, "b": 2, "c": 2},
            [z("a", 3, 3), z("b", 2, 1), z("c", 3, 3)],
            {"a": 3, "b": 2, "c": 3},
            id="zone-back-still-starting",
        ),
        pytest.param(
            {"a": 2, "b": 2, "c": 2},
            [z("a", 3, 3), z("b", 2, 2), z("c", 3, 3)],
            {"a": 2, "b": 2, "c": 2},
            id="zone-back-ready-then-drain",
        ),
        pytest.param(
            {"a": 3, "b": 0, "c": 3},
            [z("a", 2, 2), z("b", 2, 0, healthy=False), z("c", 2, 2)],
            {"a": 3, "b": 0, "c": 3},
            id="zone-lost-drains-at-once",
        ),
        pytest.param(
            {"a": 1, "b": 1, "c": 1},
            [z("a", 2, 2), z("b", 2, 2), z("c", 2, 2)],
            {"a": 1, "b": 1, "c": 1},
            id="plain-scale-down",
        ),
        pytest.param(
            {"a": 3, "b": 3, "c": 3},
            [z("a", 2, 2), z("b", 2, 2), z("c", 2, 2)],
            {"a": 3, "b": 3, "c": 3},
            id="plain-scale-up",
        ),
        pytest.param({"a": 2, "b": 2}, [z("a", 2, 2), z("b", 2, 2)], {"a": 2, "b": 2}, id="steady"),
    ],
)
def test_transition(
    target: dict[str, int], zone_list: list[Zone], expected: dict[str, int]
) -> None:
    assert placement.transition(target=target, zones=zone_list) == expected


NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def node(name: str, zone: str, ready: bool = True, offers: bool = True) -> zones.Node:
    return zones.Node(name=name, zone=zone, ready=ready, offers_accelerator=offers)


@pytest.mark.parametrize(
    ("wanted", "node_list", "unschedulable", "expected"),
    [
        pytest.param(
            [],
            [node("n1", "a"), node("n2", "b")],
            {},
            {"a": "Healthy", "b": "Healthy"},
            id="discovered",
        ),
        pytest.param(
            ["a", "b"],
            [node("n1", "a"), node("n2", "b", ready=False)],
            {},
            {"a": "Healthy", "b": "NodesNotReady"},
            id="not-ready",
        ),
        pytest.param(
            ["a", "b"],
            [node("n1", "a")],
            {},
            {"a": "Healthy", "b": "NoMatchingNodes"},
            id="no-nodes-left",
        ),
        pytest.param(
            ["a"],
            [node("n1", "a", offers=False)],
            {},
            {"a": "NoMatchingNodes"},
            id="wrong-accelerator",
        ),
        pytest.param([], [node("n1", "a", offers=False)], {}, {}, id="nothing-offers-it"),
        pytest.param(
            ["a"],
            [node("n1", "a"), node("n2", "a", ready=False)],
            {},
            {"a": "Healthy"},
            id="one-ready-node-is-enough",
        ),
        pytest.param(
            ["a"],
            [node("n1", "a")],
            {"a": NOW - datetime.timedelta(seconds=30)},
            {"a": "Healthy"},
            id="unschedulable-within-grace",
        ),
        pytest.param(
            ["a"],
            [node("n1", "a")],
            {"a": NOW - datetime.timedelta(seconds=120)},
            {"a": "Unschedulable"},
            id="unschedulable-past-grace",
        ),
    ],
)
def test_zone_health(
    wanted: list[str],
    node_list: list[zones.Node],
    unschedulable: dict[str, datetime.datetime],
    expected: dict[str, str],
) -> None:
    got = zones.assess(wanted=wanted, nodes=node_list, unschedulable_since=unschedulable, now=NOW)
    assert {v.name: v.reason for v in got} == expected
    for verdict in got:
        assert verdict.healthy == (verdict.reason == "Healthy")
        assert verdict.healthy or verdict.name in verdict.message


def test_remainders_spread_across_pools_but_stay_put_for_one_pool() -> None:
    """Ordering ties by zone name would stack every pool's extra replica in one zone."""
    extra: collections.Counter[str] = collections.Counter()
    for i in range(60):
        got = placement.place(
            demand=0,
            zones=zs(*ABC),
            min_replicas=4,
            max_replicas=24,
            warm_per_zone=0,
            tolerate_loss=0,
            pool=f"ns/pool-{i}",
        )
        again = placement.place(
            demand=0,
            zones=zs(*ABC),
            min_replicas=4,
            max_replicas=24,
            warm_per_zone=0,
            tolerate_loss=0,
            pool=f"ns/pool-{i}",
        )
        assert got.per_zone == again.per_zone
        extra[max(got.per_zone, key=lambda z: got.per_zone[z])] += 1
    assert set(extra) == set(ABC)
    assert max(extra.values()) <= 30  # no zone takes more than half of 60 remainders
