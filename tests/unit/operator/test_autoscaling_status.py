"""The autoscaler's status block from a scaling decision: the latest decision in full, a history
entry only when the demand changes (first decision, up, down; not a repeat), the history capped
at ten with the oldest dropped, history messages cut, and the wire form the CRD stores."""

from __future__ import annotations

import datetime

import pytest

from tokenfleet.api.pool import AutoscalingStatus, ScalingDecision
from tokenfleet.operator.plan import autoscaling_status
from tokenfleet.operator.policy import scaling

NOW = datetime.datetime(2026, 1, 1, 12, 0, 30, 500000, tzinfo=datetime.UTC)
EARLIER = "2026-01-01T11:00:00Z"


def decision(replicas: int, message: str = "") -> scaling.Decision:
    return scaling.Decision(
        replicas=replicas,
        why=scaling.Why.QUEUE_AGE,
        message=message or f"QueueAge: {replicas} replicas",
        recommendations={"QueueAge": replicas, "KVCacheUsage": 1},
        state=scaling.State(replicas=replicas),
    )


def block(demand: int, history: list[int]) -> AutoscalingStatus:
    return AutoscalingStatus(
        demand=demand,
        reason="QueueAge",
        message=f"QueueAge: {demand} replicas",
        decisions=[
            ScalingDecision(replicas=n, reason="QueueAge", message=f"{n}", time=EARLIER)
            for n in history
        ],
    )


@pytest.mark.parametrize(
    ("old", "replicas", "history"),
    [
        pytest.param(None, 3, [3], id="first-decision-is-recorded"),
        pytest.param(block(3, [3]), 3, [3], id="a-repeat-is-not"),
        pytest.param(block(3, [3]), 5, [3, 5], id="up"),
        pytest.param(block(5, [3, 5]), 4, [3, 5, 4], id="down"),
        pytest.param(block(10, list(range(1, 11))), 11, list(range(2, 12)), id="ten-kept"),
    ],
)
def test_history_grows_only_when_the_demand_changes(
    old: AutoscalingStatus | None, replicas: int, history: list[int]
) -> None:
    got = autoscaling_status.autoscaling_status(decision(replicas), old=old, now=NOW)
    assert [d.replicas for d in got.decisions] == history
    assert (got.demand, got.reason, got.message) == (
        replicas,
        "QueueAge",
        f"QueueAge: {replicas} replicas",
    )
    assert got.recommendations == {"QueueAge": replicas, "KVCacheUsage": 1}


def test_a_new_entry_is_stamped_and_its_message_cut() -> None:
    long = "x" * 1000
    got = autoscaling_status.autoscaling_status(decision(4, long), old=None, now=NOW)
    assert got.message == long  # the latest decision is kept whole
    (entry,) = got.decisions
    assert entry.time == "2026-01-01T12:00:30Z"
    assert entry.message == "x" * autoscaling_status.HISTORY_MESSAGE_CHARS


def test_the_block_on_the_wire() -> None:
    got = autoscaling_status.autoscaling_status(decision(2), old=None, now=NOW)
    assert got.to_wire() == {
        "demand": 2,
        "reason": "QueueAge",
        "message": "QueueAge: 2 replicas",
        "recommendations": {"QueueAge": 2, "KVCacheUsage": 1},
        "decisions": [
            {
                "replicas": 2,
                "reason": "QueueAge",
                "message": "QueueAge: 2 replicas",
                "time": "2026-01-01T12:00:30Z",
            }
        ],
        "objectives": [],  # none configured: written empty, so a removed one leaves status
    }


def test_each_objective_is_shown_with_what_was_measured() -> None:
    policy = scaling.Policy(
        ttft=scaling.Objective(percentile=95, seconds=1.0),
        tpot=scaling.Objective(percentile=99, seconds=0.05),
    )
    got = autoscaling_status.autoscaling_status(
        decision(2), old=None, now=NOW, policy=policy, signals=scaling.Signals(ttft_p95=1.2345)
    )
    assert [o.to_wire() for o in got.objectives] == [
        {"name": "ttft", "percentile": 95, "objectiveMs": 1000, "observedMs": 1234.5, "met": False},
        {"name": "tpot", "percentile": 99, "objectiveMs": 50},  # no requests: nothing measured
    ]
