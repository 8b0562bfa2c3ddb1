"""Offered load with seasons, for the forecast signal: a pool's history before a run, and the
synthetic month the forecast models are backtested on (``bench/forecast_backtest.py``).

Both are drawn from a seeded ``random.Random`` handed in, so the same seed gives the same
series. Rates are requests/s per bucket of ``step`` seconds; bucket 0 starts at the series'
``start`` (seconds after a Monday 00:00 UTC).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

DAY = 86_400.0
#: The simulator's clock starts Monday 09:00 UTC (``scalers.EPOCH``).
RUN_START = 9 * 3600.0


def weekday(seconds: float) -> int:
    """0 = Monday, for seconds after a Monday 00:00."""
    return int(seconds // DAY) % 7


def history(
    rate: Callable[[float], float],
    *,
    window: float,
    days: int,
    step: float,
    noise: float,
    weekend_factor: float,
    rng: random.Random,
    recurring: bool = True,
) -> list[float]:
    """``days`` days before the run, ending at its start: each day repeats the run's rate
    pattern (``rate(s)`` for s in [0, window) at the run's clock time, ``rate(0)`` the rest of
    the day; ``recurring=False``: ``rate(0)`` all day), weekend days times ``weekend_factor``, each
    bucket times 1 + noise x N(0, 1)."""
    n = round(days * DAY / step)
    start = RUN_START - n * step  # seconds from the Monday 00:00 of the run's week
    out: list[float] = []
    for i in range(n):
        at = start + (i + 0.5) * step
        into_day = (at - RUN_START) % DAY  # seconds after that day's 09:00
        base = rate(into_day) if recurring and into_day < window else rate(0.0)
        if weekday(at % (7 * DAY)) >= 5:
            base *= weekend_factor
        out.append(max(0.0, base * (1 + noise * rng.gauss(0.0, 1.0))))
    return out


def synthetic_month(
    rng: random.Random,
    *,
    step: float = 60.0,
    days: int = 28,
    base: float = 1000.0,
    noise: float = 0.08,
    spike_day: int = 17,
) -> list[float]:
    """A month of a chat service's offered load: a diurnal shape (night at 30 % of the day's
    mean, an afternoon crest), weekends at 60 %, a weekday batch job that triples the load from
    09:05 to 09:35, one launch (day ``spike_day``, 14:00–16:00, 3x) and multiplicative noise."""
    out: list[float] = []
    for i in range(round(days * DAY / step)):
        at = (i + 0.5) * step
        hour = (at % DAY) / 3600
        day = int(at // DAY)
        shape = 0.65 - 0.35 * math.cos(2 * math.pi * (hour - 3) / 24)
        level = base * shape * (0.6 if day % 7 >= 5 else 1.0)
        if day % 7 < 5 and 9 + 5 / 60 <= hour < 9 + 35 / 60:
            level *= 3
        if day == spike_day and 14 <= hour < 16:
            level *= 3
        out.append(max(0.0, level * (1 + noise * rng.gauss(0.0, 1.0))))
    return out
