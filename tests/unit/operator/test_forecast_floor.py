"""The forecast floor as the operator runs it: Prometheus range points → the bucketed history
(gaps carried, nothing before the first point), the floor in the decision's bounds (above
replicas.min, never above the maximum), its status, and the shell that reads the history once
per bucket and keeps the last forecast while Prometheus is away."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import math

import pytest

from tokenfleet.api.pool import Autoscaling, ReplicaBounds
from tokenfleet.operator.forecasts import ForecastFloors
from tokenfleet.operator.plan import autoscaling_status
from tokenfleet.operator.policy import forecast, scaling

STEP = 3600.0
WEEK = 168
MONDAY_9 = datetime.datetime(2026, 11, 30, 9, 0, tzinfo=datetime.UTC)
SETTINGS = forecast.Settings(per_replica=10.0, step=STEP, history=28 * 86_400.0)


def weekly(hours: int) -> list[float]:
    return [
        (100 + 50 * math.sin(2 * math.pi * (h % 24) / 24)) * (0.5 if (h // 24) % 7 >= 5 else 1)
        for h in range(hours)
    ]


def test_range_points_become_buckets_oldest_first_with_gaps_carried() -> None:
    end = 100 * STEP
    points = [(end - 5 * STEP, 1.0), (end - 4 * STEP, 2.0), (end - 2 * STEP, 4.0), (end, 5.0)]
    assert forecast.history_of(points, end=end, step=STEP) == [1.0, 2.0, 2.0, 4.0, 4.0, 5.0]
    assert forecast.history_of([], end=end, step=STEP) == []
    gone = [(end - STEP, math.nan), (end, -1.0)]
    assert forecast.history_of(gone, end=end, step=STEP) == []  # no usable point


@pytest.mark.parametrize(
    ("floor", "maximum", "expected", "why"),
    [
        pytest.param(7, 20, 7, scaling.Why.FORECAST_MIN, id="floor-above-min-raises"),
        pytest.param(2, 20, 3, scaling.Why.MIN_REPLICAS, id="floor-under-min-changes-nothing"),
        pytest.param(40, 20, 20, scaling.Why.FORECAST_MIN, id="floor-capped-at-the-maximum"),
    ],
)
def test_the_forecast_floor_bounds_the_decision_like_a_schedule(
    floor: int, maximum: int, expected: int, why: scaling.Why
) -> None:
    policy = scaling.Policy(
        min_replicas=3, max_replicas=maximum, forecast=SETTINGS, forecast_floor=floor
    )
    decision = scaling.decide(
        policy=policy,
        signals=scaling.Signals(kv_cache_usage=0.1),
        state=scaling.State(replicas=3),
        ready=3,
        starting=0,
        now=MONDAY_9,
    )
    assert (decision.replicas, decision.why) == (expected, why), decision.message


def test_the_floor_holds_through_a_metrics_outage() -> None:
    policy = scaling.Policy(min_replicas=1, forecast=SETTINGS, forecast_floor=6)
    decision = scaling.decide(
        policy=policy,
        signals=scaling.Signals(stale=True),
        state=scaling.State(replicas=2),
        ready=2,
        starting=0,
        now=MONDAY_9,
    )
    assert (decision.replicas, decision.why) == (6, scaling.Why.FORECAST_MIN)


def test_the_spec_says_how_the_forecast_is_made() -> None:
    autoscaling = Autoscaling.model_validate(
        {"forecast": {"requestsPerSecondPerReplica": 2.5, "stepSeconds": 600, "historyDays": 14}}
    )
    policy = scaling.Policy.of(autoscaling, ReplicaBounds(min=1, max=10))
    assert policy.forecast == forecast.Settings(per_replica=2.5, step=600.0, history=14 * 86_400.0)
    with pytest.raises(ValueError, match=r"step_?[sS]econds"):
        Autoscaling.model_validate(
            {"forecast": {"requestsPerSecondPerReplica": 1, "stepSeconds": 30}}
        )


class History:
    """A Prometheus stand-in: the points it answers, or None (unreachable); counts queries."""

    def __init__(self, values: list[float] | None) -> None:
        self.values, self.asked = values, 0

    def arrival_history(
        self, namespace: str, pool: str, *, step: float, seconds: float, end: float
    ) -> list[tuple[float, float]] | None:
        self.asked += 1
        if self.values is None:
            return None
        n = len(self.values)
        return [(end - (n - 1 - i) * step, v) for i, v in enumerate(self.values)]


def made(floors: ForecastFloors, now: float) -> forecast.Made:
    return asyncio.run(floors.made("uid", "ns", "chat", settings=SETTINGS, lead=2 * STEP, now=now))


def test_the_shell_reads_once_per_bucket_and_keeps_the_last_forecast_through_an_outage() -> None:
    history = History(weekly(3 * WEEK))
    floors = ForecastFloors(history)  # type: ignore[arg-type]  # the one method it calls
    first = made(floors, 1000 * STEP)
    assert first.decision is not None and first.decision.replicas > 0
    assert first.buckets == 3 * WEEK
    assert made(floors, 1000 * STEP + STEP / 2) is first  # within the bucket: not read again
    assert history.asked == 1
    history.values = None  # Prometheus goes away
    kept = made(floors, 1001 * STEP)
    assert kept.stale and kept.decision == first.decision  # the floor does not vanish
    status = autoscaling_status.forecast_status(kept)
    assert status.replicas == first.decision.replicas
    assert "did not answer the last range query" in status.message
    assert made(floors, 1001 * STEP + 30) is kept  # tried again a minute later, not at once
    assert history.asked == 2


def test_status_says_why_there_is_no_floor() -> None:
    short = made(ForecastFloors(History([5.0] * 30)), 1000 * STEP)  # type: ignore[arg-type]
    status = autoscaling_status.forecast_status(short)
    assert (status.replicas, status.reason, status.buckets) == (0, "ShortHistory", 30)
    unread = made(ForecastFloors(History(None)), 1000 * STEP)  # type: ignore[arg-type]
    status = autoscaling_status.forecast_status(unread)
    assert (status.replicas, status.reason) == (0, forecast.UNREADABLE)
    full = made(ForecastFloors(History(weekly(3 * WEEK))), 1000 * STEP)  # type: ignore[arg-type]
    wire = autoscaling_status.forecast_status(full).to_wire()
    assert wire["reason"] == "Forecast" and wire["model"] and wire["smapePercent"] >= 0
    assert wire["upperRequestsPerSecond"] >= wire["expectedRequestsPerSecond"] > 0


def test_a_month_of_minutes_is_read_in_parts_prometheus_accepts() -> None:
    """Prometheus refuses a range query of more than 11,000 points a series: 28 days of
    minutes (40,321 points) go as five queries, contiguous and not overlapping."""
    from tokenfleet.operator.signals_source import PrometheusSignals

    asked: list[tuple[float, float]] = []

    class Range:
        def custom_query_range(
            self, query: str, *, start_time: datetime.datetime, end_time: datetime.datetime,
            step: str, params: dict[str, str], timeout: int,
        ) -> list[dict[str, object]]:  # fmt: skip
            first, last = start_time.timestamp(), end_time.timestamp()
            assert (last - first) / float(step) + 1 <= 11_000
            asked.append((first, last))
            n = round((last - first) / float(step)) + 1
            return [{"values": [[first + i * float(step), "1"] for i in range(n)]}]

    source = PrometheusSignals("http://127.0.0.1:9")
    source._prom = Range()  # type: ignore[assignment]
    end = 1_000_000 * 60.0
    points = source.arrival_history("ns", "chat", step=60, seconds=28 * 86_400, end=end)
    assert points is not None and len(points) == 28 * 1440 + 1
    assert len(asked) == 5
    assert all(b[0] == a[1] + 60 for a, b in itertools.pairwise(asked))
    assert (asked[0][0], asked[-1][1]) == (end - 28 * 86_400, end)
