"""Every policy starts the seed's hardest scenario from the same steady state.

The first 20 s of ``doubling-during-zone-loss`` (10K RPS, before the doubling and the zone
loss) under each baseline: none sheds the fleet it holds at the start (an empty stabilisation
history let KEDA drop from 135 replicas to 6 at its first sync, and miss the SLO for most
interactive requests), and interactive requests keep their SLO.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenfleet.sim.__main__ import load
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.scenario import Scaler

SCENARIO = Path(__file__).parents[3] / "examples/05-simulations/doubling-during-zone-loss.yaml"


@pytest.mark.parametrize("scaler", ["hpa-cpu", "keda-queue"])
def test_baselines_keep_their_opening_fleet(scaler: Scaler) -> None:
    scenario = load(SCENARIO, None).model_copy(update={"duration_seconds": 20.0})
    result = Simulation(scenario, scaler).run()
    holding = result.timeline["chat"]["holding"]
    assert holding[0] >= 100  # the opening load's demand, not replicas.min
    assert min(holding) >= holding[0], holding
    assert result.classes["interactive"]["within_slo"] >= 0.99
