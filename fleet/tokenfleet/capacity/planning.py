"""Replicas from token-level traffic and a measured replica profile (pure).

The seed's equations: prefill tokens/s = peak RPS x input tokens, decode tokens/s = peak RPS x
output tokens, concurrent generations (Little's law) = peak RPS x time in system. A replica's
usable capacity is the best point of its measured sweep that meets the SLO; replicas =
ceil(demand / (capacity x target utilisation)) for each constraint — requests/s, prefill,
decode, concurrent sequences, KV-cache bytes — and the largest wins. Zone-loss headroom comes
from the operator's own placement core, so the plan and the operator agree.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml
from pydantic import Field

from tokenfleet.api.base import API_GROUP_VERSION, Model
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.policy import placement


class Tokens(Model):
    """A token-count distribution (per request)."""

    mean: float = Field(gt=0, description="Mean tokens per request.")
    p50: float | None = Field(default=None, gt=0, description="Median.")
    p95: float | None = Field(default=None, gt=0, description="95th percentile.")
    p99: float | None = Field(default=None, gt=0, description="99th percentile.")


class Slo(Model):
    """Latency objectives."""

    ttft_p99_seconds: float = Field(default=1.0, gt=0, description="Time to first token, p99.")
    inter_token_p99_seconds: float = Field(default=0.05, gt=0, description="Between tokens, p99.")


class Workload(Model):
    """What traffic the fleet must carry."""

    peak_rps: float = Field(gt=0, description="Peak requests per second.")
    input_tokens: Tokens = Field(description="Prompt tokens per request.")
    output_tokens: Tokens = Field(description="Generated tokens per request.")
    output_tokens_per_second: float = Field(
        default=50.0, gt=0, description="Generation speed one stream sees (tokens/s)."
    )
    slo: Slo = Field(default_factory=Slo, description="Latency objectives.")
    zones: int = Field(default=3, ge=1, description="Zones to spread over.")
    tolerate_loss: int = Field(default=1, ge=0, description="Zones that may be lost at once.")
    target_utilization: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Share of measured capacity to plan for: burst headroom.",
    )


class ProfilePoint(Model):
    """One measured load level of one replica (from `tokenfleet bench replica`)."""

    offered_rps: float = Field(ge=0, description="Load offered.")
    throughput_rps: float = Field(ge=0, description="Requests completed per second.")
    ttft_p99_seconds: float = Field(ge=0, description="Measured TTFT p99.")
    inter_token_p99_seconds: float = Field(ge=0, description="Measured inter-token p99.")
    prefill_tokens_per_second: float = Field(
        ge=0, description="Prompt tokens processed per second."
    )
    decode_tokens_per_second: float = Field(ge=0, description="Tokens generated per second.")


class Profile(Model):
    """What one replica (model x GPU) sustains."""

    model: str = Field(description="Served model measured.")
    accelerator: str = Field(default="", description="GPU type measured.")
    points: list[ProfilePoint] = Field(min_length=1, description="The load sweep.")
    max_num_seqs: int = Field(default=256, ge=1, description="Concurrent sequences per replica.")
    kv_cache_bytes: float = Field(
        default=0, ge=0, description="KV-cache memory per replica; 0 ignores it."
    )
    kv_bytes_per_token: float = Field(default=0, ge=0, description="KV bytes per token of context.")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """The workload as work the GPUs see."""

    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    seconds_in_system: float
    concurrent_sequences: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    name: str
    demand: float
    per_replica: float  # usable capacity of one replica, before utilisation
    replicas: int
    unit: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    demand: Demand
    constraints: list[Constraint]
    binding: Constraint
    needed: int  # replicas for the binding constraint
    total: int  # with zone-loss headroom
    per_zone: dict[str, int]
    usable_point: ProfilePoint


def demand_of(workload: Workload, ttft: float) -> Demand:
    """Token work and concurrency of the workload (Little's law)."""
    generation = workload.output_tokens.mean / workload.output_tokens_per_second
    in_system = ttft + generation
    return Demand(
        prefill_tokens_per_second=workload.peak_rps * workload.input_tokens.mean,
        decode_tokens_per_second=workload.peak_rps * workload.output_tokens.mean,
        seconds_in_system=in_system,
        concurrent_sequences=workload.peak_rps * in_system,
    )


def usable_point(profile: Profile, slo: Slo) -> ProfilePoint | None:
    """The highest-throughput measured point that meets the SLO."""
    meeting = [
        p
        for p in profile.points
        if p.ttft_p99_seconds <= slo.ttft_p99_seconds
        and p.inter_token_p99_seconds <= slo.inter_token_p99_seconds
    ]
    return max(meeting, key=lambda p: p.throughput_rps, default=None)


def _replicas(demand: float, per_replica: float, utilization: float) -> int:
    if per_replica <= 0:
        return 0
    return math.ceil(demand / (per_replica * utilization) - 1e-9)


def plan(workload: Workload, profile: Profile) -> Plan | None:
    """The fleet for ``workload``, or None if no measured point meets the SLO."""
    point = usable_point(profile, workload.slo)
    if point is None:
        return None
    demand = demand_of(workload, ttft=0.0)
    u = workload.target_utilization
    context = workload.input_tokens.mean + workload.output_tokens.mean
    rows = [
        ("requests/s", workload.peak_rps, point.throughput_rps, "req/s"),
        (
            "prefill tokens/s",
            demand.prefill_tokens_per_second,
            point.prefill_tokens_per_second,
            "tok/s",
        ),
        (
            "decode tokens/s",
            demand.decode_tokens_per_second,
            point.decode_tokens_per_second,
            "tok/s",
        ),
        ("concurrent sequences", demand.concurrent_sequences, profile.max_num_seqs, "seqs"),
    ]
    if profile.kv_cache_bytes and profile.kv_bytes_per_token:
        rows.append(
            (
                "KV-cache bytes",
                demand.concurrent_sequences * context * profile.kv_bytes_per_token,
                profile.kv_cache_bytes,
                "bytes",
            )
        )
    constraints = [
        Constraint(name=n, demand=d, per_replica=c, replicas=_replicas(d, c, u), unit=unit)
        for n, d, c, unit in rows
    ]
    binding = max(constraints, key=lambda c: c.replicas)
    zones = [
        placement.Zone(name=f"zone-{chr(ord('a') + i)}", healthy=True)
        for i in range(workload.zones)
    ]
    placed = placement.place(
        demand=binding.replicas,
        zones=zones,
        min_replicas=binding.replicas,
        max_replicas=10**9,
        warm_per_zone=0,
        tolerate_loss=workload.tolerate_loss,
    )
    return Plan(
        demand=demand,
        constraints=constraints,
        binding=binding,
        needed=binding.replicas,
        total=placed.total,
        per_zone=placed.per_zone,
        usable_point=point,
    )


def pool_snippet(
    result: Plan, workload: Workload, profile: Profile, name: str = "planned-pool"
) -> str:
    """An InferencePool for the plan (YAML), checked against the API model before it is shown."""
    spec: dict[str, Any] = {
        "zones": {"names": sorted(result.per_zone), "tolerateLoss": workload.tolerate_loss},
        # min is the demand: the operator adds the tolerateLoss headroom itself (as planned here).
        "replicas": {"min": result.needed, "max": max(result.total * 2, result.total + 1)},
    }
    if profile.accelerator:
        spec["accelerator"] = {"product": profile.accelerator}
    InferencePoolSpec.model_validate(spec)
    doc = {
        "apiVersion": API_GROUP_VERSION,
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": spec,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def table(result: Plan, workload: Workload) -> list[str]:
    """The plan as text lines: each constraint, the binding one marked."""
    lines = [f"{'constraint':22} {'demand':>16} {'per replica':>14} {'replicas':>9}"]
    for c in result.constraints:
        mark = "  <- binds" if c is result.binding else ""
        lines.append(f"{c.name:22} {c.demand:16,.0f} {c.per_replica:14,.1f} {c.replicas:9d}{mark}")
    lines.append(
        f"replicas for demand at {workload.target_utilization:.0%} utilisation: {result.needed}; "
        f"with tolerateLoss={workload.tolerate_loss} over {workload.zones} zones: {result.total} "
        f"({', '.join(f'{z}={n}' for z, n in sorted(result.per_zone.items()))})"
    )
    return lines
