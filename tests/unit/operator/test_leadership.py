"""The leader election's decision core: who acts, when a Lease may be taken, and that a holder
always stops before anyone else may start (table-driven, monotonic seconds)."""

from __future__ import annotations

import pytest

from tokenfleet.operator.leadership import (
    Action,
    LeaseView,
    State,
    Timing,
    acting,
    after_write,
    decide,
    lost,
    next_wake,
    observe,
)

T = Timing(lease_seconds=10, renew_seconds=2)
ME, OTHER = "op-a", "op-b"


def lease(holder: str, version: str = "1") -> LeaseView:
    return LeaseView(holder=holder, version=version, lease_seconds=10)


@pytest.mark.parametrize(
    ("seen", "view", "now", "action", "why"),
    [
        (State(), None, 0.0, Action.CREATE, "no Lease"),
        (State(), lease(ME), 0.0, Action.RENEW, "we hold it"),
        (State(), lease(""), 0.0, Action.TAKE, "released"),
        (State(seen_version="1", seen_at=5.0), lease(OTHER), 14.9, Action.WAIT, "held by op-b"),
        (State(seen_version="1", seen_at=5.0), lease(OTHER), 15.0, Action.TAKE, "not renewed"),
        # A renewal (new version) restarts the count, from when it was seen.
        (State(seen_version="1", seen_at=5.0), lease(OTHER, "2"), 15.0, Action.WAIT, "held by"),
    ],
)
def test_decide(seen: State, view: LeaseView | None, now: float, action: Action, why: str) -> None:
    step = decide(state=observe(seen, view, now), lease=view, me=ME, now=now)
    assert step.action is action and why in step.reason


@pytest.mark.parametrize(
    ("action", "start", "acting_at", "not_acting_at"),
    [
        (Action.TAKE, 100.0, [100.0, 105.9], [106.0]),  # deadline: lease - 2 x renew
        (Action.CREATE, 100.0, [110.0, 105.9 + 10], [100.0, 109.9]),  # waits one lease first
    ],
)
def test_when_a_new_holder_acts(
    action: Action, start: float, acting_at: list[float], not_acting_at: list[float]
) -> None:
    step = decide(state=State(), lease=None if action is Action.CREATE else lease(""), me=ME, now=0)
    assert step.action is action
    state = after_write(state=State(), step=step, started=start, timing=T)
    if action is Action.CREATE:  # and keeps renewing through the wait
        for t in (102.0, 104.0, 106.0, 108.0, 110.0, 112.0, 114.0):
            state = after_write(
                state=state,
                step=decide(state=state, lease=lease(ME), me=ME, now=t),
                started=t,
                timing=T,
            )
    assert [acting(state, t, T) for t in acting_at] == [True] * len(acting_at)
    assert [acting(state, t, T) for t in not_acting_at] == [False] * len(not_acting_at)


def test_a_lost_lease_stops_acting_at_once() -> None:
    state = after_write(
        state=State(),
        step=decide(state=State(), lease=lease(""), me=ME, now=0),
        started=0,
        timing=T,
    )
    assert acting(state, 1.0, T)
    assert not acting(lost(state), 1.0, T)


@pytest.mark.parametrize("seen_delay", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("last_renewal", [0.0, 7.3, 100.0])
def test_the_old_leader_always_stops_before_a_takeover(
    last_renewal: float, seen_delay: float
) -> None:
    """The holder's renewal starts at last_renewal; a candidate sees it seen_delay later (it can
    only see it after it started). The first instant the candidate may take over is after the
    holder's deadline, by two renewal periods at least."""
    holder = after_write(
        state=State(),
        step=decide(state=State(), lease=lease(""), me=ME, now=0),
        started=last_renewal,
        timing=T,
    )
    candidate = observe(State(), lease(ME, "9"), last_renewal + seen_delay)
    takeover = next(
        t / 10
        for t in range(int(last_renewal * 10), int(last_renewal * 10) + 400)
        if decide(state=candidate, lease=lease(ME, "9"), me=OTHER, now=t / 10).action is Action.TAKE
    )
    last_acting = max(
        t / 100
        for t in range(int(last_renewal * 100), int(takeover * 100) + 1)
        if acting(holder, t / 100, T)
    )
    assert takeover - last_acting >= 2 * T.renew_seconds - 0.011


@pytest.mark.parametrize(
    ("state", "now", "wake"),
    [
        (State(), 0.0, 1.0),  # waiting: twice per renewal
        (State(renewed_at=10.0, acting_from=10.0), 10.0, 2.0),  # leading: next renewal
        (State(renewed_at=10.0, acting_from=10.5), 10.0, 0.5),  # the end of the wait
        (State(renewed_at=10.0, acting_from=10.0), 17.0, 0.0),  # past the deadline: now
    ],
)
def test_next_wake(state: State, now: float, wake: float) -> None:
    assert next_wake(state, now, T) == pytest.approx(wake)


def test_timing_refuses_a_lease_too_short_for_its_renewals() -> None:
    with pytest.raises(ValueError, match="3 x renew"):
        Timing(lease_seconds=5, renew_seconds=2)
