"""Scaling policies the simulator compares, each turning what a pool shows into replicas per zone.

``tokenfleet`` is the product: the operator's own pure decision (``policy.scaling.decide``) and
placement (``policy.placement.place``), fed the signals Prometheus would carry. The others are
the usual alternatives, modelled on their documented behaviour:

- ``hpa-cpu``: a Kubernetes HPA on a CPU-like utilisation (the share of time the engine is
  busy), target 70%, HPA's replica rule (tolerance 0.1, unready pods left out scaling down and
  idle scaling up), 15 s sync, scale-up limited to max(4 pods, 100%) per sync, 300 s
  scale-down stabilisation. Even spread, no zone-loss headroom.
- ``keda-queue``: KEDA's queue-length scaler through the same HPA: the gateway queue of the
  classes that drive scaling (batch left out, as TokenFleet leaves it out) plus the engines'
  waiting requests, ``targetWaitingPerReplica`` per replica.

Every policy starts from the same steady state: the opening load's demand, recommended for the
whole stabilisation window already.
- ``static-peak``: the peak's replicas (with the pool's zone-loss headroom) all the time.
- ``oracle``: knows the future offered load (not failures): the replicas the load needs one
  cold start ahead, at 90% of the replica's SLO-limited throughput, with the pool's headroom.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.policy import forecast, placement, scaling
from tokenfleet.sim.scenario import Performance

EPOCH = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.UTC)  # a Monday, 09:00 UTC
#: The oracle runs replicas at this share of their SLO-limited throughput: at 100% a Poisson
#: load queues without bound (the M/M/c lesson), so even perfect foresight keeps some slack.
ORACLE_UTILIZATION = 0.9


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolView:
    """A pool as its scaler sees it at one decision."""

    t: float
    spec: InferencePoolSpec
    zones: Sequence[placement.Zone]  # healthy as the operator knows it
    ready: int
    starting: int  # not ready, younger than the readiness delay
    alive: int  # every replica holding GPUs (starting, ready, draining)
    oldest_queue_age: float  # over the classes whose queueing drives scaling
    queue_wait_p95: float | None  # of those classes' requests started in the interval
    queue_length: int  # every class
    engine_waiting: int
    kv_cache_usage: float | None  # mean over ready replicas; None without one
    busy: float  # sum over ready replicas of the share of the interval their engine was busy
    prompt_tokens_rate: float  # tokens/s over the interval
    generation_tokens_rate: float
    arrival_rate: float  # requests/s offered to the pool
    completion_rate: float  # requests/s its replicas finished
    #: queued in the classes whose queueing drives scaling (``queueAgeClasses``); None: the
    #: pool reports only the total
    scaling_queue_length: int | None = None
    #: latency percentiles over the last minute (seconds), measured only for a pool with a
    #: latency objective: time to first token of the scaling classes, time per output token
    ttft_p95: float | None = None
    ttft_p99: float | None = None
    tpot_p95: float | None = None
    tpot_p99: float | None = None


class Scaler(Protocol):
    def targets(self, view: PoolView) -> dict[str, int]: ...


def place(
    spec: InferencePoolSpec, demand: int, zones: Sequence[placement.Zone], *, headroom: bool
) -> dict[str, int]:
    """Per-zone replicas through the operator's placement; without headroom, an even spread
    (what a Deployment with a topology spread constraint does)."""
    placed = placement.place(
        demand=demand,
        zones=zones,
        min_replicas=spec.replicas.min,
        max_replicas=spec.replicas.max,
        warm_per_zone=spec.warm.per_zone if headroom else 0,
        tolerate_loss=spec.zones.tolerate_loss if headroom else 0,
    )
    return placed.per_zone


class TokenFleet:
    """The operator's decision and placement, unchanged (``schedules=False``: without the
    pool's scheduled bounds, the purely reactive policy)."""

    def __init__(
        self, spec: InferencePoolSpec, initial_demand: int, *, schedules: bool = True
    ) -> None:
        self.policy = scaling.Policy.of(spec.autoscaling, spec.replicas)
        if not schedules:
            self.policy = dataclasses.replace(self.policy, schedules=())
        # steady state: the demand has held for a while (an empty history would let the very
        # first decisions step down before the down-window has seen anything)
        self.state = scaling.State(
            replicas=initial_demand, history=((EPOCH.timestamp(), initial_demand),)
        )
        self.last: scaling.Decision | None = None

    def targets(self, view: PoolView) -> dict[str, int]:
        signals = scaling.Signals(
            oldest_queue_age=view.oldest_queue_age,
            kv_cache_usage=view.kv_cache_usage,
            waiting=float(view.engine_waiting) if view.ready else None,
            queue_wait_p95=view.queue_wait_p95,
            prompt_tokens_rate=view.prompt_tokens_rate,
            generation_tokens_rate=view.generation_tokens_rate,
            arrival_rate=view.arrival_rate,
            completion_rate=view.completion_rate,
            ttft_p95=view.ttft_p95,
            ttft_p99=view.ttft_p99,
            tpot_p95=view.tpot_p95,
            tpot_p99=view.tpot_p99,
        )
        decision = scaling.decide(
            policy=self.policy,
            signals=signals,
            state=self.state,
            ready=view.ready,
            starting=view.starting,
            now=EPOCH + datetime.timedelta(seconds=view.t),
        )
        self.state, self.last = decision.state, decision
        return place(view.spec, decision.replicas, view.zones, headroom=True)


class Forecast:
    """The reactive policy with the forecast signal's floor (``policy.forecast.prescale``), as
    the operator would run it: offered requests/s are averaged per ``step`` seconds into the
    pool's history (seeded with the days before the run), and at every decision the floor is
    what the best backtested model expects one cold start (and one decision) ahead. The floor
    acts where the operator's does (``ForecastMinimum``, like a schedule's minReplicas); the
    pool's own schedules are left out, so the comparison is forecast against schedule."""

    def __init__(
        self,
        spec: InferencePoolSpec,
        initial_demand: int,
        *,
        history: Sequence[float],
        step: float,
        lead: float,
        per_replica_rps: float,
        models: Sequence[forecast.Model],
    ) -> None:
        self.reactive = TokenFleet(spec, initial_demand, schedules=False)
        self.history, self.step, self.lead = list(history), step, lead
        self.per_replica, self.models = per_replica_rps, tuple(models)
        self.bucket: list[float] = []
        self.bucket_end = step
        self.last: forecast.ForecastDecision | None = None

    def targets(self, view: PoolView) -> dict[str, int]:
        self.bucket.append(view.arrival_rate)
        if view.t + 1e-9 >= self.bucket_end or self.last is None:
            if view.t + 1e-9 >= self.bucket_end:
                self.history.append(sum(self.bucket) / len(self.bucket))
                self.bucket, self.bucket_end = [], self.bucket_end + self.step
            self.last = forecast.prescale(
                history=self.history,
                step=self.step,
                lead_seconds=self.lead,
                per_replica_rps=self.per_replica,
                models=self.models,
            )
        self.reactive.policy = dataclasses.replace(
            self.reactive.policy,
            forecast=forecast.Settings(
                per_replica=self.per_replica, step=self.step, history=len(self.history) * self.step
            ),
            forecast_floor=self.last.replicas,
        )
        return self.reactive.targets(view)


#: HPA's defaults (kube-controller-manager flags and ``behavior`` defaults, autoscaling/v2):
HPA_SYNC_SECONDS = 15.0  # --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance: |ratio - 1| within it changes nothing
HPA_DOWN_WINDOW_SECONDS = 300.0  # behavior.scaleDown.stabilizationWindowSeconds
HPA_UP_PODS, HPA_UP_PERCENT = 4, 100  # behavior.scaleUp policies per 15 s period, selectPolicy Max
HPA_CPU_TARGET = 0.7  # the utilisation target the hpa-cpu baseline is given

#: What an HPA metric recommends: the view and the replicas the HPA holds now → replicas.
Recommend = Callable[[PoolView, int], int]


def within_tolerance(ratio: float) -> bool:
    """HPA changes nothing while the usage ratio is within the tolerance of 1."""
    return abs(1.0 - ratio) <= HPA_TOLERANCE


def cpu_replicas(view: PoolView, current: int, *, target: float = HPA_CPU_TARGET) -> int:
    """HPA's resource-utilisation rule (``GetResourceReplicas``) on the engine's busy share.

    The ratio is taken over ready pods (unready ones have no usable sample). Scaling down, they
    are left out: ``ceil(ratio x ready)``. Scaling up with unready pods, they count as idle and
    the ratio is recomputed over all pods; if that flips the direction or lands within the
    tolerance, nothing changes (so starting pods are never scaled away by their own absence).
    No ready pod: no metrics, no change.
    """
    if view.ready == 0:
        return current
    ratio = view.busy / (target * view.ready)
    unready = max(0, view.alive - view.ready)
    if not (unready and ratio > 1.0):
        return current if within_tolerance(ratio) else math.ceil(ratio * view.ready)
    everyone = view.ready + unready
    again = view.busy / (target * everyone)
    if within_tolerance(again) or again < 1.0:
        return current
    return math.ceil(again * everyone)


def queue_replicas(view: PoolView, current: int) -> int:
    """KEDA's queue-length scaler: an external metric with an ``AverageValue`` target through
    HPA (``GetExternalPerPodMetricReplicas``): ratio = queue / (target x pods), and outside the
    tolerance ``ceil(queue / target)``.

    The queue is what a competent operator points KEDA at: the gateway's queue depth of the
    classes whose queueing drives scaling (``autoscaling.queueAgeClasses``: batch waits by
    design and must not buy GPUs, as in TokenFleet's own policy) plus the engines' waiting
    requests, ``targetWaitingPerReplica`` each.
    """
    per_pod = view.spec.autoscaling.target_waiting_per_replica
    gateway = view.queue_length if view.scaling_queue_length is None else view.scaling_queue_length
    queue = gateway + view.engine_waiting
    pods = max(view.alive, 1)
    if within_tolerance(queue / (per_pod * pods)):
        return current
    return math.ceil(queue / per_pod)


class Hpa:
    """HPA's control loop around one metric rule, with its default behaviour.

    Every 15 s: the rule recommends; the recommendation is recorded; scaling down, the highest
    recommendation of the last 300 s wins (never above the current count); scaling up, at most
    max(+4 pods, +100 %) per sync; then ``replicas.min/max``. The history starts as a steady
    state: ``initial`` has been recommended for the whole window, exactly as TokenFleet's own
    policy is seeded, so no policy gets a free first scale-down.
    """

    def __init__(self, spec: InferencePoolSpec, initial: int, recommend: Recommend) -> None:
        self.spec, self.recommend = spec, recommend
        self.replicas = initial
        # steady state: the same demand recommended at the last sync before the start
        self.history: list[tuple[float, int]] = [(0.0, initial)]
        self.last_sync = -math.inf

    def targets(self, view: PoolView) -> dict[str, int]:
        if view.t - self.last_sync >= HPA_SYNC_SECONDS:
            self.last_sync = view.t
            self.replicas = self.step(view)
        return place(self.spec, self.replicas, view.zones, headroom=False)

    def step(self, view: PoolView) -> int:
        """One sync: recommend, stabilise, rate-limit, bound."""
        current = self.replicas
        desired = self.recommend(view, current)
        self.history = [(t, n) for t, n in self.history if view.t - t < HPA_DOWN_WINDOW_SECONDS]
        self.history.append((view.t, desired))
        if desired < current:
            desired = min(current, max(n for _, n in self.history))
        limit = max(current + HPA_UP_PODS, current * (100 + HPA_UP_PERCENT) // 100)
        desired = min(desired, limit)
        return max(self.spec.replicas.min, min(self.spec.replicas.max, desired))


def hpa_cpu(spec: InferencePoolSpec, initial: int) -> Hpa:
    """HPA on a CPU-like utilisation: the engine's busy share, target 70%."""
    return Hpa(spec, initial, cpu_replicas)


def keda_queue(spec: InferencePoolSpec, initial: int) -> Hpa:
    """KEDA on queue length, through HPA."""
    return Hpa(spec, initial, queue_replicas)


class Fixed:
    """The same replicas per zone all the time, whatever happens."""

    def __init__(self, per_zone: dict[str, int]) -> None:
        self.per_zone = per_zone

    def targets(self, view: PoolView) -> dict[str, int]:
        return dict(self.per_zone)


class Oracle:
    """Knows the offered load one cold start ahead; keeps the pool's zone-loss headroom."""

    def __init__(self, spec: InferencePoolSpec, need: Callable[[float], int], lead: float) -> None:
        self.spec, self.need, self.lead = spec, need, lead

    def targets(self, view: PoolView) -> dict[str, int]:
        steps = max(1, math.ceil(self.lead))
        ahead = max(self.need(view.t + self.lead * i / steps) for i in range(steps + 1))
        return place(self.spec, ahead, view.zones, headroom=True)


def sustainable_rps(perf: Performance, mean_input: float, mean_output: float, itl: float) -> float:
    """Requests/s one replica carries at the inter-token objective (steady state, no prefix hits).

    Per step of T seconds a replica decodes ``b`` sequences and prefills ``rate x input x T``
    tokens; Little's law gives ``b = rate x output x T``. Solving
    ``T = base + per_seq x b + per_token x rate x input x T`` for the rate at ``T = itl``, then
    capping by ``max_num_seqs`` and the KV cache (each sequence holds its whole context).
    """
    base, per_seq, per_tok = (
        perf.step_base_seconds,
        perf.step_per_sequence_seconds,
        perf.prefill_per_token_seconds,
    )
    work = per_seq * mean_output + per_tok * mean_input
    by_latency = (1 - base / itl) / work if work > 0 else math.inf
    seqs = min(perf.max_num_seqs, perf.kv_cache_tokens / (mean_input + mean_output))
    # at the sequence cap b = seqs: T = base / (1 - rate x work), rate x output x T = seqs
    by_seqs = seqs / (mean_output * base + seqs * work)
    return max(0.0, min(by_latency, by_seqs))
