"""InferencePool: GPU or CPU capacity — accelerator, zones, warm floor, scaling, admission."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from tokenfleet.api.base import (
    DNS_LABEL,
    Condition,
    Model,
    cel,
    conditions_field,
    observed_generation_field,
    refuse_first,
    validations,
)
from tokenfleet.api.quantity import QUANTITY


class Toleration(Model):
    """A Kubernetes toleration copied onto every worker pod of the pool."""

    key: str = Field(
        default="", description="Taint key to tolerate; empty with Exists matches all."
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Equal matches key and value; Exists matches the key alone."
    )
    value: str = Field(default="", description="Taint value, with operator Equal.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="", description="Taint effect to tolerate; empty tolerates every effect."
    )


#: What a pool's nodes serve with: GPUs (vLLM's CUDA build) or CPUs (vLLM's CPU build).
Device = Literal["GPU", "CPU"]

#: The CEL rules of a CPU pool's accelerator, with the messages the API server answers; the
#: pydantic mirror below refuses the same specs with the same words.
_CPU_RULES = (
    (
        "self.kind != 'CPU' || self.product == ''",
        "accelerator.product names a GPU model (node label nvidia.com/gpu.product); a CPU pool "
        "has none: remove product, or set kind: GPU",
    ),
    (
        "self.kind != 'CPU' || self.count == 1",
        "accelerator.count is GPUs per replica; a CPU pool's replica is one vLLM engine on one "
        "node's CPUs: remove count (tensor parallelism across NUMA nodes is not supported)",
    ),
    (
        "self.kind != 'CPU' || self.resourceName == 'nvidia.com/gpu'",
        "accelerator.resourceName is the GPU resource a GPU pool requests; a CPU pool requests "
        "none: remove resourceName",
    ),
    (
        "self.kind != 'CPU' || (has(self.cpu) && has(self.memory))",
        "a CPU pool must say what each replica requests: set accelerator.cpu and "
        "accelerator.memory (for example 4 and 16Gi); the KV cache is sized from the memory",
    ),
    (
        "self.kind == 'CPU' || (!has(self.cpu) && !has(self.memory))",
        "accelerator.cpu and accelerator.memory size the replicas of CPU pools (kind: CPU); a "
        "GPU pool's workers take their host CPU and memory from the ModelDeployment's "
        "engine.resources",
    ),
)


class Accelerator(Model):
    """What one replica needs from a node: GPUs, or (kind CPU) cores and memory."""

    model_config = ConfigDict(
        json_schema_extra=validations(*(cel(rule, message) for rule, message in _CPU_RULES))
    )

    kind: Device = Field(
        default="GPU",
        description="GPU: each replica requests count of resourceName and runs the GPU worker "
        "image. CPU: each replica runs vLLM's CPU backend (no GPU requested), requests cpu and "
        "memory, and runs the CPU worker image; for small models, embeddings and classifiers, "
        "and clusters without GPUs.",
    )
    resource_name: str = Field(
        default="nvidia.com/gpu",
        description="Extended resource that counts accelerators on a node (GPU pools).",
    )
    count: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Accelerators per replica (tensor parallel size); 1 on CPU pools.",
    )
    product: str = Field(
        default="",
        description="Required value of the node label nvidia.com/gpu.product, for example "
        "NVIDIA-H100-80GB-HBM3. Empty accepts any product. GPU pools only.",
    )
    cpu: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description='CPU pools: cores each replica requests, e.g. "4". vLLM gets this many '
        "compute threads less one (at least one), left to its API server and engine core. A "
        "ModelDeployment's engine.resources.cpu overrides it.",
    )
    memory: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description='CPU pools: memory each replica requests and is limited to, e.g. "16Gi". '
        "The KV cache gets this less 4 GiB of engine overhead (vLLM's three processes and a "
        "small model's weights) unless the ModelDeployment's engine.kvCacheMemory sets it. "
        "A ModelDeployment's engine.resources.memory overrides it.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels every worker pod requires."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations for tainted accelerator nodes."
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> Accelerator:
        """The CEL rules above, so that parsing outside the API server refuses the same."""
        cpu = self.kind == "CPU"
        sized = self.cpu is not None, self.memory is not None
        failed = (
            cpu and self.product != "",
            cpu and self.count != 1,
            cpu and self.resource_name != "nvidia.com/gpu",
            cpu and not all(sized),
            not cpu and any(sized),
        )
        refuse_first([(f, message) for f, (_, message) in zip(failed, _CPU_RULES, strict=True)])
        return self


class Zones(Model):
    """Failure domains the pool spreads across."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "size(self.names) == 0 || self.tolerateLoss < size(self.names)",
                "zones.tolerateLoss must be smaller than the number of zones in zones.names: "
                "losing every zone leaves nothing to serve",
            )
        )
    )

    topology_key: str = Field(
        default="topology.kubernetes.io/zone", description="Node label whose values name zones."
    )
    names: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Zones to use. Empty uses every zone that has matching nodes.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    tolerate_loss: int = Field(
        default=0,
        ge=0,
        le=4,
        description="Zones that may be lost at once while the pool still serves its minimum: "
        "the operator keeps enough replicas that losing the largest tolerateLoss zones leaves "
        "the needed capacity.",
    )


class Warm(Model):
    """Ready headroom that never scales away: cold GPU starts take minutes."""

    per_zone: int = Field(
        default=1, ge=0, le=64, description="Ready replicas kept in every healthy zone."
    )


class Drain(Model):
    """How a worker leaves: it finishes its in-flight generations before the engine stops."""

    max_generation_seconds: int = Field(
        default=120,
        ge=1,
        le=3600,
        description="Longest a generation on this pool may run. A stopping worker waits up to "
        "this long for its running requests to finish (its preStop polls the engine's "
        "vllm:num_requests_running until 0); the pod's grace period is this plus 15 s.",
    )


class ReplicaBounds(Model):
    """Hard bounds on the pool's total replica count."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.min <= self.max",
                "replicas.min must be less than or equal to replicas.max",
            )
        )
    )

    min: int = Field(default=1, ge=0, le=10000, description="Fewest replicas, in all zones.")
    max: int = Field(default=10, ge=1, le=10000, description="Most replicas, in all zones.")


Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
EVERY_DAY: list[Weekday] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"


class ScheduleWindow(Model):
    """Replica bounds for a known event (predictive scaling), in UTC."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.minReplicas <= self.maxReplicas",
                "autoscaling.schedules: minReplicas must be less than or equal to maxReplicas",
            )
        )
    )

    name: str = Field(pattern=DNS_LABEL, max_length=63, description="Name of the window.")
    days: list[Weekday] = Field(
        default_factory=lambda: list(EVERY_DAY),
        min_length=1,
        description="Days on which the window applies.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    start: str = Field(pattern=HHMM, description="Start time, HH:MM in UTC.")
    end: str = Field(
        pattern=HHMM, description="End time, HH:MM in UTC; before start wraps midnight."
    )
    min_replicas: int = Field(ge=0, le=10000, description="Fewest replicas during the window.")
    max_replicas: int = Field(ge=1, le=10000, description="Most replicas during the window.")


class LatencyObjective(Model):
    """A latency percentile the pool holds by scaling, e.g. p95 time to first token < 1 s."""

    percentile: Literal[95, 99] = Field(
        default=95, description="Which percentile is held: 95 or 99."
    )
    milliseconds: int = Field(ge=1, le=600000, description="Its objective, in milliseconds.")


class Forecast(Model):
    """Pre-scaling from the pool's own offered-load history: what recurs without anyone
    writing it down (the morning ramp, a weekday batch job, the quiet weekend). Known events
    stay as schedules."""

    requests_per_second_per_replica: float = Field(
        gt=0,
        description="Requests per second one replica carries within the SLO (from `tokenfleet "
        "bench replica`): turns the forecast load into replicas.",
    )
    step_seconds: int = Field(
        default=300,
        ge=60,
        le=3600,
        description="Bucket of the history (and how often the forecast is made again), seconds.",
    )
    history_days: int = Field(
        default=28,
        ge=8,
        le=35,
        description="History read from Prometheus: each model is backtested on its last week, "
        "and learns from the weeks before; a forecast needs a week and a cold start of it.",
    )


class ScalingTargets(Model):
    """What the replica decision aims at and how it is damped (queue age and KV usage, never
    CPU): the active policy's, or a preview's (``autoscaling.preview``: only the fields it sets
    differ from the active ones)."""

    target_queue_age_ms: int = Field(
        default=500,
        ge=1,
        description="Oldest request in the gateways' queues for this pool, in milliseconds.",
    )
    target_kv_cache_usage: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Mean vllm:kv_cache_usage_perc over ready workers, 0 to 1.",
    )
    target_waiting_per_replica: int = Field(
        default=4, ge=1, description="Mean vllm:num_requests_waiting per ready worker."
    )
    target_prompt_tokens_per_second_per_replica: int = Field(
        default=0,
        ge=0,
        description="Prompt (prefill) tokens per second one replica should carry, from "
        "`tokenfleet bench replica`; 0 leaves this signal out.",
    )
    target_generation_tokens_per_second_per_replica: int = Field(
        default=0,
        ge=0,
        description="Generated tokens per second one replica should carry; 0 leaves it out.",
    )
    ttft_objective: LatencyObjective | None = Field(
        default=None,
        description="Time to first token as clients see it (the gateways' histogram: queueing, "
        "prefill and the first byte), over the classes whose queue age drives scaling, held at "
        "this percentile by adding replicas in proportion to the excess (e.g. p95 < 1000 ms). "
        "Admission holds each request to its class's ttftTargetMs; this holds the pool's "
        "percentile. Unset: not a signal.",
    )
    tpot_objective: LatencyObjective | None = Field(
        default=None,
        description="Time per output token (the engines' inter-token latency histogram) held at "
        "this percentile, e.g. p95 < 50 ms: decode contention — large batches, long contexts, "
        "prefills sharing the step — raises it when queue age and KV usage look fine. Unset: "
        "not a signal.",
    )
    forecast: Forecast | None = Field(
        default=None,
        description="A floor from a forecast of the offered load one cold start ahead "
        "(readinessDelaySeconds plus a bucket), by the model (seasonal naive daily or weekly, "
        "Holt-Winters) whose backtest on the last week erred least, padded by its p90 "
        "under-forecast; the reactive signals still add what it misses. Unset: none.",
    )
    scale_up_stabilization_seconds: int = Field(
        default=15,
        ge=0,
        description="Going up, the lowest recommendation of this window wins: a single "
        "spike does not add replicas, a sustained rise does within seconds.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        description="Going down, the highest recommendation of this window wins; long, so a "
        "lull does not shed warm capacity that takes minutes to restore.",
    )
    max_scale_up_step: int = Field(default=4, ge=1, description="Most replicas added per decision.")
    max_scale_down_step: int = Field(
        default=1, ge=1, description="Most replicas removed per decision."
    )
    panic_queue_age_multiple: float = Field(
        default=3.0,
        ge=1,
        description="Queue age above this multiple of its target skips up-stabilisation.",
    )


class Autoscaling(ScalingTargets):
    """Targets and damping for the replica decision (queue age and KV usage, never CPU), the
    known events' bounds, and a policy to preview before it acts."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.usePreview) || !self.usePreview || has(self.preview)",
                "autoscaling.usePreview needs autoscaling.preview: there is no preview to promote",
            )
        )
    )

    enabled: bool = Field(default=True, description="Scale on signals; false holds replicas.min.")
    queue_age_classes: list[Annotated[str, StringConstraints(max_length=63)]] = Field(
        default_factory=list,
        max_length=16,
        description="Admission classes whose queue age drives scaling. Empty: every class but "
        "the lowest-priority one (batch waits by design; its queue must not add GPUs).",
    )
    readiness_delay_seconds: int = Field(
        default=180,
        ge=0,
        description="Expected time from pod creation to Ready (model load); starting pods are "
        "credited as capacity for this long.",
    )
    schedules: list[ScheduleWindow] = Field(
        default_factory=list,
        max_length=16,
        description="Replica bounds for known events, applied on top of replicas.",
    )
    preview: ScalingTargets | None = Field(
        default=None,
        description="A scaling policy tried without acting: the targets and damping it sets "
        "override the ones above in a second decision, run beside the active one on the same "
        "signals; status.autoscaling.preview shows what it would do (wouldBeReplicas and why). "
        "Nothing scales on it until usePreview.",
        json_schema_extra={"x-tokenfleet-overrides": True},  # crd.OVERRIDES: no defaults inside
    )
    use_preview: bool = Field(
        default=False,
        description="Promote the preview: its targets act, and the ones above become the "
        "preview shown in status (set false again to go back).",
    )

    @model_validator(mode="after")
    def _preview_to_promote(self) -> Autoscaling:
        refuse_first(
            [
                (
                    self.use_preview and self.preview is None,
                    "autoscaling.usePreview needs autoscaling.preview: there is no preview to "
                    "promote",
                )
            ]
        )
        return self

    def previewed(self) -> Autoscaling | None:
        """The policy the preview describes: these targets with the preview's overrides (None
        without a preview)."""
        if self.preview is None:
            return None
        changed = {name: getattr(self.preview, name) for name in self.preview.model_fields_set}
        return self.model_copy(update={**changed, "preview": None, "use_preview": False})


class AdmissionClass(Model):
    """A priority class of requests with its own bounded queue."""

    name: str = Field(pattern=DNS_LABEL, max_length=63, description="Class name tenants refer to.")
    priority: int = Field(ge=0, le=1000, description="Higher is served first and shed last.")
    max_queue_depth: int = Field(
        default=256, ge=1, description="Requests waiting in this class before new ones get 429."
    )
    max_queue_age_ms: int = Field(
        default=2000, ge=1, description="Longest a request may wait before it is shed (503)."
    )
    default_deadline_ms: int = Field(
        default=60000,
        ge=1,
        description="Deadline for a request that sends no X-TokenFleet-Deadline-Ms header.",
    )
    reserved_percent: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Share of the pool's concurrency only this class may use.",
    )
    degraded_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Under overload, cap max_tokens of this class's requests to this value "
        "instead of shedding them. Unset: no degraded mode.",
    )
    ttft_target_ms: int | None = Field(
        default=None,
        ge=1,
        description="Time-to-first-token objective. A request whose expected queue wait "
        "exceeds this less the expected prefill (at least a quarter of it, at most "
        "maxQueueAgeMs) is refused at once (429/503 with Retry-After) instead of being "
        "admitted late, and a waiter is shed once it has waited that long; below the top "
        "class, requests are refused at random from 70 % of it. Unset: maxQueueAgeMs alone.",
    )


def _default_classes() -> list[AdmissionClass]:
    return [
        AdmissionClass(name="critical", priority=300, reserved_percent=10, ttft_target_ms=1000),
        AdmissionClass(name="interactive", priority=200, ttft_target_ms=1000),
        AdmissionClass(
            name="batch", priority=100, max_queue_age_ms=30000, default_deadline_ms=600000
        ),
    ]


class Admission(Model):
    """How requests queue for the pool."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.classes.all(c, self.classes.exists_one(d, d.name == c.name))",
                "admission.classes: class names must be unique",
            ),
            cel(
                "self.classes.map(c, c.reservedPercent).sum() <= 100",
                "admission.classes: reservedPercent must add up to at most 100 across classes",
            ),
        )
    )

    classes: list[AdmissionClass] = Field(
        default_factory=_default_classes,
        min_length=1,
        max_length=8,
        description="Priority classes; tenants name one of them.",
    )


class Routing(Model):
    """How the gateway picks a replica for a request."""

    policy: Literal["PrefixAware", "LeastLoad", "RoundRobin"] = Field(
        default="PrefixAware",
        description="PrefixAware scores prefix-cache affinity, load and zone; LeastLoad only "
        "load; RoundRobin ignores both.",
    )
    prefix_weight: float = Field(default=2.0, ge=0, description="Weight of prefix affinity.")
    load_weight: float = Field(default=1.0, ge=0, description="Weight of replica load.")
    zone_weight: float = Field(default=0.5, ge=0, description="Weight of same-zone preference.")
    bounded_load: float = Field(
        default=2.0,
        ge=1,
        description="A replica keeps prefix affinity only while its load is at most this times "
        "the mean load of the replicas compared (plus one request), so a hot prefix spreads "
        "instead of pinning one replica.",
    )
    sample_size: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Replicas scored per request besides those holding the prompt's prefix "
        "(a seeded random sample: power-of-k choices); larger pools are not scanned whole.",
    )
    classes: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Traffic classes this pool is dedicated to, e.g. [batch]: requests of these "
        "classes prefer this pool, other requests avoid it while another pool of the model fits. "
        "Empty: a general-purpose pool.",
    )


class Cost(Model):
    """What the pool's GPUs cost, for usage reports (`tokenfleet usage --cost`), and what a
    token served here costs a currency budget (``Tenant.spec.budget.amount``)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.perMillionInputTokens) == has(self.perMillionOutputTokens)",
                "cost: set both perMillionInputTokens and perMillionOutputTokens, or neither",
            )
        )
    )

    per_gpu_hour: float = Field(
        ge=0,
        le=10000,
        description="Price of one accelerator (accelerator.count per replica) for one hour, "
        "in currency units; on a CPU pool, of one replica. Ready replicas are charged, busy or "
        "warm-idle.",
    )
    currency: str = Field(
        default="USD",
        pattern=r"^[A-Z]{3}$",
        description="ISO 4217 code of the currency perGpuHour and the token prices are given in.",
    )
    per_million_input_tokens: float | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="Price of one million prompt tokens served by this pool, charged to "
        "currency budgets. Unset: derived from perGpuHour and the benched "
        "autoscaling.target*TokensPerSecondPerReplica (the price at full utilisation).",
    )
    per_million_output_tokens: float | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="Price of one million completion tokens served by this pool (with "
        "perMillionInputTokens).",
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> Cost:
        """The CRD's CEL rule, so that parsing outside the API server rejects the same specs."""
        if (self.per_million_input_tokens is None) != (self.per_million_output_tokens is None):
            raise ValueError(
                "cost: set both perMillionInputTokens and perMillionOutputTokens, or neither"
            )
        return self


def scaling_classes(configured: Sequence[str], classes: Sequence[tuple[str, int]]) -> list[str]:
    """Admission classes (name, priority) whose queueing drives scaling: those configured,
    else all but the lowest-priority class when there are several (batch waits by design)."""
    if configured:
        return list(configured)
    lowest = min((priority for _, priority in classes), default=0)
    above = [name for name, priority in classes if priority > lowest]
    return above or [name for name, _ in classes]


class InferencePoolSpec(Model):
    """Desired capacity, on GPU nodes or (accelerator.kind CPU) on CPU nodes."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "size(self.zones.names) == 0 || "
                "self.warm.perZone * size(self.zones.names) <= self.replicas.max",
                "warm.perZone times the number of zones must not exceed replicas.max: the warm "
                "floor alone would need more replicas than allowed",
            ),
            cel(
                "self.autoscaling.queueAgeClasses.all(c, "
                "self.admission.classes.exists(k, k.name == c))",
                "autoscaling.queueAgeClasses must name classes of admission.classes",
            ),
        )
    )

    accelerator: Accelerator = Field(
        default_factory=Accelerator, description="What one replica needs from a node."
    )
    zones: Zones = Field(default_factory=Zones, description="Failure domains to spread across.")
    warm: Warm = Field(default_factory=Warm, description="Ready headroom kept in every zone.")
    replicas: ReplicaBounds = Field(
        default_factory=ReplicaBounds, description="Bounds on the total replica count."
    )
    autoscaling: Autoscaling = Field(
        default_factory=Autoscaling, description="Targets and damping for scaling."
    )
    admission: Admission = Field(
        default_factory=Admission, description="Priority classes and their queues."
    )
    routing: Routing = Field(default_factory=Routing, description="Replica choice policy.")
    drain: Drain = Field(default_factory=Drain, description="Scale-in and rollout draining.")
    max_input_tokens: int = Field(
        default=8192,
        ge=1,
        description="Context bucket: longest prompt, in tokens, this pool accepts.",
    )
    cost: Cost | None = Field(
        default=None,
        description="Price per GPU-hour; unset leaves the pool out of cost reports.",
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> InferencePoolSpec:
        """The CRD's CEL rules, so that parsing outside the API server rejects the same specs."""
        names = [c.name for c in self.admission.classes]
        problems = [
            (self.replicas.min > self.replicas.max, "replicas.min must not exceed replicas.max"),
            (
                bool(self.zones.names)
                and self.warm.per_zone * len(self.zones.names) > self.replicas.max,
                "warm.perZone x zones exceeds replicas.max",
            ),
            (
                bool(self.zones.names) and self.zones.tolerate_loss >= len(self.zones.names),
                "zones.tolerateLoss must be smaller than the number of zones",
            ),
            (len(set(names)) != len(names), "admission.classes: class names must be unique"),
            (
                not set(self.autoscaling.queue_age_classes) <= set(names),
                "autoscaling.queueAgeClasses must name classes of admission.classes",
            ),
            (
                sum(c.reserved_percent for c in self.admission.classes) > 100,
                "admission.classes: reservedPercent must add up to at most 100",
            ),
            *[
                (w.min_replicas > w.max_replicas, f"schedule {w.name}: min above max")
                for w in self.autoscaling.schedules
            ],
        ]
        refuse_first(problems)
        return self

    def scaling_classes(self) -> list[str]:
        """Admission classes whose queueing drives scaling (and whose TTFT the objective is
        measured on): ``autoscaling.queueAgeClasses``, else all but the lowest-priority class
        when there are several (batch waits by design)."""
        return scaling_classes(
            self.autoscaling.queue_age_classes,
            [(c.name, c.priority) for c in self.admission.classes],
        )

    def ttft_targets_ms(self) -> dict[str, int | None]:
        """Each class's time-to-first-token target for admission: its own ``ttftTargetMs``,
        tightened to the pool's ``autoscaling.ttftObjective`` for the classes that objective is
        measured on — admission refuses a request that could not meet it, scaling adds the
        capacity that keeps the percentile under it."""
        objective = self.autoscaling.ttft_objective
        scaled = set(self.scaling_classes()) if objective is not None else set()
        targets: dict[str, int | None] = {}
        for c in self.admission.classes:
            own = c.ttft_target_ms
            if objective is not None and c.name in scaled:
                own = objective.milliseconds if own is None else min(own, objective.milliseconds)
            targets[c.name] = own
        return targets


class ZoneStatus(Model):
    """Replicas of one zone."""

    name: str = Field(description="Zone name.")
    desired: int = Field(default=0, description="Replicas the operator wants here.")
    ready: int = Field(default=0, description="Replicas Ready here.")
    healthy: bool = Field(default=True, description="False while the zone is considered lost.")
    message: str = Field(default="", description="Why the zone is unhealthy, if it is.")


class ScalingDecision(Model):
    """The last replica decision and why it was taken."""

    replicas: int = Field(description="Replicas decided.")
    reason: str = Field(description="Which signal or bound decided, for example WarmFloor.")
    message: str = Field(default="", description="The decision explained for a human.")
    time: str = Field(description="RFC 3339 time of the decision.")


class PreviewStatus(Model):
    """What the previewed scaling policy would do, decided beside the active one."""

    would_be_replicas: int = Field(description="Replicas the previewed policy would ask for.")
    reason: str = Field(default="", description="Which signal or limit would decide.")
    message: str = Field(default="", description="The would-be decision explained.")
    recommendations: dict[str, int] = Field(
        default_factory=dict, description="Each signal's recommendation under the preview."
    )
    policy: Literal["preview", "spec"] = Field(
        default="preview",
        description="Whose targets these are: the preview's, or (with usePreview) the spec's own "
        "ones the promoted preview replaced.",
    )


class ObjectiveStatus(Model):
    """A latency objective and what the pool measured against it at the last decision."""

    name: Literal["ttft", "tpot"] = Field(description="ttft or tpot.")
    percentile: int = Field(description="The percentile held.")
    objective_ms: int = Field(description="The objective, in milliseconds.")
    observed_ms: float | None = Field(
        default=None,
        description="The percentile over the last minute; unset when no request gave one "
        "(no traffic, or no series: the SignalsMissing condition says which).",
    )
    met: bool | None = Field(default=None, description="Observed within the objective.")


class ForecastStatus(Model):
    """The forecast floor at its last computation."""

    replicas: int = Field(default=0, description="The floor it sets; 0: none.")
    reason: str = Field(
        default="",
        description="Forecast, ShortHistory (less history than a week and a cold start) or "
        "HistoryUnreadable (Prometheus did not answer the range query).",
    )
    model: str = Field(default="", description="The model chosen by its backtest.")
    expected_requests_per_second: float = Field(
        default=0, description="The highest load forecast over the lead."
    )
    upper_requests_per_second: float = Field(
        default=0, description="Expected padded by the model's error band: what is sized for."
    )
    smape_percent: float | None = Field(
        default=None, description="The chosen model's backtest error (sMAPE) over the last week."
    )
    buckets: int = Field(default=0, description="History buckets the forecast learnt from.")
    message: str = Field(default="", description="The forecast explained.")
    time: str = Field(default="", description="RFC 3339 time it was computed.")


class AutoscalingStatus(Model):
    """What the autoscaler saw and decided last."""

    demand: int = Field(
        default=0, description="Replicas the signals asked for (before warm floor and headroom)."
    )
    reason: str = Field(
        default="", description="Which signal or limit decided, e.g. QueueAge, ScaleDownStabilized."
    )
    message: str = Field(default="", description="The decision explained.")
    recommendations: dict[str, int] = Field(
        default_factory=dict, description="Each signal's recommended replicas at the last decision."
    )
    decisions: list[ScalingDecision] = Field(
        default_factory=list,
        max_length=10,
        description="The last decisions that changed the demand.",
    )
    preview: PreviewStatus | None = Field(
        default=None,
        description="With autoscaling.preview: what the other policy would decide now, on the "
        "same signals.",
    )
    objectives: list[ObjectiveStatus] = Field(
        default_factory=list,
        max_length=2,
        description="The acting policy's latency objectives, each with what was measured.",
    )
    forecast: ForecastStatus | None = Field(
        default=None, description="With autoscaling.forecast: the floor it sets and why."
    )


class InferencePoolStatus(Model):
    """Observed state of the pool, written by the operator."""

    observed_generation: int | None = observed_generation_field()
    replicas: int = Field(default=0, description="Replicas desired in all zones.")
    ready_replicas: int = Field(default=0, description="Replicas Ready in all zones.")
    warm_replicas: int = Field(default=0, description="Ready replicas held by the warm floor.")
    zones: list[ZoneStatus] = Field(
        default_factory=list,
        description="Per-zone replicas.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    last_scaling: ScalingDecision | None = Field(
        default=None, description="The most recent scaling decision."
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None,
        description="The autoscaler's view: signals' recommendations and recent decisions.",
    )
    conditions: list[Condition] = conditions_field()


class InferencePool(Model):
    """A pool of warm GPU (or CPU) replicas spread across zones."""

    spec: InferencePoolSpec = Field(description="Desired capacity.")
    status: InferencePoolStatus | None = Field(default=None, description="Observed state.")
