"""The forecast floor's shell: reads a pool's offered-load history from Prometheus once per
bucket, and keeps what the pure forecast (policy.forecast.prescale) made of it until the next.

A month of 5-minute buckets is one range query of about 8,000 points per pool every five
minutes, not every decision. Prometheus unreachable keeps the last forecast (a floor that
vanished with the metrics would scale down on silence) and says so in its message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

from tokenfleet.operator.policy import forecast
from tokenfleet.operator.signals_source import PrometheusSignals

RETRY_SECONDS = 60.0  # after an unreadable history


class ForecastFloors:
    """One forecast per pool (and per previewed setting), made again every bucket."""

    def __init__(self, signals: PrometheusSignals) -> None:
        self._signals = signals
        self._made: dict[tuple[str, forecast.Settings, float], forecast.Made] = {}

    def retain(self, live: set[str]) -> None:
        """Forget the forecasts of pools that are gone (and settings no longer asked for are
        replaced at their next bucket)."""
        for key in [k for k in self._made if k[0] not in live]:
            del self._made[key]

    async def made(
        self,
        uid: str,
        namespace: str,
        pool: str,
        *,
        settings: forecast.Settings,
        lead: float,
        now: float,
    ) -> forecast.Made:
        """The forecast for ``lead`` seconds ahead, made again once a bucket has passed."""
        key = (uid, settings, lead)
        last = self._made.get(key)
        if last is not None and now - last.at < settings.step:
            return last
        end = math.floor(now / settings.step) * settings.step  # buckets on the step's grid
        points = await asyncio.to_thread(
            self._signals.arrival_history,
            namespace,
            pool,
            step=settings.step,
            seconds=settings.history,
            end=end,
        )
        if points is None:  # tried again in a minute, not at every decision
            again = now - settings.step + RETRY_SECONDS
            made = (
                dataclasses.replace(last, stale=True, at=again)
                if last is not None and last.decision is not None
                else forecast.Made(decision=None, at=again, buckets=0, settings=settings, lead=lead)
            )
        else:
            history = forecast.history_of(points, end=end, step=settings.step)
            decision = forecast.prescale(
                history=history,
                step=settings.step,
                lead_seconds=lead,
                per_replica_rps=settings.per_replica,
            )
            made = forecast.Made(
                decision=decision, at=now, buckets=len(history), settings=settings, lead=lead
            )
        self._made[key] = made
        return made
