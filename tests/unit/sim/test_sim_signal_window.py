"""The simulated scaler sees rates as the operator's PromQL does: over the last minute
(``signals.queries``' "1m" windows), not over the last scale interval alone. A 5 s window made
the simulated pool scale on one burst's arrival rate that the real operator never sees."""

from __future__ import annotations

from typing import Any

from tokenfleet.sim import pool as sim_pool
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.scalers import PoolView
from tokenfleet.sim.scenario import Scenario


def burst() -> Scenario:
    """20 req/s from 30 s to 40 s, nothing before or after; scaling off, views every 5 s."""
    return Scenario.model_validate(
        {
            "name": "burst",
            "durationSeconds": 100,
            "seed": 3,
            "performance": {"coldStartSeconds": 0},
            "pools": [
                {
                    "name": "p",
                    "spec": {
                        "zones": {"names": ["a"]},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 4, "max": 4},
                    },
                }
            ],
            "streams": [
                {
                    "name": "chat",
                    "class": "interactive",
                    "rate": [
                        {"at": 0, "rps": 0},
                        {"at": 30, "rps": 0},
                        {"at": 30.01, "rps": 20},
                        {"at": 40, "rps": 20},
                        {"at": 40.01, "rps": 0},
                    ],
                    "inputTokens": {"mean": 100, "dist": "fixed"},
                    "outputTokens": {"mean": 10, "dist": "fixed"},
                }
            ],
        }
    )


def views_of(sc: Scenario) -> dict[int, PoolView]:
    sim = Simulation(sc, "tokenfleet")
    scaler = sim.scalers["p"]
    seen: dict[int, PoolView] = {}
    original = scaler.targets

    def recording(view: PoolView) -> Any:
        seen[round(view.t)] = view
        return original(view)

    scaler.targets = recording  # type: ignore[method-assign]
    sim.run()
    return seen


def test_rates_cover_the_last_minute() -> None:
    views = views_of(burst())
    arrived = 200  # about 10 s x 20 req/s (Poisson)
    # 20 s after the burst ended: a 5 s window would read 0; the minute still holds it all
    assert 0.8 * arrived / 60 <= views[60].arrival_rate <= 1.2 * arrived / 60
    assert views[60].completion_rate > 0.8 * arrived / 60
    assert views[60].queue_wait_p95 is not None  # the burst's waits are still in the window
    # a minute after the burst: out of the window
    assert views[100].arrival_rate == 0 and views[95].arrival_rate > 0
    assert sim_pool.SIGNAL_WINDOW_SECONDS == 60.0
