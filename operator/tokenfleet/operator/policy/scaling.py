"""The replica decision (pure): signals + policy + previous state + now → replicas + why.

Each signal recommends a replica count against the capacity that is *ready* (so replicas still
starting are credited, not re-requested): queue age over its target scales up in proportion,
so does the share of offered load the gateways refused (admission sheds what it cannot start
in time, so a saturated pool may show no queue at all), KV-cache usage and waiting requests
scale both ways, and engines preempting requests while their KV usage reads near its target
ask for one replica more than ready (the cache is proven too small, though the bounded gauge
cannot say by how much); a latency objective (p95 or p99 time to first token or time per output
token) over its target scales up in proportion. The highest recommendation wins. Going up,
the lowest recommendation of the short up-window wins (a lone spike adds nothing) unless the
queue is in panic (age past a multiple of its target); going down, the highest of the long
down-window wins. Then step limits, scheduled bounds (known events) and min/max. Missing or
stale metrics hold the last decision: silence never scales down.

The result is the *demand* handed to placement, which adds the warm floor and zone-loss headroom.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
from collections.abc import Sequence

from tokenfleet.api.pool import Autoscaling, LatencyObjective, ReplicaBounds, scaling_classes
from tokenfleet.api.pool import Forecast as ForecastSpec
from tokenfleet.operator.policy import forecast


class Why(enum.StrEnum):
    QUEUE_AGE = "QueueAge"
    QUEUE_WAIT = "QueueWaitP95"
    PROMPT_TOKENS = "PromptTokenRate"
    GENERATION_TOKENS = "GenerationTokenRate"
    OFFERED_LOAD = "OfferedLoad"
    SHEDDING = "Shedding"
    KV_CACHE = "KVCacheUsage"
    PREEMPTIONS = "Preemptions"
    TTFT = "TTFTObjective"
    TPOT = "TPOTObjective"
    WAITING = "WaitingRequests"
    PANIC = "QueuePanic"
    STARTING_ABSORB = "StartingReplicasAbsorb"
    UP_STABILIZED = "ScaleUpStabilized"
    DOWN_STABILIZED = "ScaleDownStabilized"
    STEP_LIMITED = "StepLimited"
    SCHEDULED_MIN = "ScheduledMinimum"
    SCHEDULED_MAX = "ScheduledMaximum"
    FORECAST_MIN = "ForecastMinimum"
    MIN_REPLICAS = "MinReplicas"
    MAX_REPLICAS = "MaxReplicas"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    DISABLED = "AutoscalingDisabled"


DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Objective:
    """A latency percentile to hold: ``percentile`` 95 or 99, ``seconds`` its bound."""

    percentile: int
    seconds: float

    @classmethod
    def of(cls, spec: LatencyObjective | None) -> Objective | None:
        if spec is None:
            return None
        return cls(percentile=spec.percentile, seconds=spec.milliseconds / 1000)


def forecasting(spec: ForecastSpec | None) -> forecast.Settings | None:
    """How the forecast floor is made, from ``autoscaling.forecast``."""
    if spec is None:
        return None
    return forecast.Settings(
        per_replica=spec.requests_per_second_per_replica,
        step=spec.step_seconds,
        history=spec.history_days * 86_400.0,
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Replica bounds for a known event, in UTC minutes of the day."""

    days: frozenset[int]  # 0 = Monday
    start_minute: int
    end_minute: int  # before start: wraps midnight
    min_replicas: int
    max_replicas: int

    def active(self, now: datetime.datetime) -> bool:
        minute = now.hour * 60 + now.minute
        if self.start_minute <= self.end_minute:
            return now.weekday() in self.days and self.start_minute <= minute < self.end_minute
        if minute >= self.start_minute:
            return now.weekday() in self.days
        return (now.weekday() - 1) % 7 in self.days and minute < self.end_minute


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Targets and damping (seconds), from InferencePool.spec.autoscaling and .replicas."""

    enabled: bool = True
    target_queue_age: float = 0.5
    target_kv_cache_usage: float = 0.8
    target_waiting_per_replica: float = 4.0
    target_prompt_tokens: float = 0.0  # per second per replica; 0 = not a signal
    target_generation_tokens: float = 0.0
    up_window: float = 15.0
    down_window: float = 300.0
    max_up_step: int = 4
    max_down_step: int = 1
    panic_multiple: float = 3.0
    ttft: Objective | None = None  # client-seen time to first token, scaling classes only
    tpot: Objective | None = None  # the engines' time per output token
    forecast: forecast.Settings | None = None
    forecast_floor: int = 0  # the forecast's replicas now (the caller sets it each pass)
    min_replicas: int = 1
    max_replicas: int = 10
    schedules: tuple[Window, ...] = ()

    @classmethod
    def of(cls, autoscaling: Autoscaling, replicas: ReplicaBounds) -> Policy:
        def minutes(hhmm: str) -> int:
            hours, mins = hhmm.split(":")
            return int(hours) * 60 + int(mins)

        return cls(
            enabled=autoscaling.enabled,
            target_queue_age=autoscaling.target_queue_age_ms / 1000,
            target_kv_cache_usage=autoscaling.target_kv_cache_usage,
            target_waiting_per_replica=autoscaling.target_waiting_per_replica,
            target_prompt_tokens=autoscaling.target_prompt_tokens_per_second_per_replica,
            target_generation_tokens=autoscaling.target_generation_tokens_per_second_per_replica,
            up_window=autoscaling.scale_up_stabilization_seconds,
            down_window=autoscaling.scale_down_stabilization_seconds,
            max_up_step=autoscaling.max_scale_up_step,
            max_down_step=autoscaling.max_scale_down_step,
            panic_multiple=autoscaling.panic_queue_age_multiple,
            ttft=Objective.of(autoscaling.ttft_objective),
            tpot=Objective.of(autoscaling.tpot_objective),
            forecast=forecasting(autoscaling.forecast),
            min_replicas=replicas.min,
            max_replicas=replicas.max,
            schedules=tuple(
                Window(
                    days=frozenset(DAYS.index(d) for d in w.days),
                    start_minute=minutes(w.start),
                    end_minute=minutes(w.end),
                    min_replicas=w.min_replicas,
                    max_replicas=w.max_replicas,
                )
                for w in autoscaling.schedules
            ),
        )


def policies(autoscaling: Autoscaling, replicas: ReplicaBounds) -> tuple[Policy, Policy | None]:
    """The policy that acts and the one previewed beside it (None without a preview): the
    spec's targets act and the preview's are tried, or — with ``usePreview`` — the reverse, so
    the replaced targets stay visible until the preview is removed."""
    own = Policy.of(autoscaling, replicas)
    tried = autoscaling.previewed()
    if tried is None:
        return own, None
    preview = Policy.of(tried, replicas)
    return (preview, own) if autoscaling.use_preview else (own, preview)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Signals:
    """What Prometheus said this interval; None is "no series", never zero."""

    oldest_queue_age: float | None = None  # seconds, max over gateway replicas
    kv_cache_usage: float | None = None  # mean over ready workers, 0..1
    waiting: float | None = None  # vllm:num_requests_waiting summed over ready workers
    queue_wait_p95: float | None = None  # seconds, over the gateways' recent admissions
    prompt_tokens_rate: float | None = None  # tokens/s prefilled by the pool
    generation_tokens_rate: float | None = None  # tokens/s generated by the pool
    arrival_rate: float | None = None  # requests/s offered to the pool's gateways (all classes)
    completion_rate: float | None = None  # requests/s the pool's engines finished
    refusal_rate: float | None = None  # requests/s the gateways' admission refused (shed)
    preemption_rate: float | None = None  # requests/s the pool's engines preempted (KV full)
    # latency percentiles over the last minute, in seconds; read only for a policy's objectives
    ttft_p95: float | None = None  # the gateways' time to first token, scaling classes
    ttft_p99: float | None = None
    tpot_p95: float | None = None  # the engines' time per output token (inter-token latency)
    tpot_p99: float | None = None
    stale: bool = False  # a series stopped updating


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class State:
    """Carried from one decision to the next."""

    replicas: int
    history: tuple[tuple[float, int], ...] = ()  # (unix seconds, raw recommendation)
    ready_seen: tuple[tuple[float, int], ...] = ()  # (unix seconds, ready), the last minute


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    replicas: int
    why: Why
    message: str
    recommendations: dict[str, int]
    state: State


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    low: int
    high: int
    low_why: Why
    high_why: Why


def _bounds(policy: Policy, now: datetime.datetime) -> Bounds:
    low, high = policy.min_replicas, policy.max_replicas
    low_why, high_why = Why.MIN_REPLICAS, Why.MAX_REPLICAS
    for w in policy.schedules:
        if w.active(now):
            if w.min_replicas > low:
                low, low_why = w.min_replicas, Why.SCHEDULED_MIN
            if w.max_replicas < high:
                high, high_why = w.max_replicas, Why.SCHEDULED_MAX
    if policy.forecast is not None and min(policy.forecast_floor, high) > low:
        # a floor like a schedule's, never above the maximum a known event (or the pool) sets
        low, low_why = min(policy.forecast_floor, high), Why.FORECAST_MIN
    return Bounds(low, max(low, high), low_why, high_why)


def scheduled_floor(policy: Policy, now: datetime.datetime) -> int:
    """The fewest replicas the bounds allow now: ``replicas.min``, raised by an active schedule
    window (a known event) — what a pool holds without signals to decide on (no model yet, no
    Prometheus configured)."""
    return _bounds(policy, now).low


def demand_without_signals(policy: Policy, now: datetime.datetime) -> int:
    """A pool's demand when there is nothing to decide on (no model yet, no Prometheus
    configured): a known event's floor (:func:`scheduled_floor`) when it rises above
    ``replicas.min``, else 0 — which says "no demand of its own": ``replicas.min`` decides."""
    floor = scheduled_floor(policy, now)
    return floor if floor > policy.min_replicas else 0


def queue_age_classes(configured: Sequence[str], classes: Sequence[tuple[str, int]]) -> list[str]:
    """Admission classes (name, priority) whose queue age drives scaling: those configured,
    else all but the lowest-priority class when there are several (batch waits by design):
    the API's one rule, which ``InferencePoolSpec.scaling_classes`` applies to a spec."""
    return scaling_classes(configured, classes)


#: Signals that measure a backlog (an integral of past shortfall): they keep growing while new
#: replicas load, so they cannot see capacity that is still starting.
BACKLOG = (Why.QUEUE_AGE, Why.QUEUE_WAIT, Why.WAITING, Why.SHEDDING, Why.PREEMPTIONS, Why.TTFT)
#: Arrivals above completions by more than this share mean the pool is saturated.
SATURATED = 1.05
#: Refusals per second below this are noise (a client's stray request past its deadline), not a
#: pool turning load away: about one every 20 s.
SHED_FLOOR = 0.05
#: Preemptions per second from which the engines count as out of KV cache: more than one a minute
#: in the 1-minute rate (a lone preemption in a burst is left to the up-window's damping).
PREEMPTION_FLOOR = 0.02
#: Preemptions count only while the mean KV usage reads at least this share of its target: KV
#: pressure, not the tail of a thrash the pool already grew out of (the 1-minute rate lags a
#: cold start). bench/preemptions.py: without it the signal added 1-2 engines for nothing after
#: every step; with it, it changes only the run where the KV signal was blind (target 0.95) and
#: adds one engine for nothing after the largest step.
KV_PRESSURE = 0.9


def observed(signals: Signals, name: str, percentile: int) -> float | None:
    """The ``name`` ("ttft" or "tpot") percentile the signals carry, in seconds."""
    value: float | None = getattr(signals, f"{name}_p{percentile}")
    return value


def objectives(policy: Policy) -> list[tuple[Why, str, Objective]]:
    """The policy's latency objectives: (signal, name, objective)."""
    found = [(Why.TTFT, "ttft", policy.ttft), (Why.TPOT, "tpot", policy.tpot)]
    return [(why, name, o) for why, name, o in found if o is not None]


#: The latency percentiles are taken over the last minute (the queries' window): they were
#: measured on the capacity of that minute, so an objective scales the replicas ready on average
#: in it (one sample per decision), not those ready now: a scale-up would otherwise count again
#: at every decision until the window forgot it (tests/unit/sim/test_latency_objectives.py:
#: 8 replicas where 5 hold the objective; with the fewest ready instead, it is met 50 s later).
LATENCY_WINDOW_SECONDS = 60.0


def recommend(
    policy: Policy, signals: Signals, ready: int, *, measured_on: float | None = None
) -> dict[Why, int]:
    """Each present signal's replica count, against the ready capacity (``measured_on``: the
    replicas ready on average while the latency percentiles were measured; default ``ready``)."""
    base = max(1, ready)
    out: dict[Why, int] = {}
    for why, name, objective in objectives(policy):
        # over its objective, the latency asks for capacity in proportion, like queue age: time
        # per output token grows with the batch as t0 + k x batch, so the proportion under-asks
        # (it asks again next interval) rather than overshoots; within it, it asks for nothing
        # (the other signals scale down). No requests in the window: no evidence, no entry.
        value = observed(signals, name, objective.percentile)
        if value is not None:
            ratio = value / objective.seconds
            on = max(1.0, ready if measured_on is None else measured_on)
            out[why] = math.ceil(on * ratio - 1e-9) if ratio > 1 else 0
    for why, age in (
        (Why.QUEUE_AGE, signals.oldest_queue_age),
        (Why.QUEUE_WAIT, signals.queue_wait_p95),
    ):
        if age is not None:
            ratio = age / policy.target_queue_age
            out[why] = math.ceil(base * ratio - 1e-9) if ratio > 1 else 0
    for why, rate, target in (
        (Why.PROMPT_TOKENS, signals.prompt_tokens_rate, policy.target_prompt_tokens),
        (Why.GENERATION_TOKENS, signals.generation_tokens_rate, policy.target_generation_tokens),
    ):
        if rate is not None and target > 0:
            out[why] = math.ceil(rate / target - 1e-9)
    arrivals, completions = signals.arrival_rate, signals.completion_rate
    # completions trail arrivals by a service time whenever traffic rises: only a backlog
    # (requests queued at the gateways, or more waiting in engines than there are engines)
    # shows that the pool, not the lag, is the limit
    backlog = (
        (signals.oldest_queue_age or 0) > 0
        or (signals.waiting or 0) >= max(1, ready)
        or (signals.refusal_rate or 0) >= SHED_FLOOR
    )
    if backlog and arrivals is not None and completions and arrivals > SATURATED * completions:
        # saturated: each ready replica completes completions/ready per second flat out, so the
        # offered load needs ready x arrivals/completions of them at 100%, and that divided by
        # the target fullness (the KV target) to run where the other signals settle — a rate,
        # not a backlog, so it does not grow during a cold start, and one cold start suffices
        out[Why.OFFERED_LOAD] = math.ceil(
            ready * arrivals / completions / policy.target_kv_cache_usage - 1e-9
        )
    shed = _shedding(signals, ready)
    if shed is not None:
        out[Why.SHEDDING] = shed
    if signals.kv_cache_usage is not None:
        out[Why.KV_CACHE] = math.ceil(
            base * signals.kv_cache_usage / policy.target_kv_cache_usage - 1e-9
        )
    if _kv_pressure(policy, signals):
        # vLLM preempts only when a running request finds no free KV block: the cache is too
        # small for the batch even when the mean usage reads at or under target (a target near
        # 1 packs engines so tight the bounded gauge can never ask for more; one hot engine
        # among cool ones; blocks freed in lumps by each eviction). It adds the replica the
        # usage cannot ask for; without the counter it says nothing (no evidence either way).
        out[Why.PREEMPTIONS] = base + 1
    if signals.waiting is not None:
        out[Why.WAITING] = math.ceil(signals.waiting / policy.target_waiting_per_replica - 1e-9)
    return out


def _kv_pressure(policy: Policy, signals: Signals) -> bool:
    """Engines preempting (above the floor) while their KV cache reads near its target."""
    usage = signals.kv_cache_usage
    return (
        (signals.preemption_rate or 0) >= PREEMPTION_FLOOR
        and usage is not None
        and usage >= KV_PRESSURE * policy.target_kv_cache_usage
    )


def _shedding(signals: Signals, ready: int) -> int | None:
    """Replicas for the load the gateways turned away. Admission keeps the engines' queues
    short by refusing what it cannot start in time, so a saturated pool can show an empty
    queue, idle KV cache and no waiting requests while it sheds most of its offered load: the
    refusals are the backlog. Offered load over admitted load scales the ready capacity (the
    same proportion the queue-age signal uses), measured at the gateway, where it happens.
    Retrying clients inflate the ratio; step limits, the up-window and replicas.max bound it,
    and while replicas start it asks no more than ready + starting (a backlog signal)."""
    shed = signals.refusal_rate
    if shed is None or shed < SHED_FLOOR:
        return None if shed is None else 0
    offered = max(signals.arrival_rate or 0.0, shed)
    admitted = offered - shed
    if admitted <= 0:  # everything refused: at least double, the step limit decides the pace
        return 2 * max(1, ready)
    return math.ceil(max(1, ready) * offered / admitted - 1e-9)


def _cap_backlogs(recs: dict[Why, int], ready: int, starting: int) -> bool:
    """A backlog cannot see replicas still loading: while some start, it asks no more than
    ready + starting. True when that changed a recommendation."""
    capped = False
    if starting > 0:
        for k in BACKLOG:
            if recs.get(k, 0) > ready + starting:
                recs[k], capped = ready + starting, True
    return capped


def decide(
    *,
    policy: Policy,
    signals: Signals,
    state: State,
    ready: int,
    starting: int,
    now: datetime.datetime,
) -> Decision:
    """The next replica count (the demand placement will honour) and why."""
    bounds = _bounds(policy, now)
    current = state.replicas
    if not policy.enabled:
        return _final(
            bounds.low,
            Why.DISABLED,
            "autoscaling is off: replicas.min applies",
            recs={},
            state=state,
            bounds=bounds,
        )
    t = now.timestamp()
    seen = (
        *((at, n) for at, n in state.ready_seen if t - at < LATENCY_WINDOW_SECONDS),
        (t, ready),
    )
    recs = recommend(policy, signals, ready, measured_on=sum(n for _, n in seen) / len(seen))
    capped = _cap_backlogs(recs, ready, starting)
    if signals.stale or not recs:
        return _final(
            current,
            Why.METRICS_UNAVAILABLE,
            "no fresh metrics: holding the last decision",
            recs={},
            state=state,
            bounds=bounds,
        )
    why = max(recs, key=lambda k: (recs[k], k == Why.QUEUE_AGE))
    raw = recs[why]
    horizon = max(policy.up_window, policy.down_window)
    history = (*((at, n) for at, n in state.history if t - at <= horizon), (t, raw))
    shown = {k.value: v for k, v in recs.items()}
    target, reason = raw, why
    if capped and why in BACKLOG:
        reason = Why.STARTING_ABSORB
    panic = (signals.oldest_queue_age or 0) > policy.panic_multiple * policy.target_queue_age
    if raw > current:
        if ready + starting >= raw and starting > 0:
            target, reason = current, Why.STARTING_ABSORB
        elif panic:
            reason = Why.PANIC
        else:
            lowest = min(n for at, n in history if t - at <= policy.up_window)
            if lowest < raw:
                target, reason = max(current, lowest), Why.UP_STABILIZED
    elif raw < current:
        highest = max(n for at, n in history if t - at <= policy.down_window)
        if highest > raw:
            target, reason = min(current, highest), Why.DOWN_STABILIZED
    stepped = min(max(target, current - policy.max_down_step), current + policy.max_up_step)
    if stepped != target:
        target, reason = stepped, Why.STEP_LIMITED
    message = (
        f"{reason.value}: {target} replicas (signals recommend {shown}; "
        f"{ready} ready, {starting} starting)"
    )
    return _final(
        target,
        reason,
        message,
        recs=shown,
        state=State(replicas=current, history=history, ready_seen=seen),
        bounds=bounds,
    )


def _final(
    target: int, why: Why, message: str, *, recs: dict[str, int], state: State, bounds: Bounds
) -> Decision:
    low, high = bounds.low, bounds.high
    if target < low:
        target, why, message = (
            low,
            bounds.low_why,
            f"{bounds.low_why.value}: raised to {low}; {message}",
        )
    elif target > high:
        target, why, message = (
            high,
            bounds.high_why,
            f"{bounds.high_why.value}: capped at {high}; {message}",
        )
    return Decision(
        replicas=target,
        why=why,
        message=message,
        recommendations=recs,
        state=dataclasses.replace(state, replicas=target),
    )
