"""``tokenfleet plan --workload W.yaml --profile P.json``: replicas, what binds, a pool."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from tokenfleet.capacity import planning


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet plan", description=__doc__)
    parser.add_argument("--workload", type=Path, required=True, help="YAML: peak RPS, tokens, SLO")
    parser.add_argument(
        "--profile", type=Path, required=True, help="JSON from `tokenfleet bench replica`"
    )
    parser.add_argument("--pool-name", default="planned-pool")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    workload = planning.Workload.model_validate(yaml.safe_load(args.workload.read_text()))
    profile = planning.Profile.model_validate(json.loads(args.profile.read_text()))
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
    d = result.demand
    print(
        f"work: {d.prefill_tokens_per_second:,.0f} prefill tokens/s, "
        f"{d.decode_tokens_per_second:,.0f} decode tokens/s, "
        f"{d.concurrent_sequences:,.0f} concurrent sequences "
        f"({d.seconds_in_system:.1f} s each)"
    )
    print("\n".join(planning.table(result, workload)))
    print()
    print(planning.pool_snippet(result, workload, profile, args.pool_name), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
