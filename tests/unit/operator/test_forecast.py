"""The forecast signal's pure core: each model on series whose future is known, the backtest's
errors and band, the choice by backtest, and the floor it hands the reactive policy.

Matrix: model (seasonal naive daily / weekly, Holt–Winters) x series (flat, daily shape,
weekly shape with quiet weekends, a one-off spike) → forecasts, errors, chosen model, replicas.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from tokenfleet.operator.policy import forecast
from tokenfleet.sim import seasons

STEP = 3600.0  # hourly buckets keep the series short: a week is 168
DAY, WEEK = 24, 168


def daily(hours: int) -> list[float]:
    return [100 + 50 * math.sin(2 * math.pi * (h % DAY) / DAY) for h in range(hours)]


def weekly(hours: int) -> list[float]:
    """The daily shape, weekends at half."""
    return [v * (0.5 if (h // DAY) % 7 >= 5 else 1.0) for h, v in enumerate(daily(hours))]


@pytest.mark.parametrize(
    ("model", "lag"),
    [
        pytest.param(forecast.Model.SEASONAL_NAIVE_DAILY, DAY, id="naive-daily"),
        pytest.param(forecast.Model.SEASONAL_NAIVE_WEEKLY, WEEK, id="naive-weekly"),
    ],
)
def test_seasonal_naive_repeats_the_value_one_season_back(model: forecast.Model, lag: int) -> None:
    history = [float(i) for i in range(3 * WEEK)]
    out = forecast.predict(history, model=model, step=STEP, ahead=2)
    assert out[lag + 5] == history[5]
    assert math.isnan(out[lag - 1])
    # the future: 2 buckets, each from one season before it
    assert out[len(history)] == history[len(history) - lag]
    assert out[len(history) + 1] == history[len(history) + 1 - lag]


def test_seasonal_naive_never_uses_what_was_not_known_yet() -> None:
    """Ahead of more than a season, the value two seasons back."""
    history = [float(i) for i in range(3 * DAY)]
    out = forecast.predict(
        history, model=forecast.Model.SEASONAL_NAIVE_DAILY, step=STEP, ahead=DAY + 1
    )
    assert out[2 * DAY + 3] == history[3]


@pytest.mark.parametrize(
    ("series", "model"),
    [
        pytest.param(daily, forecast.Model.SEASONAL_NAIVE_DAILY, id="daily-shape-naive-daily"),
        pytest.param(weekly, forecast.Model.SEASONAL_NAIVE_WEEKLY, id="weekly-naive-weekly"),
        pytest.param(weekly, forecast.Model.HOLT_WINTERS, id="weekly-holt-winters"),
    ],
)
def test_a_model_that_fits_the_season_forecasts_it(
    series: Callable[[int], list[float]], model: forecast.Model
) -> None:
    errors = forecast.backtest(series(4 * WEEK), model=model, step=STEP, ahead=3, last=WEEK)
    assert errors.smape < 0.01
    assert errors.points == WEEK


def test_daily_lag_misses_the_weekend_and_the_backtest_says_so() -> None:
    history = weekly(4 * WEEK)
    by_day = forecast.backtest(
        history, model=forecast.Model.SEASONAL_NAIVE_DAILY, step=STEP, ahead=1, last=WEEK
    )
    by_week = forecast.backtest(
        history, model=forecast.Model.SEASONAL_NAIVE_WEEKLY, step=STEP, ahead=1, last=WEEK
    )
    assert by_day.smape > 0.1 > by_week.smape
    assert by_day.band > 0.5  # Monday forecast from Sunday: under by half


def test_short_history_gives_no_floor() -> None:
    decision = forecast.prescale(
        history=daily(3 * DAY), step=STEP, lead_seconds=STEP, per_replica_rps=10.0
    )
    assert decision.why is forecast.Why.SHORT_HISTORY
    assert decision.replicas == 0


def test_prescale_chooses_by_backtest_and_sizes_the_peak_ahead() -> None:
    history = weekly(3 * WEEK)  # ends Monday 00:00; the next 3 h are Monday's
    decision = forecast.prescale(
        history=history, step=STEP, lead_seconds=3 * STEP, per_replica_rps=10.0
    )
    assert decision.why is forecast.Why.FORECAST
    assert decision.model in (forecast.Model.SEASONAL_NAIVE_WEEKLY, forecast.Model.HOLT_WINTERS)
    monday = daily(3)
    assert decision.expected == pytest.approx(max(monday), rel=0.02)
    assert decision.replicas == math.ceil(decision.upper / 10.0 - 1e-9)
    assert [e.smape for e in decision.errors] == sorted(e.smape for e in decision.errors)


def test_the_band_pads_the_floor_with_past_under_forecasts() -> None:
    rng = random.Random(3)
    noisy = [v * (1 + 0.1 * rng.gauss(0, 1)) for v in weekly(3 * WEEK)]
    decision = forecast.prescale(history=noisy, step=STEP, lead_seconds=STEP, per_replica_rps=1.0)
    best = decision.errors[0]
    assert best.band > 0.05
    assert decision.upper == pytest.approx(decision.expected * (1 + best.band))


def test_holt_winters_learns_a_spike_only_partly() -> None:
    """A one-off launch moves the season by GAMMA of its excess: next week's forecast at that
    hour rises, but far less than the weekly naive model, which replays the spike whole."""
    history = weekly(3 * WEEK)
    spike_at = 2 * WEEK + 14
    history[spike_at] *= 3
    # the same hour next week, forecast from where the history ends (a week ahead at most)
    at = spike_at + WEEK
    hw = forecast.predict(history, model=forecast.Model.HOLT_WINTERS, step=STEP, ahead=WEEK)
    naive = forecast.predict(
        history, model=forecast.Model.SEASONAL_NAIVE_WEEKLY, step=STEP, ahead=WEEK
    )
    normal = weekly(4 * WEEK)[at]
    assert naive[at] == pytest.approx(3 * normal)
    assert normal < hw[at] < naive[at]


def test_synthetic_month_backtest_prefers_holt_winters() -> None:
    """The bench's month (docs/forecasts): Holt–Winters wins on sMAPE; daily naive is worst."""
    month = seasons.synthetic_month(random.Random(38), step=60.0)
    errs = {
        m: forecast.backtest(month, model=m, step=60.0, ahead=3, last=len(month) - 7 * 1440).smape
        for m in forecast.Model
    }
    assert errs[forecast.Model.HOLT_WINTERS] < errs[forecast.Model.SEASONAL_NAIVE_WEEKLY]
    assert errs[forecast.Model.SEASONAL_NAIVE_WEEKLY] < errs[forecast.Model.SEASONAL_NAIVE_DAILY]
