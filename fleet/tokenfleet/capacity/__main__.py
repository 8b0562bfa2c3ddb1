"""``tokenfleet plan --workload W.yaml --profile P.json``: sustained and peak fleets, what binds
each (and at which percentile), the cost at the sustained rate, and an InferencePool.

``tokenfleet plan --disaggregation D.yaml [--profile P.json] [--simulate]``: a combined pool
against a prefill + decode pair for the workload: which wins, by how much, what binds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pydantic
import yaml

from tokenfleet.capacity import planning


def _load(args: argparse.Namespace) -> tuple[planning.Workload, planning.Profile]:
    """Parse both files once; any problem is a ValueError naming the file."""
    try:
        raw = yaml.safe_load(args.workload.read_text())
        if args.gpu_hour_price is not None:
            raw = dict(raw or {})
            raw["cost"] = {**(raw.get("cost") or {}), "gpuHourPrice": args.gpu_hour_price}
        workload = planning.Workload.model_validate(raw)
    except (OSError, yaml.YAMLError, pydantic.ValidationError, TypeError) as exc:
        raise ValueError(f"{args.workload}: {exc}") from exc
    try:
        profile = planning.Profile.model_validate(json.loads(args.profile.read_text()))
    except (OSError, json.JSONDecodeError, pydantic.ValidationError) as exc:
        raise ValueError(f"{args.profile}: {exc}") from exc
    return workload, profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet plan", description=__doc__)
    parser.add_argument("--workload", type=Path, help="YAML: rates, tokens, SLO, zones, cost")
    parser.add_argument("--profile", type=Path, help="JSON from `tokenfleet bench replica`")
    parser.add_argument(
        "--disaggregation",
        type=Path,
        help="YAML: traffic, SLO, model shape, link, replica: combined or prefill + decode pools",
    )
    parser.add_argument(
        "--simulate", action="store_true", help="with --disaggregation: check both by simulation"
    )
    parser.add_argument(
        "--gpu-hour-price", type=float, help="dollars per GPU-hour (overrides cost.gpuHourPrice)"
    )
    parser.add_argument("--pool-name", default="planned-pool")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.disaggregation is not None:
        from tokenfleet.capacity import disaggregate

        return disaggregate.main(args.disaggregation, args.profile, simulate=args.simulate)
    if args.workload is None or args.profile is None:
        parser.error("--workload and --profile are required (or --disaggregation)")
    try:
        workload, profile = _load(args)
    except ValueError as exc:
        print(f"tokenfleet plan: {exc}", file=sys.stderr)
        return 2
    result = planning.plan(workload, profile)
    if result is None:
        print(
            f"no measured load level of {profile.model} meets the SLO (TTFT p99 "
            f"{workload.slo.ttft_p99_seconds}s, inter-token p99 "
            f"{workload.slo.inter_token_p99_seconds}s): "
            "measure again with lower load, a faster replica, or relax the SLO",
            file=sys.stderr,
        )
        return 1
    p = result.usable_point
    print(
        f"replica: {profile.model}{' on ' + profile.accelerator if profile.accelerator else ''}, "
        f"usable at {p.throughput_rps:,.2f} req/s (TTFT p99 {p.ttft_p99_seconds:.3f} s, "
        f"inter-token p99 {p.inter_token_p99_seconds * 1000:.1f} ms)"
    )
    for sizing in (result.sustained, result.peak):
        d = sizing.demand
        print(
            f"work at {sizing.label} {d.rps:,.0f} req/s: "
            f"{d.prefill_tokens_per_second:,.0f} prefill tokens/s, "
            f"{d.decode_tokens_per_second:,.0f} decode tokens/s, "
            f"{d.concurrent_sequences:,.0f} concurrent sequences for the mean request "
            f"({d.seconds_in_system:.1f} s each), {d.tail_concurrent_sequences:,.0f} for the "
            f"p99 request ({d.tail_seconds_in_system:.1f} s each)"
        )
        if workload.peak_rps <= workload.sustained:
            break  # no distinct peak: one sizing
    print()
    print("\n".join(planning.table(result, workload)))
    if result.cost is None:
        print("cost: give cost.gpuHourPrice in the workload or --gpu-hour-price")
    print()
    print(planning.pool_snippet(result, workload, profile, args.pool_name), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
