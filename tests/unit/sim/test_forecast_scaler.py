"""The simulator's ``forecast`` policy and the history it learns from.

Matrix: history (recurring window / one-off, weekday / weekend, noise) → the series; the
Forecast scaler (reactive + the forecast's floor) at decisions before, during and far from a
recurring peak → replicas; the scenario file's new policies and fields.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.policy import forecast, placement
from tokenfleet.sim import scalers, seasons
from tokenfleet.sim.scenario import Scenario

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "05-simulations"
SPEC = InferencePoolSpec.model_validate(
    {
        "zones": {"names": ["zone-a", "zone-b", "zone-c"], "tolerateLoss": 0},
        "replicas": {"min": 3, "max": 200},
        "admission": {"classes": [{"name": "interactive", "priority": 200}]},
    }
)
ZONES = [placement.Zone(name=z, healthy=True) for z in ("zone-a", "zone-b", "zone-c")]


def peak(t: float) -> float:
    """160 req/s, 480 from 300 s to 1500 s into the run's window."""
    return 480.0 if 300 <= t < 1500 else 160.0


def history(**over: Any) -> list[float]:
    args: dict[str, Any] = {
        "window": 1800.0,
        "days": 14,
        "step": 60.0,
        "noise": 0.0,
        "weekend_factor": 0.5,
        "rng": random.Random(1),
    }
    args.update(over)
    return seasons.history(peak, **args)


def test_history_repeats_the_window_each_day_and_quiets_weekends() -> None:
    h = history()
    assert len(h) == 14 * 1440
    monday_peak = h[7 * 1440 + 10]  # a week before the run, 09:10
    sunday_peak = h[6 * 1440 + 10]
    assert monday_peak == 480.0
    assert sunday_peak == 240.0
    assert h[7 * 1440 + 60] == 160.0  # 10:00: the opening rate


def test_a_one_off_window_is_not_in_the_history() -> None:
    assert max(history(recurring=False)) == 160.0


def test_noise_is_seeded() -> None:
    assert history(noise=0.1, rng=random.Random(5)) == history(noise=0.1, rng=random.Random(5))
    assert history(noise=0.1) != history()


def view(t: float, rps: float) -> scalers.PoolView:
    """Ten ready replicas, comfortable: the reactive policy alone holds its demand."""
    return scalers.PoolView(
        t=t,
        spec=SPEC,
        zones=ZONES,
        ready=10,
        starting=0,
        alive=10,
        oldest_queue_age=0.0,
        queue_wait_p95=None,
        queue_length=0,
        engine_waiting=0,
        kv_cache_usage=0.5,
        busy=5.0,
        prompt_tokens_rate=0.0,
        generation_tokens_rate=0.0,
        arrival_rate=rps,
        completion_rate=rps,
    )


def scaler(past: list[float]) -> scalers.Forecast:
    return scalers.Forecast(
        SPEC,
        10,
        history=past,
        step=60.0,
        lead=125.0,
        per_replica_rps=16.0,
        models=list(forecast.Model),
    )


@pytest.mark.parametrize(
    ("t", "floor"),
    [
        pytest.param(60.0, 10, id="quiet-morning-no-floor-above-reactive"),
        pytest.param(240.0, 30, id="one-cold-start-before-the-peak"),
        pytest.param(1000.0, 30, id="during-the-peak"),
    ],
)
def test_the_floor_rises_one_cold_start_ahead_of_a_recurring_peak(t: float, floor: int) -> None:
    s = scaler(history())
    at = 0.0
    while at < t:  # the decisions up to t, at the quiet rate the pool saw
        at += 5.0
        per_zone = s.targets(view(at, peak(at)))
    assert sum(per_zone.values()) >= floor
    assert s.last is not None
    assert s.last.model is forecast.Model.SEASONAL_NAIVE_WEEKLY or s.last.model is (
        forecast.Model.HOLT_WINTERS
    )


def test_without_the_peak_in_history_the_forecast_adds_nothing() -> None:
    s = scaler(history(recurring=False))
    for i in range(1, 50):
        per_zone = s.targets(view(5.0 * i, 160.0))
    assert sum(per_zone.values()) == 10  # the reactive policy's own demand


@pytest.mark.parametrize("name", ["recurring-peak", "doubling-during-zone-loss-known-event"])
def test_the_scenarios_compare_forecast_schedule_reactive_hpa_and_oracle(name: str) -> None:
    scenario = Scenario.model_validate(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    assert {"forecast", "tokenfleet", "reactive", "hpa-cpu", "oracle"} <= set(scenario.scalers)
    assert scenario.pools[0].spec.autoscaling.schedules  # the schedule the forecast competes with
