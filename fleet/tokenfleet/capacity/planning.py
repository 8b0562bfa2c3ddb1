"""Replicas from token-level traffic and a measured replica profile (pure).

The seed's equations: prefill tokens/s = rate x input tokens, decode tokens/s = rate x output
tokens, concurrent generations (Little's law) = rate x time in system. A replica's usable
capacity is the best point of its measured sweep that meets the SLO; replicas =
ceil(demand / (capacity x target utilisation)) for each constraint and the largest wins.

Each constraint is sized for the distribution the seed asks for ("repeat the math for the peak
and tail token lengths"): requests, prefill and decode are throughputs, so they take the mean
tokens at the rate planned; active sequences and KV cache hold whole requests, so they take the
p99 request (p99 output tokens decide how long a sequence stays, p99 input + p99 output how much
cache it holds). A row without a p99 in the workload falls back to the mean and says so.

The plan is made twice: for the sustained rate and for the short peak. A short peak arrives
faster than a cold start, so the peak's replicas (with the zone-loss tolerance) must already be
warm: the pool holds the larger of the two all the time, and the cost at the sustained rate
includes that warm idle floor. Zone-loss headroom comes from the operator's own placement core,
so the plan and the operator agree.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml
from pydantic import Field, model_validator

from tokenfleet.api.base import API_GROUP_VERSION, Model
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.capacity import costing
from tokenfleet.operator.policy import placement

#: The API's bound on replicas.max: one pool holds at most this many replicas.
MAX_REPLICAS = 10_000


class Tokens(Model):
    """A token-count distribution (per request)."""

    mean: float = Field(gt=0, description="Mean tokens per request.")
    p50: float | None = Field(default=None, gt=0, description="Median.")
    p95: float | None = Field(default=None, gt=0, description="95th percentile.")
    p99: float | None = Field(default=None, gt=0, description="99th percentile.")

    def tail(self) -> tuple[float, str]:
        """The p99 and its label, or the mean when no p99 was given."""
        if self.p99 is None:
            return self.mean, f"mean {self.mean:,.0f} (no p99 given)"
        return self.p99, f"p99 {self.p99:,.0f}"


class Slo(Model):
    """Latency objectives."""

    ttft_p99_seconds: float = Field(default=1.0, gt=0, description="Time to first token, p99.")
    inter_token_p99_seconds: float = Field(default=0.05, gt=0, description="Between tokens, p99.")


class Workload(Model):
    """What traffic the fleet must carry."""

    peak_rps: float = Field(gt=0, description="Short-peak requests per second.")
    sustained_rps: float | None = Field(
        default=None, gt=0, description="Sustained requests per second; default the peak."
    )
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
    cost: costing.Cost | None = Field(default=None, description="GPU price, for the cost lines.")

    @model_validator(mode="after")
    def _sustained_within_peak(self) -> Workload:
        if self.sustained_rps is not None and self.sustained_rps > self.peak_rps:
            raise ValueError(
                f"sustainedRps ({self.sustained_rps:g}) is above peakRps ({self.peak_rps:g}): "
                "the peak is the highest rate the fleet must carry"
            )
        return self

    @property
    def sustained(self) -> float:
        """The sustained rate (the peak when none is given)."""
        return self.peak_rps if self.sustained_rps is None else self.sustained_rps


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
    error_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of requests that failed at this level."
    )


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
    """The workload at one rate as work the GPUs see."""

    rps: float
    prefill_tokens_per_second: float  # rate x mean input
    decode_tokens_per_second: float  # rate x mean output
    seconds_in_system: float  # a mean request: TTFT + mean output / speed
    concurrent_sequences: float  # Little's law on the mean request
    tail_seconds_in_system: float  # the p99 request: TTFT + p99 output / speed
    tail_concurrent_sequences: float  # Little's law on the p99 request
    tail_context_tokens: float  # p99 input + p99 output: the cache one sequence holds


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    name: str
    demand: float
    per_replica: float  # usable capacity of one replica, before utilisation
    replicas: int
    unit: str
    basis: str  # which rate and percentile the demand is sized for


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sizing:
    """The fleet for one rate: every constraint, the binding one, the zone-loss headroom."""

    label: str  # sustained or peak
    demand: Demand
    constraints: list[Constraint]
    binding: Constraint
    needed: int  # replicas for the binding constraint
    total: int  # with zone-loss headroom
    per_zone: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Sustained and peak sizings, the fleet the pool holds, and what it costs."""

    sustained: Sizing
    peak: Sizing
    usable_point: ProfilePoint
    warm_beyond_sustained: int  # replicas held above the sustained plan, warm for the peak
    cost: costing.Sheet | None

    @property
    def held(self) -> Sizing:
        """The sizing the pool holds all the time: the larger (the peak must be warm)."""
        return self.peak if self.peak.total >= self.sustained.total else self.sustained

    # The held sizing's figures, for callers that want one fleet.
    @property
    def constraints(self) -> list[Constraint]:
        return self.held.constraints

    @property
    def binding(self) -> Constraint:
        return self.held.binding

    @property
    def needed(self) -> int:
        return self.held.needed

    @property
    def total(self) -> int:
        return self.held.total

    @property
    def per_zone(self) -> dict[str, int]:
        return self.held.per_zone


def demand_of(workload: Workload, ttft: float, *, rps: float | None = None) -> Demand:
    """Token work and concurrency of the workload at ``rps`` (default the peak), for the mean
    request (the seed's worked example) and for the p99 request (Little's law)."""
    rate = workload.peak_rps if rps is None else rps
    speed = workload.output_tokens_per_second
    in_system = ttft + workload.output_tokens.mean / speed
    tail_in_system = ttft + workload.output_tokens.tail()[0] / speed
    return Demand(
        rps=rate,
        prefill_tokens_per_second=rate * workload.input_tokens.mean,
        decode_tokens_per_second=rate * workload.output_tokens.mean,
        seconds_in_system=in_system,
        concurrent_sequences=rate * in_system,
        tail_seconds_in_system=tail_in_system,
        tail_concurrent_sequences=rate * tail_in_system,
        tail_context_tokens=workload.input_tokens.tail()[0] + workload.output_tokens.tail()[0],
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


def _rows(
    workload: Workload, profile: Profile, point: ProfilePoint, demand: Demand, label: str
) -> list[tuple[str, float, float, str, str]]:
    """(name, demand, per replica, unit, basis) for every constraint at one rate."""
    rate = f"{label} {demand.rps:,.0f} req/s"
    out_tail = workload.output_tokens.tail()[1]
    rows = [
        ("requests/s", demand.rps, point.throughput_rps, "req/s", rate),
        (
            "prefill tokens/s",
            demand.prefill_tokens_per_second,
            point.prefill_tokens_per_second,
            "tok/s",
            f"{rate} x mean input",
        ),
        (
            "decode tokens/s",
            demand.decode_tokens_per_second,
            point.decode_tokens_per_second,
            "tok/s",
            f"{rate} x mean output",
        ),
        (
            "concurrent sequences",
            demand.tail_concurrent_sequences,
            profile.max_num_seqs,
            "seqs",
            f"{rate}, output {out_tail}",
        ),
    ]
    if profile.kv_cache_bytes and profile.kv_bytes_per_token:
        context = (
            f"input {workload.input_tokens.tail()[1]} + output {out_tail}"
            if workload.input_tokens.p99 is not None or workload.output_tokens.p99 is not None
            else "mean context (no p99 given)"
        )
        rows.append(
            (
                "KV-cache bytes",
                demand.tail_concurrent_sequences
                * demand.tail_context_tokens
                * profile.kv_bytes_per_token,
                profile.kv_cache_bytes,
                "bytes",
                f"concurrent sequences x {context}",
            )
        )
    return rows


def size(
    workload: Workload, profile: Profile, point: ProfilePoint, *, rps: float, label: str
) -> Sizing:
    """The fleet one rate needs: each constraint at its percentile, then zone-loss headroom."""
    demand = demand_of(workload, ttft=0.0, rps=rps)
    u = workload.target_utilization
    constraints = [
        Constraint(
            name=n, demand=d, per_replica=c, replicas=_replicas(d, c, u), unit=unit, basis=basis
        )
        for n, d, c, unit, basis in _rows(workload, profile, point, demand, label)
    ]
    binding = max(constraints, key=lambda c: c.replicas)
    placed = placement.place(
        demand=binding.replicas,
        zones=zones_of(workload),
        min_replicas=binding.replicas,
        max_replicas=10**9,
        warm_per_zone=0,
        tolerate_loss=workload.tolerate_loss,
    )
    return Sizing(
        label=label,
        demand=demand,
        constraints=constraints,
        binding=binding,
        needed=binding.replicas,
        total=placed.total,
        per_zone=placed.per_zone,
    )


def zones_of(workload: Workload) -> list[placement.Zone]:
    return [
        placement.Zone(name=f"zone-{chr(ord('a') + i)}", healthy=True)
        for i in range(workload.zones)
    ]


def plan(workload: Workload, profile: Profile) -> Plan | None:
    """Sustained and peak fleets for ``workload``, or None if no measured point meets the SLO."""
    point = usable_point(profile, workload.slo)
    if point is None:
        return None
    sustained = size(workload, profile, point, rps=workload.sustained, label="sustained")
    peak = (
        size(workload, profile, point, rps=workload.peak_rps, label="peak")
        if workload.peak_rps > workload.sustained
        else sustained
    )
    held = max(sustained.total, peak.total)
    sheet = None
    if workload.cost is not None:
        sheet = costing.sheet(
            cost=workload.cost,
            replicas=held,
            beyond_sustained=held - sustained.total,
            rps=workload.sustained,
            input_tokens=workload.input_tokens.mean,
            output_tokens=workload.output_tokens.mean,
            success=1.0 - point.error_rate,
        )
    return Plan(
        sustained=sustained,
        peak=peak,
        usable_point=point,
        warm_beyond_sustained=held - sustained.total,
        cost=sheet,
    )


def pool_snippet(
    result: Plan, workload: Workload, profile: Profile, name: str = "planned-pool"
) -> str:
    """An InferencePool for the plan (YAML), checked against the API model before it is shown."""
    total = result.total
    if total > MAX_REPLICAS:
        return (
            f"# no InferencePool: {total} replicas exceed replicas.max's limit ({MAX_REPLICAS}); "
            "split the fleet over several pools\n"
        )
    spec: dict[str, Any] = {
        "zones": {"names": sorted(result.per_zone), "tolerateLoss": workload.tolerate_loss},
        # min is the held demand (the peak's, when there is one: a short peak is over before
        # a cold start ends, so its replicas stay warm); the operator adds the tolerateLoss
        # headroom itself, as planned here.
        "replicas": {"min": result.needed, "max": min(MAX_REPLICAS, max(total * 2, total + 1))},
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


def _amount(value: float, unit: str, decimals: int) -> str:
    """A table cell: bytes in GB (the raw figure is 15 digits), everything else as counted."""
    if unit == "bytes":
        return f"{value / 1e9:,.0f} GB"
    return f"{value:,.{decimals}f}"


def _sizing_lines(sizing: Sizing, workload: Workload) -> list[str]:
    lines = [
        f"{sizing.label} {sizing.demand.rps:,.0f} req/s:",
        f"  {'constraint':20} {'demand':>14} {'per replica':>12} {'replicas':>9}  sized for",
    ]
    for c in sizing.constraints:
        mark = "  <- binds" if c is sizing.binding else ""
        lines.append(
            f"  {c.name:20} {_amount(c.demand, c.unit, 0):>14} "
            f"{_amount(c.per_replica, c.unit, 2):>12} {c.replicas:9d}  "
            f"{c.basis}{mark}"
        )
    lines.append(
        f"  replicas at {workload.target_utilization:.0%} utilisation: {sizing.needed}; "
        f"with tolerateLoss={workload.tolerate_loss} over {workload.zones} zones: {sizing.total} "
        f"({', '.join(f'{z}={n}' for z, n in sorted(sizing.per_zone.items()))})"
    )
    return lines


def table(result: Plan, workload: Workload) -> list[str]:
    """The plan as text lines: both sizings (each constraint with its percentile, the binding
    one marked), the fleet held, and its cost."""
    lines = _sizing_lines(result.sustained, workload)
    if workload.peak_rps > workload.sustained:
        lines += _sizing_lines(result.peak, workload)
    held = result.total
    warm = (
        f": {result.warm_beyond_sustained} above the sustained plan, kept warm because a short "
        "peak is over before a cold start ends (for a known event, a schedule can raise "
        "replicas.min just ahead of it instead)"
        if result.warm_beyond_sustained
        else ""
    )
    lines.append(f"fleet held: {held} replicas (replicas.min {result.needed}){warm}")
    if result.cost is not None:
        lines += costing.lines(result.cost)
    return lines
