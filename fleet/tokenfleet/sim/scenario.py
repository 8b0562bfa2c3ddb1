"""A simulation scenario (YAML): the fleet's pools, the replica's performance, traffic, events.

Pools are ordinary ``InferencePool`` specs, so a scenario rehearses exactly what a team would
apply: the same zones, warm floor, bounds, autoscaling targets and admission classes.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

from pydantic import Field, model_validator

from tokenfleet.api.base import Model
from tokenfleet.api.pool import InferencePoolSpec

Scaler = Literal[
    "tokenfleet", "reactive", "forecast", "hpa-cpu", "keda-queue", "static-peak", "oracle"
]
SCALERS: tuple[Scaler, ...] = (
    "tokenfleet",
    "reactive",
    "forecast",
    "hpa-cpu",
    "keda-queue",
    "static-peak",
    "oracle",
)
#: The forecast signal's models (``tokenfleet.operator.policy.forecast.Model``'s values).
ForecastModel = Literal["seasonal-naive-daily", "seasonal-naive-weekly", "holt-winters"]
#: How the gateway places LoRA requests: ``affinity`` is ``policy.adapters.place``; ``blind`` is
#: the pool's routing policy ignoring adapters (the replica loads whatever lands on it).
AdapterRouting = Literal["affinity", "blind"]
ADAPTER_ROUTINGS: tuple[AdapterRouting, ...] = ("affinity", "blind")


class Tokens(Model):
    """A per-request token-count distribution."""

    mean: float = Field(gt=0, description="Mean tokens.")
    p99: float | None = Field(
        default=None, gt=0, description="99th percentile; lognormal when set and above the mean."
    )
    dist: Literal["lognormal", "exponential", "fixed"] = Field(
        default="lognormal", description="Shape; lognormal without p99 means fixed."
    )
    max: int = Field(default=32768, ge=1, description="Largest value drawn (the context limit).")

    def sigma(self) -> float:
        """The lognormal's sigma that puts the 99th percentile at ``p99`` for this mean."""
        if self.p99 is None or self.p99 <= self.mean:
            return 0.0
        z = 2.3263478740408408  # the standard normal's 99th percentile
        gap = math.log(self.p99 / self.mean)
        if z * z - 2 * gap < 0:
            return z  # the tail asked for is beyond any lognormal with this mean: widest
        return z - math.sqrt(z * z - 2 * gap)

    def mu(self) -> float:
        """The lognormal's mu that keeps the mean at ``mean`` for :meth:`sigma`."""
        sigma = self.sigma()
        return math.log(self.mean) - sigma * sigma / 2


class SharedPrefix(Model):
    """Requests that open with one of a few long common prefixes (system prompts, documents)."""

    share: float = Field(default=0.0, ge=0, le=1, description="Fraction of requests with one.")
    groups: int = Field(default=8, ge=1, description="Distinct prefixes, chosen uniformly.")
    tokens: int = Field(default=512, ge=1, description="Prefix length in tokens.")


class Adapters(Model):
    """Requests that each use one of many LoRA adapters on the shared base model."""

    count: int = Field(ge=1, le=1_000_000, description="Distinct adapters (the stream's own).")
    zipf: float = Field(
        default=1.0,
        ge=0,
        le=5,
        description="Popularity exponent s: the k-th most popular adapter is drawn with "
        "probability proportional to 1/k^s (0: uniform).",
    )
    share: float = Field(
        default=1.0, ge=0, le=1, description="Fraction of requests that use an adapter."
    )


class RatePoint(Model):
    """Offered requests per second at a time; rates are linear between points."""

    at: float = Field(ge=0, description="Seconds from the start.")
    rps: float = Field(ge=0, description="Requests per second.")


class Stream(Model):
    """One tenant's traffic of one class."""

    name: str = Field(description="Label in the report, for example chat or batch.")
    tenant: str = Field(default="default", description="Tenant sending it.")
    share: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="The tenant's Tenant.spec.share: its weight among the tenants of its class "
        "(the streams of one tenant should agree).",
    )
    cls: str = Field(alias="class", description="Admission class of its requests.")
    pool: str = Field(default="", description="Pool to use; empty picks by context bucket.")
    rate: list[RatePoint] = Field(min_length=1, description="Offered load over time.")
    input_tokens: Tokens = Field(description="Prompt tokens.")
    output_tokens: Tokens = Field(description="Generated tokens.")
    shared_prefix: SharedPrefix = Field(
        default_factory=SharedPrefix, description="Common prefixes."
    )
    zones: list[str] = Field(
        default_factory=list,
        description="Zones of the gateway replicas its clients reach, in turn; routing then "
        "prefers replicas in the request's zone (routing.zoneWeight). Empty: no zone preference.",
    )
    adapters: Adapters | None = Field(
        default=None, description="LoRA adapters its requests use; none: the base model."
    )

    def rps(self, t: float) -> float:
        points = self.rate
        if t <= points[0].at:
            return points[0].rps
        for a, b in itertools.pairwise(points):
            if t < b.at:
                return a.rps + (b.rps - a.rps) * (t - a.at) / (b.at - a.at)
        return points[-1].rps


class Performance(Model):
    """A replica's speed, vLLM-like: one engine step decodes a token for every running sequence
    and prefills a chunk of waiting prompts (chunked prefill); its time grows with both."""

    step_base_seconds: float = Field(default=0.006, gt=0, description="A step's fixed cost.")
    step_per_sequence_seconds: float = Field(
        default=0.00002, ge=0, description="Added per running sequence (attention, sampling)."
    )
    prefill_per_token_seconds: float = Field(
        default=0.000005, ge=0, description="Added per prompt token prefilled in the step."
    )
    prefill_mode: Literal["chunked", "separate"] = Field(
        default="chunked",
        description="chunked: a prompt prefills in the engine's steps and slows every running "
        "sequence meanwhile (vLLM's chunked prefill); separate: each prompt prefills in its own "
        "time beside decoding (llm-d-inference-sim, or prefill on other GPUs).",
    )
    max_num_seqs: int = Field(default=512, ge=1, description="Running sequences at most.")
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="Tokens per step: decodes plus a prefill chunk."
    )
    kv_cache_tokens: int = Field(
        default=1_000_000, ge=1, description="Context tokens the KV cache holds."
    )
    prefix_cache_entries: int = Field(
        default=64, ge=0, description="Shared prefixes a replica keeps cached (LRU)."
    )
    cold_start_seconds: float = Field(
        default=120.0, ge=0, description="From scheduling a replica to Ready (weights, warm-up)."
    )
    gpus: int = Field(default=1, ge=1, description="GPUs per replica, for GPU-hours and cost.")
    max_loras: int = Field(
        default=1,
        ge=1,
        description="LoRA adapters a replica holds at once (vLLM's --max-loras, default 1): "
        "a batch mixes at most this many, and a new one evicts the least recently used.",
    )
    adapter_load_seconds: float = Field(
        default=1.0,
        ge=0,
        description="Loading one adapter into a slot. An assumption: a rank-16 adapter of an "
        "8B model is ~84 MB (tens of ms from local NVMe); vLLM's load path (parse, validate, "
        "copy into the GPU's stacked buffers) dominates. Measure yours with "
        "/v1/load_lora_adapter.",
    )
    request_overhead_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Added to every request's time to first token: the way from the client "
        "through the gateway to the engine and back (HTTP, authentication, routing, "
        "tokenization), which takes no engine time. bench/sim_accuracy.py measures it.",
    )


class PoolScenario(Model):
    """A pool: its name and the InferencePool spec the operator would get."""

    name: str = Field(description="Pool name.")
    spec: InferencePoolSpec = Field(
        default_factory=InferencePoolSpec, description="As applied to the cluster."
    )
    initial_replicas: int | None = Field(
        default=None, ge=0, description="Ready at the start; default what the scaler would keep."
    )


class ZoneLoss(Model):
    """A zone goes down: its replicas die at once; the operator notices after a delay."""

    at: float = Field(ge=0, description="Seconds from the start.")
    zone: str = Field(description="Zone lost.")
    detected_after: float = Field(
        default=10.0, ge=0, description="Seconds until the operator treats it as lost."
    )


class Slo(Model):
    """Per-class objectives; a request meets its SLO when both hold."""

    ttft_seconds: float = Field(default=1.0, gt=0, description="Time to first token.")
    inter_token_seconds: float = Field(default=0.05, gt=0, description="Mean between tokens.")


class History(Model):
    """The offered load a pool saw before the run, which the ``forecast`` policy learns from:
    ``days`` days of the scenario's own rate pattern (the scenario's window at its clock time
    each day, its opening rate the rest of the day), weekend days scaled by ``weekendFactor``,
    each bucket times (1 + ``noise`` x a standard normal draw). The run starts Monday 09:00."""

    days: int = Field(default=14, ge=8, le=60, description="Days of history (≥ a week + 1).")
    recurring: bool = Field(
        default=True,
        description="The scenario's window happened on every past day (a recurring peak); "
        "false: the past days held the opening rate all day (the window is a one-off event).",
    )
    step_seconds: float = Field(default=60.0, gt=0, description="Bucket of the history.")
    noise: float = Field(default=0.05, ge=0, le=1, description="Relative noise per bucket.")
    weekend_factor: float = Field(
        default=0.6, ge=0, description="Saturday and Sunday's load against a weekday's."
    )
    models: list[ForecastModel] = Field(
        default_factory=lambda: list[ForecastModel](
            ["seasonal-naive-daily", "seasonal-naive-weekly", "holt-winters"]
        ),
        description="Models the forecast chooses among by backtest.",
    )


class Scenario(Model):
    """Everything one simulation run needs."""

    name: str = Field(description="Scenario name.")
    description: str = Field(default="", description="What it rehearses.")
    duration_seconds: float = Field(gt=0, description="Arrivals stop after this.")
    seed: int = Field(default=1, description="Random seed: the same seed replays exactly.")
    tick_seconds: float = Field(
        default=0.1, gt=0, le=1, description="Between gateway queue and scaling checks."
    )
    scale_interval_seconds: float = Field(
        default=5.0, gt=0, description="Between autoscaling decisions."
    )
    gpu_hour_price: float = Field(default=2.5, ge=0, description="Dollars per GPU-hour.")
    fair_queuing: bool = Field(
        default=True,
        description="Share each class's queue among its tenants by token work, as the gateway "
        "does; false: first come first served (TOKENFLEET_FAIR_QUEUING=0), to compare.",
    )
    performance: Performance = Field(
        default_factory=Performance, description="One replica's speed."
    )
    pools: list[PoolScenario] = Field(min_length=1, description="Pools serving the model.")
    streams: list[Stream] = Field(min_length=1, description="Traffic.")
    slo: dict[str, Slo] = Field(default_factory=dict, description="Class → objectives.")
    zone_losses: list[ZoneLoss] = Field(default_factory=list, description="Failures.")
    scalers: list[Scaler] = Field(
        default_factory=lambda: list[Scaler](["tokenfleet"]),
        description="Policies to compare, each a run.",
    )
    history: History = Field(
        default_factory=History, description="What the forecast policy learned from."
    )
    adapter_routing: list[AdapterRouting] = Field(
        default_factory=lambda: list[AdapterRouting](["affinity"]),
        description="Adapter placements to compare, each a run with each scaler (only "
        "scenarios whose streams carry adapters see a difference).",
    )

    @model_validator(mode="after")
    def _pools_exist(self) -> Scenario:
        names = {p.name for p in self.pools}
        for s in self.streams:
            if s.pool and s.pool not in names:
                raise ValueError(f"stream {s.name}: pool {s.pool!r} is not one of {sorted(names)}")
            for a, b in itertools.pairwise(s.rate):
                if b.at <= a.at:
                    raise ValueError(f"stream {s.name}: rate points must have increasing 'at'")
        return self

    def slo_of(self, cls: str) -> Slo:
        return self.slo.get(cls) or Slo()
