"""``requestOverheadSeconds`` adds the request path's time to every time to first token and
nothing else: the engines, queues and scaling run exactly as without it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.scenario import Scenario

STEADY = Path(__file__).parents[3] / "bench" / "accuracy" / "steady.yaml"


def run(overhead: float) -> dict[str, float]:
    doc = yaml.safe_load(STEADY.read_text())
    doc["performance"]["requestOverheadSeconds"] = overhead
    doc["durationSeconds"] = 30
    result = Simulation(Scenario.model_validate(doc)).run()
    (summary,) = result.classes.values()
    return {**summary, "gpu_hours": result.gpu_hours}


def test_the_overhead_shifts_ttft_only() -> None:
    without, with_ = run(0.0), run(0.25)
    assert with_["ttft_p50"] == pytest.approx(without["ttft_p50"] + 0.25)
    assert with_["ttft_p99"] == pytest.approx(without["ttft_p99"] + 0.25)
    for same in ("served", "shed", "itl_p99", "gpu_hours", "output_tokens"):
        assert with_[same] == without[same], same


def test_an_overhead_past_the_objective_misses_it() -> None:
    assert run(1.5)["within_slo"] == 0.0  # the TTFT objective is 1 s
