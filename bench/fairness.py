"""Fair queuing in the fleet simulator: per-tenant share and TTFT p99, fair vs first come first
served, for a tenant flooding 10x the others' token work at about 2x the pool (issue #22).

Runs ``bench/scenarios/flooding-tenant.yaml`` three ways through the product's own admission
ledger: all three tenants with fair queuing, the same with first come first served, and the
flooding tenant alone (work conservation: alone it must get the whole pool either way).

    .venv/bin/python bench/fairness.py [--duration 120]

Share is of the token work served (prompt + 2 x output, the scheduler's weights).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Scenario

SCENARIO = Path(__file__).parent / "scenarios/flooding-tenant.yaml"


def load(*, fair: bool, alone: bool = False, duration: float | None = None) -> Scenario:
    """The scenario as written, with fair queuing on or off, optionally the flood alone."""
    doc: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    doc["fairQueuing"] = fair
    if alone:
        doc["streams"] = [s for s in doc["streams"] if s["tenant"] == "flood"]
    if duration:
        doc["durationSeconds"] = duration
    return Scenario.model_validate(doc)


def work(summary: dict[str, Any]) -> float:
    return float(summary["input_tokens"] + 2 * summary["output_tokens"])


def rows(result: Result) -> list[dict[str, Any]]:
    """Per tenant: served fraction, share of the work served, TTFT p99 of what was served."""
    total = sum(work(s) for s in result.tenants.values()) or 1.0
    return [
        {
            "tenant": t,
            "served": s["served"] / s["arrived"] if s["arrived"] else 0.0,
            "share": work(s) / total,
            "work_per_s": work(s) / result.simulated_seconds,
            "ttft_p99": s["ttft_p99"],
        }
        for t, s in result.tenants.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=None)
    args = parser.parse_args()
    print(f"{'run':<8} {'tenant':<8} {'served':>7} {'share':>6} {'work/s':>8} {'ttft_p99':>9}")
    for name, fair, alone in (
        ("fair", True, False),
        ("fifo", False, False),
        ("alone", True, True),
        ("alone-f", False, True),
    ):
        result = Simulation(load(fair=fair, alone=alone, duration=args.duration)).run()
        for r in rows(result):
            print(
                f"{name:<8} {r['tenant']:<8} {r['served']:>7.1%} {r['share']:>6.1%} "
                f"{r['work_per_s']:>8.0f} {r['ttft_p99']:>8.3f}s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
