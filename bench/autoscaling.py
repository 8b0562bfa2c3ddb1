"""Autoscaling policies side by side on the seed's hardest scenario, in the fleet simulator.

10K RPS steady (1,000 input and 200 output tokens on average), then traffic doubles within
30 s while one of three zones is lost, with 120 s cold starts. TokenFleet's policy (the
operator's own scaling and placement cores) against HPA on a CPU-like utilisation, KEDA on
queue length alone, static peak capacity, and an oracle that knows the future load.

Target (issue #5): >= 99% of interactive requests within the TTFT SLO with <= 1.25x the
oracle's GPU-hours. A sixth run gives TokenFleet the doubling as a known event (a schedule
window one cold start ahead). Runs in parallel processes, one per core.

    .venv/bin/python bench/autoscaling.py [--duration 600] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import sys
import time
from pathlib import Path

from tokenfleet.sim import report
from tokenfleet.sim.__main__ import load
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Scaler, Scenario

EXAMPLES = Path(__file__).parent.parent / "examples/05-simulations"
SCENARIO = EXAMPLES / "doubling-during-zone-loss.yaml"
# The same traffic with the doubling known in advance: TokenFleet with a schedule window.
KNOWN_EVENT = EXAMPLES / "doubling-during-zone-loss-known-event.yaml"
ORDER: tuple[Scaler, ...] = ("tokenfleet", "hpa-cpu", "keda-queue", "static-peak", "oracle")
SCHEDULED = "tokenfleet+schedule"


def _run(scenario: Scenario, scaler: Scaler, label: str = "") -> Result:
    result = Simulation(scenario, scaler).run()
    return dataclasses.replace(result, scaler=label) if label else result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--out", type=Path, default=Path(".tokenfleet/bench/autoscaling"))
    args = parser.parse_args()
    scenario = load(args.scenario, None)
    if args.duration:
        scenario = scenario.model_copy(update={"duration_seconds": args.duration})
    started = time.perf_counter()
    known = load(KNOWN_EVENT, None).model_copy(
        update={"duration_seconds": scenario.duration_seconds}
    )
    workers = min(len(ORDER) + 1, os.cpu_count() or 1)
    print(f"autoscaling: {scenario.description} — {len(ORDER) + 1} runs on {workers} cores ...")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {s: pool.submit(_run, scenario, s) for s in ORDER}
        futures[SCHEDULED] = pool.submit(_run, known, "tokenfleet", SCHEDULED)
        results = []
        for s in (*ORDER, SCHEDULED):
            results.append(futures[s].result())
            r = results[-1]
            print(
                f"  {s:12} done: {r.requests:,} requests, {r.cpu_seconds:.0f} s CPU "
                f"({r.speed:,.0f} req/s)",
                flush=True,
            )
    print(f"\n{time.perf_counter() - started:.0f} s wall\n")
    print("\n".join(report.summary(results)))
    oracle = next(r for r in results if r.scaler == "oracle")
    print()
    for ours in (results[0], results[-1]):
        within = ours.classes["interactive"]["within_slo"]
        ratio = ours.gpu_hours / oracle.gpu_hours
        print(
            f"target for {ours.scaler}: interactive within SLO >= 99% ({100 * within:.2f}%), "
            f"GPU-hours <= 1.25x oracle ({ratio:.2f}x): "
            f"{'met' if within >= 0.99 and ratio <= 1.25 else 'NOT met'}"
        )
    for r in results:
        print()
        print("\n".join(report.details(r)))
    _, png = report.write(results, scenario, args.out)
    print(f"\nplot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
