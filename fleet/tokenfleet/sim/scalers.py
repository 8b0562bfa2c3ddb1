"""Scaling policies the simulator compares, each turning what a pool shows into replicas per zone.

``tokenfleet`` is the product: the operator's own pure decision (``policy.scaling.decide``) and
placement (``policy.placement.place``), fed the signals Prometheus would carry. The others are
the usual alternatives, modelled on their documented behaviour:

- ``hpa-cpu``: a Kubernetes HPA on a CPU-like utilisation (the share of time the engine is
  busy), target 70%, 15 s sync, scale-up limited to max(4 pods, 100%) per sync, 300 s
  scale-down stabilisation; unready pods count as idle. Even spread, no zone-loss headroom.
- ``keda-queue``: KEDA on the waiting-queue length alone (gateway queue plus engine waiting),
  ``targetWaitingPerReplica`` per replica, through the same HPA behaviour.
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
from tokenfleet.operator.policy import placement, scaling
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
    queue_length: int
    engine_waiting: int
    kv_cache_usage: float | None  # mean over ready replicas; None without one
    busy: float  # sum over ready replicas of the share of the interval their engine was busy
    prompt_tokens_rate: float  # tokens/s over the interval
    generation_tokens_rate: float
    arrival_rate: float  # requests/s offered to the pool
    completion_rate: float  # requests/s its replicas finished


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
    """The operator's decision and placement, unchanged."""

    def __init__(self, spec: InferencePoolSpec, initial_demand: int) -> None:
        self.policy = scaling.Policy.of(spec.autoscaling, spec.replicas)
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


class Hpa:
    """HPA's algorithm and default behaviour around a metric → desired replicas function."""

    def __init__(
        self, spec: InferencePoolSpec, initial: int, desired: Callable[[PoolView], float]
    ) -> None:
        self.spec = spec
        self.desired = desired
        self.replicas = initial
        self.history: list[tuple[float, int]] = []
        self.last_sync = -math.inf

    def targets(self, view: PoolView) -> dict[str, int]:
        if view.t - self.last_sync >= 15.0:
            self.last_sync = view.t
            current = max(view.alive, 1)
            want = self.desired(view)
            if abs(want / current - 1) <= 0.1:  # HPA's default tolerance
                want = current
            rec = max(self.spec.replicas.min, min(self.spec.replicas.max, math.ceil(want)))
            self.history = [(t, n) for t, n in self.history if view.t - t < 300] + [(view.t, rec)]
            if rec < self.replicas:
                rec = min(self.replicas, max(n for _, n in self.history))
            rec = min(rec, max(self.replicas + 4, 2 * self.replicas))
            self.replicas = rec
        return place(self.spec, self.replicas, view.zones, headroom=False)


def hpa_cpu(spec: InferencePoolSpec, initial: int) -> Hpa:
    return Hpa(spec, initial, lambda v: v.busy / 0.7)


def keda_queue(spec: InferencePoolSpec, initial: int) -> Hpa:
    per_replica = spec.autoscaling.target_waiting_per_replica
    return Hpa(spec, initial, lambda v: (v.queue_length + v.engine_waiting) / per_replica)


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
