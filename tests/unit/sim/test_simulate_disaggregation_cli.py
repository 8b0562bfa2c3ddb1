"""`tokenfleet simulate --disaggregation D.yaml` answers issue 38's question from the simulate
command too: both designs sized, both simulated, the winner and what binds printed (the same
as `tokenfleet plan --disaggregation D.yaml --simulate`, which it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tokenfleet.sim.__main__ import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples/06-capacity-plan/disaggregation.yaml"


def test_simulate_answers_the_disaggregation_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = yaml.safe_load(EXAMPLE.read_text())
    workload["rps"] = 200  # a small fleet, simulated for a few seconds: fast, same question
    workload["simulate"] = {"durationSeconds": 5, "seed": 1, "scale": 1.0}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(workload))
    assert main([str(path), "--disaggregation"]) == 0
    printed = capsys.readouterr().out
    assert "simulated 5 s" in printed, printed
    assert "verdict: combined wins" in printed, printed  # at 100 Gbit/s, as the doc says
    assert "binding: KV capacity" in printed and "bound by the network" in printed, printed
    simulated = printed.split("simulated 5 s", 1)[1]
    assert "combined" in simulated and "disaggregated" in simulated, printed  # both ran
