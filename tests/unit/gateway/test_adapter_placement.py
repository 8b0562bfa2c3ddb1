"""Adapter placement (``policy.adapters.place``): which replica a LoRA request goes to, and why.

Matrix: where the adapter is (nowhere, loaded, loading, on several) × the holders' load against
the bound × the others' slots (free, evictable, all in use) × ties; and the LRU victim.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from tokenfleet.gateway.policy.adapters import Holder, Placement, Policy, Why, place, victim

BOUND = Policy(spill_above=4)


def holder(
    url: str,
    load: int = 0,
    adapters: tuple[Hashable, ...] = (),
    *,
    in_use: tuple[Hashable, ...] = (),
    loading: tuple[Hashable, ...] = (),
    slots: int = 2,
) -> Holder:
    return Holder(
        url=url,
        load=load,
        adapters=adapters,
        in_use=frozenset(in_use),
        loading=frozenset(loading),
        slots=slots,
    )


@pytest.mark.parametrize(
    ("candidates", "tie", "expected"),
    [
        pytest.param(
            [holder("a", 3), holder("b", 1), holder("c", 2)],
            0,
            Placement(url="b", why=Why.FREE_SLOT),
            id="nowhere: the least loaded, into a free slot",
        ),
        pytest.param(
            [holder("a", 1, ("x", "y")), holder("b", 1, ("y",))],
            0,
            Placement(url="b", why=Why.FREE_SLOT),
            id="nowhere: a free slot before an eviction at equal load",
        ),
        pytest.param(
            [holder("a", 1, ("x", "y"), in_use=("x",)), holder("b", 2, ("y", "z"))],
            0,
            Placement(url="a", why=Why.EVICT, evict="y"),
            id="nowhere, all full: evict the LRU adapter no request uses",
        ),
        pytest.param(
            [holder("a", 0, ("x", "y"), in_use=("x", "y")), holder("b", 5, ("z", "w"))],
            0,
            Placement(url="b", why=Why.EVICT, evict="z"),
            id="a replica whose slots are all in use cannot load it",
        ),
        pytest.param(
            [holder("a", 0, loading=("q",), adapters=("q",)), holder("b", 0, ("z",))],
            0,
            Placement(url="b", why=Why.FREE_SLOT),
            id="nowhere: a replica not loading before one that is",
        ),
        pytest.param(
            [holder("a", 4, ("m",)), holder("b", 0)],
            0,
            Placement(url="a", why=Why.LOADED),
            id="loaded, within the bound (4 above the least): affinity",
        ),
        pytest.param(
            [holder("a", 5, ("m",)), holder("b", 0)],
            0,
            Placement(url="b", why=Why.GROW),
            id="loaded, over the bound: grow onto the least loaded",
        ),
        pytest.param(
            [holder("a", 2, ("m",)), holder("b", 1, ("m",)), holder("c", 0)],
            0,
            Placement(url="b", why=Why.LOADED),
            id="on several: the least loaded holder",
        ),
        pytest.param(
            [holder("a", 0, ("m",), loading=("m",)), holder("b", 2, ("m",)), holder("c", 0)],
            0,
            Placement(url="b", why=Why.LOADED),
            id="a loaded holder before one still loading it",
        ),
        pytest.param(
            [holder("a", 1, ("m",), loading=("m",)), holder("c", 0)],
            0,
            Placement(url="a", why=Why.LOADING),
            id="only loading: join the load rather than start another",
        ),
        pytest.param(
            [holder("a", 9, ("m",)), holder("b", 0, ("x", "y"), in_use=("x", "y"))],
            0,
            Placement(url="a", why=Why.OVER_BOUND),
            id="over the bound, no slot elsewhere: the holder still",
        ),
        pytest.param(
            [
                holder("a", 3, ("x", "y"), in_use=("x", "y")),
                holder("b", 1, ("z", "w"), in_use=("z", "w")),
            ],
            0,
            Placement(url="b", why=Why.NO_SLOT),
            id="no slot anywhere: the least loaded, to wait for one",
        ),
        pytest.param(
            [holder("a", 0), holder("b", 0), holder("c", 0)],
            4,
            Placement(url="b", why=Why.FREE_SLOT),
            id="ties go to the counter modulo the tied",
        ),
    ],
)
def test_place(candidates: list[Holder], tie: int, expected: Placement) -> None:
    assert place(adapter="m", candidates=candidates, policy=BOUND, tie=tie) == expected


def test_no_candidates() -> None:
    assert place(adapter="m", candidates=[], policy=BOUND, tie=0) is None


@pytest.mark.parametrize(
    ("h", "expected"),
    [
        pytest.param(holder("a", adapters=("x",)), None, id="a free slot evicts nothing"),
        pytest.param(holder("a", adapters=("x", "y")), "x", id="the least recently used"),
        pytest.param(holder("a", adapters=("x", "y"), in_use=("x",)), "y", id="skips in use"),
        pytest.param(holder("a", adapters=("x", "y"), loading=("x",)), "y", id="skips loading"),
        pytest.param(holder("a", adapters=("x", "y"), in_use=("x", "y")), None, id="none can go"),
    ],
)
def test_victim(h: Holder, expected: Hashable | None) -> None:
    assert victim(h) == expected


def test_inputs_untouched_and_replayable() -> None:
    candidates = [holder("a", 1, ("m",)), holder("b", 1, ("m",))]
    first = place(adapter="m", candidates=candidates, policy=BOUND, tie=7)
    assert first == place(adapter="m", candidates=candidates, policy=BOUND, tie=7)
    assert candidates == [holder("a", 1, ("m",)), holder("b", 1, ("m",))]


BY_LOAD = Policy(affinity=False)


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        pytest.param(  # the holder is busier: load alone sends it elsewhere, to load it again
            [holder("a", 3, ("x",)), holder("b", 0)],
            Placement(url="b", why=Why.FREE_SLOT),
            id="ignores-the-holder",
        ),
        pytest.param(
            [holder("a", 0, ("x",)), holder("b", 2)],
            Placement(url="a", why=Why.LOADED),
            id="least-loaded-happens-to-hold-it",
        ),
        pytest.param(
            [holder("a", 0, ("y", "z")), holder("b", 1)],
            Placement(url="a", why=Why.EVICT, evict="y"),
            id="evicts-the-lru-there",
        ),
        pytest.param(
            [holder("a", 0, ("y", "z"), in_use=("y", "z")), holder("b", 1)],
            Placement(url="a", why=Why.NO_SLOT),
            id="waits-there-when-all-slots-run",
        ),
        pytest.param(
            [holder("a", 0, ("x",), loading=("x",)), holder("b", 1)],
            Placement(url="a", why=Why.LOADING),
            id="joins-a-load",
        ),
    ],
)
def test_the_load_only_baseline_places_by_load_alone(
    candidates: list[Holder], expected: Placement
) -> None:
    assert place(adapter="x", candidates=candidates, policy=BY_LOAD, tie=0) == expected
