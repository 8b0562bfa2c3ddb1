"""``tokenfleet plan --disaggregation W.yaml``: size a combined pool and a prefill + decode pair
for the workload, say which wins, by how much and what binds; ``--simulate`` checks both sizings
request by request (``tokenfleet.sim.disaggregated``).

Parse → decide (``capacity.disaggregation``) → simulate (optional) → print.
"""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import yaml

from tokenfleet.capacity import disaggregation
from tokenfleet.capacity.planning import Profile
from tokenfleet.sim import disaggregated
from tokenfleet.sim.calibrate import CalibrationError, calibrate


def load(path: Path, profile: Path | None) -> disaggregated.Workload:
    """The workload file, its replica calibrated from ``profile`` when given; ValueError names
    the file at fault."""
    try:
        workload = disaggregated.Workload.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, pydantic.ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    if profile is None:
        return workload
    try:
        measured = Profile.model_validate(json.loads(profile.read_text()))
        perf = calibrate(measured, workload.performance)
    except (OSError, json.JSONDecodeError, pydantic.ValidationError, CalibrationError) as exc:
        raise ValueError(f"{profile}: {exc}") from exc
    return workload.model_copy(update={"performance": perf})


def _pool_line(pool: disaggregation.Pool) -> str:
    ceilings = ", ".join(
        f"{r.value} {v:,.1f}" for r, v in sorted(pool.ceilings.items(), key=lambda kv: kv[1])
    )
    return (
        f"  {pool.role:9} {pool.replicas:6,} replicas  {pool.per_replica_rps:8,.1f} req/s each, "
        f"bound by {pool.binding.value} (ceilings req/s: {ceilings})"
    )


def report(w: disaggregated.Workload, v: disaggregation.Verdict) -> list[str]:
    """The verdict as the command prints it."""
    kv = w.model.kv_bytes_per_token()
    lines = [
        f"workload: {w.rps:,.0f} req/s, {w.input_tokens.mean:,.0f} in / "
        f"{w.output_tokens.mean:,.0f} out "
        f"(ratio {w.input_tokens.mean / w.output_tokens.mean:.1f}), "
        f"SLO TTFT p95 < {w.slo.ttft_p95_seconds} s, TPOT p95 < "
        f"{w.slo.tpot_p95_seconds * 1000:.0f} ms, planned at {w.target_utilization:.0%}",
        f"KV: {kv / 1024:,.0f} KiB per token; a {v_tail(w):,.0f}-token prompt is "
        f"{v_tail(w) * kv / 1e6:,.0f} MB, {v.transfer_seconds * 1000:,.1f} ms over "
        f"{w.link.bandwidth_gbps:g} Gbit/s + {w.link.latency_ms:g} ms",
        "combined:",
        _pool_line(v.combined)
        if v.combined.feasible
        else f"  cannot meet the TPOT objective at any load (bound by {v.combined.binding.value})",
    ]
    if v.prefill is None or v.decode is None:
        lines += ["disaggregated: cannot meet the TTFT or TPOT objective at any load"]
    else:
        lines += [
            f"disaggregated: {v.disaggregated_replicas:,} replicas",
            _pool_line(v.prefill),
            _pool_line(v.decode),
        ]
    if v.winner == "neither":
        lines.append(
            f"verdict: neither design meets the SLO on this replica; binding: {v.binding.value}"
        )
        return lines
    saving = "∞" if v.saving == float("inf") else f"{v.saving:.1%}"
    lines.append(
        f"verdict: {v.winner} wins; the other needs {saving} more GPUs; binding: {v.binding.value}"
    )
    return lines


def v_tail(w: disaggregated.Workload) -> float:
    return w.input_tokens.p99 or w.input_tokens.mean


def check(w: disaggregated.Workload, v: disaggregation.Verdict) -> list[str]:
    """Both sizings simulated; the measured p95s beside the objectives."""
    runs = []
    if v.combined.feasible:
        runs.append(disaggregated.run_combined(w, v.combined.replicas))
    if v.prefill is not None and v.decode is not None:
        runs.append(disaggregated.run_disaggregated(w, v.prefill.replicas, v.decode.replicas))
    lines = [
        f"simulated {w.simulate.duration_seconds:g} s at scale {w.simulate.scale:g} "
        f"(seed {w.simulate.seed}):",
        f"  {'design':14} {'GPUs':>6} {'requests':>9} {'TTFT p95':>9} {'TPOT p95':>9} "
        f"{'within SLO':>10} {'lost':>5} {'NIC wait p95':>12}",
    ]
    for m in runs:
        lines.append(
            f"  {m.design:14} {m.replicas:6,} {m.requests:9,} {m.ttft_p95:8.3f}s "
            f"{m.tpot_p95 * 1000:7.1f}ms {m.within_slo:10.1%} {m.lost_transfers:5,} "
            f"{m.transfer_wait_p95 * 1000:10.1f}ms"
        )
    return lines


def main(path: Path, profile: Path | None, *, simulate: bool) -> int:
    try:
        workload = load(path, profile)
    except ValueError as exc:
        print(f"tokenfleet plan: {exc}")
        return 2
    verdict = workload.decide()
    print("\n".join(report(workload, verdict)))
    if simulate:
        print()
        print("\n".join(check(workload, verdict)))
    return 0
