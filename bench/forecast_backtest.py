"""Backtest the forecast signal's models on a synthetic month (``sim.seasons.synthetic_month``):
a diurnal shape, weekends at 60 %, a weekday batch job tripling the load 09:05–09:35, one
launch (3x for two hours on day 17) and 8 % noise, in one-minute buckets.

Each model forecasts every minute of weeks 2–4 ``--lead`` seconds ahead (rolling origin: only
what was known then); the table gives MAPE and sMAPE over all of them, over the launch day, and
the error band the signal would use. ``prescale`` chooses by sMAPE over the last week.

    .venv/bin/python bench/forecast_backtest.py [--seed 38] [--lead 125]
"""

from __future__ import annotations

import argparse
import random

from tokenfleet.operator.policy import forecast
from tokenfleet.sim import seasons

STEP = 60.0
DAY = int(seasons.DAY / STEP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--lead", type=float, default=125.0, help="cold start + a decision (s)")
    args = parser.parse_args()
    month = seasons.synthetic_month(random.Random(args.seed), step=STEP)
    ahead = max(1, round(args.lead / STEP + 0.499))
    spike = 17
    print(
        f"synthetic month: {len(month):,} one-minute buckets, mean {sum(month) / len(month):,.0f} "
        f"req/s, launch on day {spike}; forecasts {ahead} min ahead"
    )
    print(f"{'model':24} {'MAPE':>7} {'sMAPE':>7} {'launch-day sMAPE':>17} {'band p90':>9}")
    for model in forecast.Model:
        whole = forecast.backtest(
            month, model=model, step=STEP, ahead=ahead, last=len(month) - 7 * DAY
        )
        launch = forecast.backtest(
            month[: (spike + 1) * DAY], model=model, step=STEP, ahead=ahead, last=DAY
        )
        print(
            f"{model.value:24} {whole.mape:7.1%} {whole.smape:7.1%} {launch.smape:17.1%} "
            f"{whole.band:9.1%}"
        )
    chosen = forecast.prescale(
        history=month, step=STEP, lead_seconds=args.lead, per_replica_rps=100.0
    )
    print(f"chosen at the month's end: {chosen.model} — {chosen.message}")


if __name__ == "__main__":
    main()
