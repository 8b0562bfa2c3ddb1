"""Fair queuing in the fleet simulator (bench/scenarios/flooding-tenant.yaml, shortened): a tenant
sending 10x the token work of each of two others at about 2x the pool's capacity. With fair
queuing the light tenants are all served within their TTFT objective and the flood keeps the
rest of the pool; first come first served serves a third of their requests; alone, the flood
gets the whole pool either way (work-conserving)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Scenario

SCENARIO = Path(__file__).parents[3] / "bench/scenarios/flooding-tenant.yaml"
LIGHT = ("light-a", "light-b")


def run(*, fair: bool, alone: bool = False) -> Result:
    doc: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    doc.update(fairQueuing=fair, durationSeconds=10)
    if alone:
        doc["streams"] = [s for s in doc["streams"] if s["tenant"] == "flood"]
    return Simulation(Scenario.model_validate(doc)).run()


def work(summary: dict[str, Any]) -> int:
    return int(summary["input_tokens"] + 2 * summary["output_tokens"])


@pytest.fixture(scope="module")
def fair() -> Result:
    return run(fair=True)


@pytest.fixture(scope="module")
def fifo() -> Result:
    return run(fair=False)


def test_light_tenants_are_served_within_their_slo_beside_the_flood(fair: Result) -> None:
    slo = yaml.safe_load(SCENARIO.read_text())["slo"]["interactive"]["ttftSeconds"]
    for t in LIGHT:
        summary = fair.tenants[t]
        assert summary["served"] == summary["arrived"] > 1000, summary
        assert summary["ttft_p99"] < slo, summary
    flood = fair.tenants["flood"]
    assert work(flood) > max(work(fair.tenants[t]) for t in LIGHT)  # it keeps the rest


def test_first_come_first_served_lets_the_flood_crowd_them_out(fifo: Result) -> None:
    for t in LIGHT:
        summary = fifo.tenants[t]
        assert summary["served"] < 0.6 * summary["arrived"], summary
    assert work(fifo.tenants["flood"]) > 3 * sum(work(fifo.tenants[t]) for t in LIGHT)


def test_alone_the_flood_gets_the_whole_pool_fair_or_not() -> None:
    fair, fifo = run(fair=True, alone=True), run(fair=False, alone=True)
    assert fair.tenants["flood"] == fifo.tenants["flood"]
    assert fair.tenants["flood"]["served"] > 0
