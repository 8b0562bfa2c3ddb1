"""``tokenfleet simulate SCENARIO.yaml``: replay a scenario under each scaling policy it names
(and, when its traffic uses LoRA adapters, under each adapter placement it names).

Prints per-class SLO attainment, shedding, GPU-hours and cost side by side, then each run's
details; writes ``results.json`` and ``timeline.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import ValidationError

from tokenfleet.capacity.planning import Profile
from tokenfleet.sim import report, scalers
from tokenfleet.sim.calibrate import CalibrationError, calibrate
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import SCALERS, AdapterRouting, Scaler, Scenario


def _progress(total: float, label: str) -> Callable[[float], None]:
    width = 30

    def show(now: float) -> None:
        if int(now) % 10 and now < total:
            return
        done = min(1.0, now / total)
        bar = "#" * int(width * done)
        print(f"\r  {label:12} [{bar:<{width}}] {now:5.0f}/{total:.0f} s", end="", flush=True)

    return show


def runs(scenario: Scenario, scalers: list[Scaler]) -> list[tuple[Scaler, AdapterRouting]]:
    """Each scaler under each adapter placement; one placement when no stream uses adapters
    (the placements would run the same simulation)."""
    placements = scenario.adapter_routing
    if not any(s.adapters for s in scenario.streams):
        placements = placements[:1]
    return [(scaler, placement) for scaler in scalers for placement in placements]


def forecast_notes(sim: Simulation) -> list[str]:
    """What each pool's forecast signal chose at its last decision, and every model's
    backtest (what the operator's status would show)."""
    out = []
    for pool, scaler in sim.scalers.items():
        if not isinstance(scaler, scalers.Forecast) or scaler.last is None:
            continue
        out.append(f"forecast {pool}: {scaler.last.message}")
        out.extend(
            f"  backtest {e.model.value:22} MAPE {e.mape:6.1%}  sMAPE {e.smape:6.1%}  "
            f"band {e.band:6.1%}  ({e.points:,} buckets)"
            for e in scaler.last.errors
        )
    return out


def load(path: Path, profile: Path | None) -> Scenario:
    scenario = Scenario.model_validate(yaml.safe_load(path.read_text()))
    if profile is not None:
        measured = Profile.model_validate(json.loads(profile.read_text()))
        scenario = scenario.model_copy(
            update={"performance": calibrate(measured, scenario.performance)}
        )
    return scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet simulate", description=__doc__)
    parser.add_argument("scenario", type=Path)
    parser.add_argument(
        "--scaler", action="append", choices=SCALERS, help="run only these (repeatable)"
    )
    parser.add_argument("--duration", type=float, help="override the scenario's duration (s)")
    parser.add_argument("--profile", type=Path, help="calibrate replicas from this JSON profile")
    parser.add_argument("--out", type=Path, help="directory for results.json and timeline.png")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--disaggregation",
        action="store_true",
        help="SCENARIO is a disaggregation workload (docs/disaggregation.md): size a combined "
        "pool and a prefill + decode pair, simulate both, say which wins and what binds (the "
        "same as tokenfleet plan --disaggregation SCENARIO --simulate)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.disaggregation:
        from tokenfleet.capacity import disaggregate  # the planner's sizing, then its check

        return disaggregate.main(args.scenario, args.profile, simulate=True)
    try:
        scenario = load(args.scenario, args.profile)
    except (ValidationError, CalibrationError, yaml.YAMLError, OSError) as exc:
        print(f"tokenfleet simulate: {args.scenario}: {exc}", file=sys.stderr)
        return 2
    if args.duration:
        scenario = scenario.model_copy(update={"duration_seconds": args.duration})
    names = args.scaler or scenario.scalers
    out = args.out or Path(".tokenfleet") / "sim" / scenario.name
    print(f"{scenario.name}: {scenario.description or ''}".rstrip(": "))
    results: list[Result] = []
    notes: list[str] = []
    pairs = runs(scenario, names)
    many = len({placement for _, placement in pairs}) > 1
    for name, placement in pairs:
        label = f"{name}/{placement}" if many else name
        show = None if args.quiet else _progress(scenario.duration_seconds, label)
        sim = Simulation(scenario, name, placement)
        results.append(sim.run(show))
        if not args.quiet:
            print()
        notes.extend(forecast_notes(sim))
    print()
    print("\n".join(report.summary(results)))
    if table := report.adapters(results):
        print()
        print("\n".join(table))
    if notes:
        print()
        print("\n".join(notes))
    for r in results:
        print()
        print("\n".join(report.details(r)))
    data, png = report.write(results, scenario, out)
    print(f"\nresults {data}, plot {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
