"""The forecast signal (pure): offered load's own history → the replicas it will need one cold
start from now, and why.

Known events stay as schedules (``scaling.Window``); this is for what recurs without anyone
writing it down — the morning ramp, the weekday batch job at 09:05, the quiet weekend::

    history (requests/s per bucket, oldest first)
        │  backtest: each model forecasts every bucket of the last week `lead` buckets ahead
        ▼
    choose(model with the lowest sMAPE)  ──►  forecast the next `lead` buckets
        │                                       │  × (1 + the model's p90 relative error)
        ▼                                       ▼
    Forecast(model, errors)             ForecastDecision(replicas = ceil(upper / per replica))

The decision is a *floor* for the reactive policy (the same place a schedule's ``minReplicas``
acts), so a forecast can start replicas early but never hides a surprise from the queue-age,
KV and shedding signals. No clock, no randomness, no I/O: the caller hands in the history,
the bucket size and the lead.

Models (additive, on the bucketed rate):

- ``seasonal-naive-daily`` / ``-weekly``: the value one day / one week before the target.
- ``holt-winters``: additive Holt–Winters (level, trend, one season of a week, so the daily
  shape and the weekday/weekend difference are both in it), smoothing fixed at
  ``ALPHA``/``BETA``/``GAMMA``; the season is initialised from the first week.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

DAY_SECONDS = 86_400.0
WEEK_SECONDS = 7 * DAY_SECONDS
#: Holt–Winters smoothing: a slow level (the weekly season carries the shape), almost no trend
#: (a month of traffic has none worth extrapolating over minutes), and a season that learns a
#: new week at a fifth per observation (a one-off spike fades from it within a few weeks).
ALPHA, BETA, GAMMA = 0.1, 0.001, 0.2
#: The error band is this quantile of the backtest's relative errors (under-forecasts only: an
#: over-forecast costs GPU-hours, an under-forecast costs the SLO).
BAND_QUANTILE = 0.9


class Model(enum.StrEnum):
    SEASONAL_NAIVE_DAILY = "seasonal-naive-daily"
    SEASONAL_NAIVE_WEEKLY = "seasonal-naive-weekly"
    HOLT_WINTERS = "holt-winters"


class Why(enum.StrEnum):
    FORECAST = "Forecast"
    SHORT_HISTORY = "ShortHistory"  # less than the models need: no floor


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Errors:
    """A model's backtest over the last week of its history, ``lead`` buckets ahead."""

    model: Model
    mape: float  # mean |actual − forecast| / actual, over buckets with traffic
    smape: float  # mean 2|a − f| / (|a| + |f|)
    band: float  # BAND_QUANTILE of the under-forecasts' relative error (0 if none)
    points: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ForecastDecision:
    replicas: int  # a floor for the reactive decision; 0 = none
    why: Why
    model: Model | None
    expected: float  # requests/s, the highest forecast over the lead
    upper: float  # expected × (1 + band)
    errors: tuple[Errors, ...]  # every model tried, best first
    message: str


#: Why a forecast has no floor because Prometheus did not answer (before any forecast).
UNREADABLE = "HistoryUnreadable"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How the forecast floor is made: buckets of ``step`` seconds over ``history`` seconds,
    ``per_replica`` requests/s to a replica (InferencePool ``autoscaling.forecast``)."""

    per_replica: float
    step: float
    history: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Made:
    """A forecast and when (unix seconds) and from how many buckets it was made."""

    decision: ForecastDecision | None  # None: the history was unreadable
    at: float
    buckets: int
    settings: Settings
    lead: float
    stale: bool = False  # the last attempt could not read the history: this is an older one


def history_of(points: Sequence[tuple[float, float]], *, end: float, step: float) -> list[float]:
    """Prometheus range-query points (unix seconds, requests/s over the bucket before it) →
    the history :func:`prescale` reads: one value per ``step`` from the first point to ``end``,
    oldest first. A bucket without a point (a gateway down, a scrape missed) carries the one
    before it; before the first point there is no history (the pool had no traffic yet, or
    Prometheus keeps no more). NaN and negative values count as missing."""
    seen = {round((end - t) / step): v for t, v in points if not math.isnan(v) and v >= 0}
    if not seen:
        return []
    history, last = [], 0.0
    for back in range(max(seen), -1, -1):  # oldest first
        last = seen.get(back, last)
        history.append(last)
    return history


def season_buckets(seconds: float, step: float) -> int:
    return max(1, round(seconds / step))


def predict(history: Sequence[float], *, model: Model, step: float, ahead: int) -> list[float]:
    """For every bucket i (from the first that has a full season of past), the model's forecast
    of bucket i made ``ahead`` buckets earlier, with only the history before then: index i of
    the result forecasts ``history[i]``; ``len(history) + k`` forecasts the future's k-th
    bucket (k < ahead). NaN where the model cannot forecast yet."""
    n = len(history)
    if model is Model.HOLT_WINTERS:
        return _holt_winters(history, season=season_buckets(WEEK_SECONDS, step), ahead=ahead)
    lag_seconds = DAY_SECONDS if model is Model.SEASONAL_NAIVE_DAILY else WEEK_SECONDS
    lag = season_buckets(lag_seconds, step)
    out: list[float] = []
    for i in range(n + ahead):
        # the latest value at i − k·lag that was known `ahead` buckets before i
        j = i - lag
        while j > i - ahead:
            j -= lag
        out.append(history[j] if 0 <= j < n else math.nan)
    return out


def _holt_winters(history: Sequence[float], *, season: int, ahead: int) -> list[float]:
    """Additive Holt–Winters, one pass: the forecast of each bucket from the state ``ahead``
    buckets before it."""
    n = len(history)
    out = [math.nan] * (n + ahead)
    if n < season + 1:
        return out
    first = history[:season]
    level = sum(first) / season
    trend = 0.0
    seasonal = [y - level for y in first]
    for t in range(season, n + 1):
        # the state now holds everything before bucket t: forecast t + ahead − 1
        target = t + ahead - 1
        if target < n + ahead:
            out[target] = level + ahead * trend + seasonal[target % season]
        if t == n:
            # the future's earlier buckets too, from the last state
            for k in range(ahead - 1):
                out[n + k] = level + (k + 1) * trend + seasonal[(n + k) % season]
            break
        y = history[t]
        s = seasonal[t % season]
        previous = level
        level = ALPHA * (y - s) + (1 - ALPHA) * (level + trend)
        trend = BETA * (level - previous) + (1 - BETA) * trend
        seasonal[t % season] = GAMMA * (y - level) + (1 - GAMMA) * s
    return out


def backtest(
    history: Sequence[float], *, model: Model, step: float, ahead: int, last: int
) -> Errors:
    """The model's errors forecasting each of the last ``last`` buckets ``ahead`` buckets
    ahead (rolling origin: only what was known then)."""
    forecast = predict(history, model=model, step=step, ahead=ahead)
    ape, sape, under = [], [], []
    for i in range(max(0, len(history) - last), len(history)):
        f, a = forecast[i], history[i]
        if math.isnan(f):
            continue
        f = max(0.0, f)
        if a > 0:
            ape.append(abs(a - f) / a)
            if f < a:
                under.append((a - f) / max(f, 1e-9))
        if a + f > 0:
            sape.append(2 * abs(a - f) / (a + f))
    if not sape:
        return Errors(model=model, mape=math.inf, smape=math.inf, band=0.0, points=0)
    under.sort()
    band = under[min(len(under) - 1, int(BAND_QUANTILE * len(under)))] if under else 0.0
    return Errors(
        model=model,
        mape=sum(ape) / len(ape) if ape else math.inf,
        smape=sum(sape) / len(sape),
        band=band,
        points=len(sape),
    )


def prescale(
    *,
    history: Sequence[float],
    step: float,
    lead_seconds: float,
    per_replica_rps: float,
    models: Sequence[Model] = tuple(Model),
) -> ForecastDecision:
    """The replicas the offered load will need over the next ``lead_seconds`` (a cold start
    and a decision interval), by the model whose backtest over the last week was best, padded
    by its error band. ``history`` is requests/s per ``step`` seconds, oldest first, ending
    now; ``per_replica_rps`` what one replica carries within the SLO at its target fullness."""
    ahead = max(1, math.ceil(lead_seconds / step))
    week = season_buckets(WEEK_SECONDS, step)
    if len(history) < week + ahead + 1:
        return ForecastDecision(
            replicas=0,
            why=Why.SHORT_HISTORY,
            model=None,
            expected=0.0,
            upper=0.0,
            errors=(),
            message=f"{Why.SHORT_HISTORY.value}: {len(history)} buckets, a week needs {week}",
        )
    errors = sorted(
        (backtest(history, model=m, step=step, ahead=ahead, last=week) for m in models),
        key=lambda e: (e.smape, e.model.value),
    )
    best = errors[0]
    future = predict(history, model=best.model, step=step, ahead=ahead)[len(history) :]
    expected = max((max(0.0, f) for f in future if not math.isnan(f)), default=0.0)
    upper = expected * (1 + best.band)
    replicas = math.ceil(upper / per_replica_rps - 1e-9) if per_replica_rps > 0 else 0
    return ForecastDecision(
        replicas=replicas,
        why=Why.FORECAST,
        model=best.model,
        expected=expected,
        upper=upper,
        errors=tuple(errors),
        message=(
            f"{Why.FORECAST.value}: {replicas} replicas for {upper:,.1f} req/s within "
            f"{lead_seconds:.0f} s ({best.model.value} {expected:,.1f} + {best.band:.0%} band; "
            f"sMAPE {best.smape:.1%} over the last week)"
        ),
    )
