"""The admission ledger the gateway and the simulator share, and the routing request both
build: slots taken and given back, lines kept first come first served when waiters leave from
the front or the middle, the service rate measured per window, the load view the core reads;
and ``routing.ask`` per policy (what each policy reads of a request)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from tokenfleet.gateway.policy import admission, prefix, routing
from tokenfleet.gateway.policy.queue_book import QueueBook


def filled(*arrivals: tuple[str, float]) -> tuple[QueueBook[str], list[admission.Waiting]]:
    """A ledger with one waiter per (class, time), carrying its own name."""
    ledger: QueueBook[str] = QueueBook()
    entries = [
        ledger.enqueue(f"{cls}@{at}", cls=cls, enqueued_at=at, deadline=at + 10)
        for cls, at in arrivals
    ]
    return ledger, entries


def test_slots_are_counted_per_class_and_never_below_zero() -> None:
    ledger: QueueBook[str] = QueueBook(["hi", "lo"])
    ledger.start("hi")
    ledger.start("hi")
    ledger.start("new")
    ledger.release("hi")
    ledger.release("lo", completed=False)
    assert ledger.in_flight == {"hi": 1, "lo": 0, "new": 1}
    assert ledger.completions == 1
    load = ledger.load(8)
    assert (load.capacity, dict(load.in_flight)) == (8, {"hi": 1, "lo": 0, "new": 1})


ARRIVALS = (("a", 1.0), ("a", 2.0), ("b", 3.0), ("a", 4.0), ("b", 5.0))


@pytest.mark.parametrize(
    ("leave", "heads", "depths"),
    [
        pytest.param([], {"a": 1, "b": 3}, {"a": 3, "b": 2}, id="nobody-leaves"),
        pytest.param([0], {"a": 2, "b": 3}, {"a": 2, "b": 2}, id="the-head-starts"),
        pytest.param([1], {"a": 1, "b": 3}, {"a": 2, "b": 2}, id="one-leaves-the-middle"),
        pytest.param([1, 0], {"a": 4, "b": 3}, {"a": 1, "b": 2}, id="middle-then-head"),
        pytest.param([0, 1, 3, 2, 4], {}, {"a": 0, "b": 0}, id="everyone-leaves"),
        pytest.param([0, 0], {"a": 2, "b": 3}, {"a": 2, "b": 2}, id="leaving-twice-is-nothing"),
    ],
)
def test_each_class_keeps_its_oldest_live_waiter_at_the_head(
    leave: list[int], heads: dict[str, float], depths: dict[str, int]
) -> None:
    ledger, entries = filled(*ARRIVALS)
    removed = [ledger.remove(entries[i]) for i in leave]
    assert {c: w.enqueued_at for c, w in ledger.heads.items()} == heads
    assert {c: ledger.depth(c) for c in ("a", "b")} == depths
    assert ledger.oldest_age("a", 10.0) == (10.0 - heads["a"] if "a" in heads else 0.0)
    once = list(dict.fromkeys(leave))
    assert removed[: len(once)] == [f"{ARRIVALS[i][0]}@{ARRIVALS[i][1]}" for i in once]
    assert all(r is None for r in removed[len(once) :])  # gone already


def test_tickets_order_waiters_across_classes() -> None:
    _, entries = filled(("a", 1.0), ("b", 1.0), ("a", 1.0))
    assert [e.ticket for e in entries] == [1, 2, 3]


@pytest.mark.parametrize(
    ("times", "rate"),
    [
        pytest.param([0.5], 0.0, id="within-the-window-nothing-is-measured"),
        pytest.param([0.5, 1.0], 2.0, id="a-window-of-one-second"),
        pytest.param(
            [0.5, 1.0, 1.5, 3.0],
            pytest.approx(2.0 * 0.5**0.2 + 1.0 * (1 - 0.5**0.2)),  # 2/s, then 2 in 2 s
            id="then-the-average-moves-by-its-half-life",
        ),
    ],
)
def test_the_service_rate_is_measured_once_a_window(times: list[float], rate: object) -> None:
    ledger: QueueBook[str] = QueueBook(now=0.0)
    for t in times:
        ledger.start("c")
        ledger.release("c")
        ledger.measure_at(t)
    assert ledger.service_rate == rate


def test_a_measurement_over_given_seconds_matches_the_core() -> None:
    ledger: QueueBook[str] = QueueBook()
    ledger.completions = 30
    ledger.measure(2.0)
    assert (ledger.service_rate, ledger.completions) == (15.0, 0)


def test_a_quiet_spell_does_not_make_the_pool_look_slow() -> None:
    """One 1-second request after 60 idle seconds: completions say 1/60 per second, but three
    slots each freed in a second sustain 3 per second, so queue waits are judged by that."""
    ledger: QueueBook[str] = QueueBook(now=0.0)
    ledger.start("c")
    ledger.release("c", held_seconds=1.0)
    ledger.measure_at(60.0)
    assert ledger.service_rate == pytest.approx(1 / 60)
    assert ledger.load(3).service_rate == pytest.approx(3.0)


def test_the_hold_time_follows_recent_requests_and_ignores_unserved_ones() -> None:
    ledger: QueueBook[str] = QueueBook()
    for held in (1.0, 2.0):
        ledger.start("c")
        ledger.release("c", held_seconds=held)
    ledger.start("c")
    ledger.release("c", completed=False, held_seconds=100.0)  # failed: not a service time
    assert ledger.hold_seconds == pytest.approx(1.0 + 0.2 * (2.0 - 1.0))
    assert ledger.load(2).service_rate == pytest.approx(2 / 1.2)


HELD = prefix.Match(blocks={"u": 2}, total=4)


@pytest.mark.parametrize(
    ("kind", "given", "expected"),
    [
        pytest.param("PrefixAware", {}, routing.FIRST_TRY, id="a-plain-first-try-is-shared"),
        pytest.param("PrefixAware", {"match": HELD}, routing.Ask(match=HELD), id="prefix-read"),
        pytest.param("LeastLoad", {"match": HELD}, routing.FIRST_TRY, id="prefix-ignored"),
        pytest.param("LeastLoad", {"sequence": 7}, routing.FIRST_TRY, id="sequence-ignored"),
        pytest.param("RoundRobin", {"sequence": 7}, routing.Ask(sequence=7), id="rr-turns"),
        pytest.param("LeastLoad", {"zone": "a"}, routing.Ask(zone="a"), id="zone"),
        pytest.param(
            "LeastLoad",
            {"tried": frozenset({"x"}), "ejected": frozenset({"y"})},
            routing.Ask(tried=frozenset({"x"}), ejected=frozenset({"y"})),
            id="retry-with-outliers",
        ),
    ],
)
def test_ask_keeps_what_the_policy_reads(
    kind: Literal["PrefixAware", "LeastLoad", "RoundRobin"],
    given: dict[str, Any],
    expected: routing.Ask,
) -> None:
    args: dict[str, Any] = {
        "match": prefix.NO_MATCH,
        "zone": "",
        "tried": frozenset(),
        "ejected": frozenset(),
        "sequence": 0,
        **given,
    }
    assert routing.ask(policy=routing.Policy(kind=kind), **args) == expected
