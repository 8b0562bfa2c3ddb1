"""A pool with a time-per-output-token objective, rehearsed in the simulator: decode contention
(a batch that grows with the offered load) raises TPOT while queue age, KV usage and waiting
requests all look fine, so only the objective adds replicas — and with them TPOT comes back
under it. The same run without the objective stays at its minimum, over the objective."""

from __future__ import annotations

from typing import Any

from tokenfleet.sim import scalers
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Scenario

OBJECTIVE_SECONDS = 0.015


def run(autoscaling: dict[str, Any]) -> tuple[Result, scalers.TokenFleet]:
    scenario = Scenario.model_validate(
        {
            "name": "decode-contention",
            "durationSeconds": 300,
            "seed": 7,
            "performance": {
                "maxNumSeqs": 64,
                "coldStartSeconds": 10,
                # one step: 10 ms, plus 0.5 ms per running sequence: three replicas at 12 req/s
                # run ~13 sequences each (TPOT ~17 ms); six run ~5 (TPOT ~12.5 ms)
                "stepBaseSeconds": 0.01,
                "stepPerSequenceSeconds": 0.0005,
                "prefillPerTokenSeconds": 0.0,
            },
            "pools": [
                {
                    "name": "chat",
                    "spec": {
                        "zones": {"names": ["a", "b", "c"]},
                        "replicas": {"min": 3, "max": 12},
                        "autoscaling": {
                            "scaleUpStabilizationSeconds": 15,
                            "readinessDelaySeconds": 15,
                            **autoscaling,
                        },
                    },
                }
            ],
            "streams": [
                {
                    "name": "chat",
                    "class": "interactive",
                    "rate": [{"at": 0, "rps": 2}, {"at": 30, "rps": 12}],
                    "inputTokens": {"mean": 100},
                    "outputTokens": {"mean": 200},
                }
            ],
        }
    )
    sim = Simulation(scenario, scaler="tokenfleet")
    result = sim.run()
    scaler = sim.scalers["chat"]
    assert isinstance(scaler, scalers.TokenFleet)
    return result, scaler


def tail(result: Result, series: str, seconds: int = 60) -> list[float]:
    return result.timeline["chat"][series][-seconds:]


def test_a_tpot_objective_adds_replicas_when_decode_contention_rises() -> None:
    held, held_by = run(
        {"tpotObjective": {"percentile": 95, "milliseconds": OBJECTIVE_SECONDS * 1000}}
    )
    blind, _ = run({})
    # without the objective queue age, KV usage and waiting requests see nothing to do...
    assert max(tail(blind, "ready")) == 3
    assert blind.classes["interactive"]["itl_p99"] > OBJECTIVE_SECONDS * 1.2
    # ...with it the pool grows in proportion (not to its maximum of 12: the percentile lags
    # a minute behind the replicas it was measured on) and holds the objective at the end
    assert 4 <= min(tail(held, "ready")) <= max(tail(held, "ready")) <= 6
    last = held_by.last
    assert last is not None
    assert last.recommendations["TPOTObjective"] == 0, last.message  # p95 within 15 ms
