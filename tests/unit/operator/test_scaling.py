"""The scaling decision as a table: each signal alone (shedding at the gateway and the engines'
preemptions included), ties, windows, step limits, starting credit, missing and stale metrics,
schedules, panic, min/max."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from tokenfleet.api.pool import Autoscaling, ReplicaBounds
from tokenfleet.operator.policy import scaling
from tokenfleet.operator.policy.scaling import Policy, Signals, State, Why, Window

MONDAY_9 = datetime.datetime(2026, 11, 30, 9, 0, tzinfo=datetime.UTC)  # a Monday
T = MONDAY_9.timestamp()
BASE = Policy(
    target_queue_age=1.0,
    target_kv_cache_usage=0.8,
    target_waiting_per_replica=4,
    up_window=15,
    down_window=300,
    max_up_step=4,
    max_down_step=1,
    panic_multiple=3,
    min_replicas=1,
    max_replicas=20,
)
LAUNCH = Window(
    days=frozenset({0}), start_minute=8 * 60, end_minute=12 * 60, min_replicas=12, max_replicas=20
)
NIGHT = Window(
    days=frozenset({0}), start_minute=22 * 60, end_minute=2 * 60, min_replicas=9, max_replicas=20
)
CAPPED = Window(
    days=frozenset({0}), start_minute=0, end_minute=24 * 60 - 1, min_replicas=1, max_replicas=5
)


def case(
    case_id: str,
    expected: int,
    why: Why,
    *,
    signals: Signals,
    replicas: int = 4,
    ready: int | None = None,
    starting: int = 0,
    history: tuple[tuple[float, int], ...] = (),
    now: datetime.datetime = MONDAY_9,
    **policy: Any,
) -> Any:
    return pytest.param(
        dataclasses.replace(BASE, **policy),
        signals,
        State(replicas=replicas, history=history),
        replicas if ready is None else ready,
        starting,
        now,
        expected,
        why,
        id=case_id,
    )


CASES = [
    case("queue-age-doubles", 8, Why.QUEUE_AGE, signals=Signals(oldest_queue_age=2.0)),
    case(
        "queue-age-at-target-no-upward-pressure",
        3,
        Why.STEP_LIMITED,
        signals=Signals(oldest_queue_age=1.0),
    ),
    case(
        "queue-age-under-target-alone-steps-down",
        3,
        Why.STEP_LIMITED,
        signals=Signals(oldest_queue_age=0.2),
    ),
    case("kv-over-target", 6, Why.KV_CACHE, replicas=5, signals=Signals(kv_cache_usage=0.96)),
    case("kv-at-target-holds", 5, Why.KV_CACHE, replicas=5, signals=Signals(kv_cache_usage=0.8)),
    # preemptions: the KV cache proven too small while the mean usage reads at or under target
    case(
        "preempting-engines-add-one-over-ready-though-kv-reads-under-target",
        5,
        Why.PREEMPTIONS,
        signals=Signals(kv_cache_usage=0.75, preemption_rate=0.5),
    ),
    case(
        "preempting-engines-packed-to-a-high-kv-target-still-add-one",
        5,
        Why.PREEMPTIONS,
        signals=Signals(kv_cache_usage=0.93, preemption_rate=0.5),
        target_kv_cache_usage=0.95,
    ),
    case(
        "kv-under-target-without-preemptions-holds",
        4,
        Why.KV_CACHE,
        signals=Signals(kv_cache_usage=0.7, preemption_rate=0.0),
    ),
    case(
        "preemptions-under-the-floor-say-nothing",
        4,
        Why.KV_CACHE,
        signals=Signals(kv_cache_usage=0.7, preemption_rate=0.01),
    ),
    case(
        "engines-without-the-counter-decide-as-before",
        4,
        Why.KV_CACHE,
        signals=Signals(kv_cache_usage=0.7),
    ),
    case(
        "kv-over-target-outbids-preemptions",
        7,
        Why.KV_CACHE,
        replicas=5,
        signals=Signals(kv_cache_usage=1.0, preemption_rate=0.5),
    ),
    case(
        "preemptions-ask-nothing-more-while-the-extra-replica-starts",
        5,
        Why.PREEMPTIONS,
        replicas=5,
        ready=4,
        starting=1,
        signals=Signals(kv_cache_usage=0.75, preemption_rate=0.5),
    ),
    case(
        "preemptions-without-kv-pressure-say-nothing",
        3,
        Why.KV_CACHE,
        signals=Signals(kv_cache_usage=0.5, preemption_rate=0.5),
    ),
    case(
        "kv-under-stabilized-by-recent-high",
        8,
        Why.DOWN_STABILIZED,
        replicas=8,
        signals=Signals(kv_cache_usage=0.4),
        history=((T - 100, 8),),
    ),
    case(
        "kv-under-after-the-window-steps-down",
        7,
        Why.STEP_LIMITED,
        replicas=8,
        signals=Signals(kv_cache_usage=0.4),
        history=((T - 400, 8),),
    ),
    case("waiting-requests", 10, Why.WAITING, replicas=8, signals=Signals(waiting=40)),
    case("waiting-zero-steps-down", 3, Why.STEP_LIMITED, signals=Signals(waiting=0)),
    case(
        "highest-signal-wins",
        8,
        Why.WAITING,
        signals=Signals(oldest_queue_age=1.5, kv_cache_usage=0.9, waiting=32),
    ),
    case(
        "tie-goes-to-queue-age", 8, Why.QUEUE_AGE, signals=Signals(oldest_queue_age=2.0, waiting=32)
    ),
    case(
        "spike-within-up-window-held",
        4,
        Why.UP_STABILIZED,
        signals=Signals(oldest_queue_age=2.0),
        history=((T - 5, 4),),
    ),
    case(
        "sustained-rise-after-up-window",
        8,
        Why.QUEUE_AGE,
        signals=Signals(oldest_queue_age=2.0),
        history=((T - 20, 4),),
    ),
    case(
        "partial-rise-takes-the-window-low",
        6,
        Why.UP_STABILIZED,
        signals=Signals(oldest_queue_age=2.0),
        history=((T - 5, 6), (T - 3, 9)),
    ),
    case(
        "panic-skips-stabilization",
        16,
        Why.PANIC,
        signals=Signals(oldest_queue_age=4.0),
        history=((T - 5, 4),),
        max_up_step=20,
    ),
    case(
        "panic-still-step-limited",
        8,
        Why.STEP_LIMITED,
        signals=Signals(oldest_queue_age=4.0),
        history=((T - 5, 4),),
    ),
    case(
        "panic-threshold-is-strict",
        4,
        Why.UP_STABILIZED,
        signals=Signals(oldest_queue_age=3.0),
        history=((T - 5, 4),),
    ),
    case("step-limit-up", 8, Why.STEP_LIMITED, signals=Signals(waiting=80)),
    case("step-limit-down", 9, Why.STEP_LIMITED, replicas=10, signals=Signals(kv_cache_usage=0.1)),
    case(
        "larger-down-step",
        6,
        Why.STEP_LIMITED,
        replicas=10,
        signals=Signals(kv_cache_usage=0.1),
        max_down_step=4,
    ),
    case(
        "starting-replicas-are-credited",
        8,
        Why.QUEUE_AGE,
        replicas=8,
        ready=4,
        starting=4,
        signals=Signals(oldest_queue_age=2.0),
    ),
    case(
        "starting-replicas-absorb-a-rise",
        5,
        Why.STARTING_ABSORB,
        replicas=5,
        ready=2,
        starting=4,
        signals=Signals(oldest_queue_age=3.0),
    ),
    case("missing-metrics-hold", 6, Why.METRICS_UNAVAILABLE, replicas=6, signals=Signals()),
    case(
        "stale-metrics-hold-even-when-low",
        6,
        Why.METRICS_UNAVAILABLE,
        replicas=6,
        signals=Signals(kv_cache_usage=0.05, stale=True),
    ),
    case(
        "missing-metrics-never-below-min",
        3,
        Why.MIN_REPLICAS,
        replicas=2,
        signals=Signals(),
        min_replicas=3,
    ),
    case(
        "disabled-uses-min",
        3,
        Why.DISABLED,
        replicas=7,
        signals=Signals(waiting=100),
        enabled=False,
        min_replicas=3,
    ),
    case(
        "min-bound",
        3,
        Why.MIN_REPLICAS,
        signals=Signals(kv_cache_usage=0.1),
        min_replicas=3,
        max_down_step=10,
    ),
    case("max-bound", 20, Why.MAX_REPLICAS, signals=Signals(waiting=400), max_up_step=200),
    case(
        "scheduled-minimum",
        12,
        Why.SCHEDULED_MIN,
        signals=Signals(kv_cache_usage=0.1),
        schedules=(LAUNCH,),
    ),
    case(
        "schedule-not-today",
        3,
        Why.STEP_LIMITED,
        signals=Signals(kv_cache_usage=0.1),
        schedules=(LAUNCH,),
        now=MONDAY_9 + datetime.timedelta(days=1),
    ),
    case(
        "schedule-wraps-midnight",
        9,
        Why.SCHEDULED_MIN,
        signals=Signals(kv_cache_usage=0.1),
        schedules=(NIGHT,),
        now=MONDAY_9.replace(hour=1) + datetime.timedelta(days=1),
    ),
    case(
        "scheduled-maximum", 5, Why.SCHEDULED_MAX, signals=Signals(waiting=80), schedules=(CAPPED,)
    ),
    case(
        "zero-ready-still-reads-waiting",
        2,
        Why.WAITING,
        replicas=1,
        ready=0,
        signals=Signals(waiting=8),
    ),
    case(
        "steady-state", 4, Why.KV_CACHE, signals=Signals(kv_cache_usage=0.8, oldest_queue_age=0.1)
    ),
    case("queue-wait-p95-alone", 8, Why.QUEUE_WAIT, signals=Signals(queue_wait_p95=2.0)),
    case(
        "queue-age-beats-equal-wait",
        8,
        Why.QUEUE_AGE,
        signals=Signals(oldest_queue_age=2.0, queue_wait_p95=2.0),
    ),
    case(
        "generation-token-rate",
        7,
        Why.GENERATION_TOKENS,
        replicas=5,
        signals=Signals(generation_tokens_rate=13_000.0),
        target_generation_tokens=2_000.0,
    ),
    case(
        "prompt-token-rate",
        6,
        Why.PROMPT_TOKENS,
        replicas=5,
        signals=Signals(prompt_tokens_rate=55_000.0),
        target_prompt_tokens=10_000.0,
    ),
    case(
        "token-rate-without-a-target-is-no-signal",
        4,
        Why.METRICS_UNAVAILABLE,
        signals=Signals(generation_tokens_rate=1e9),
    ),
    case(
        "offered-load-when-saturated-at-the-target-fullness",
        10,  # 4 ready flat out carry half the offered load: 8 at 100%, 10 at the 0.8 target
        Why.OFFERED_LOAD,
        signals=Signals(arrival_rate=200.0, completion_rate=100.0, oldest_queue_age=0.1),
        max_up_step=20,
    ),
    case(
        "completions-lagging-a-rise-without-a-backlog-are-not-saturation",
        3,
        Why.STEP_LIMITED,
        signals=Signals(arrival_rate=200.0, completion_rate=100.0, oldest_queue_age=0.0),
    ),
    case(
        "offered-load-absent-when-keeping-up",
        4,
        Why.METRICS_UNAVAILABLE,
        signals=Signals(arrival_rate=102.0, completion_rate=100.0),
    ),
    case(
        "backlog-capped-by-replicas-still-starting",
        4,
        Why.STARTING_ABSORB,
        ready=2,
        starting=2,
        signals=Signals(oldest_queue_age=10.0, waiting=400),
        max_up_step=20,
    ),
    case(
        "shedding-with-an-empty-queue-scales-by-offered-over-admitted",
        12,
        Why.SHEDDING,
        replicas=3,
        signals=Signals(
            oldest_queue_age=0.0,
            kv_cache_usage=0.0,
            waiting=0,
            refusal_rate=30.0,
            arrival_rate=40.0,
        ),
        max_up_step=20,
    ),
    case(
        "shedding-everything-at-least-doubles",
        6,
        Why.SHEDDING,
        replicas=3,
        signals=Signals(oldest_queue_age=0.0, refusal_rate=5.0, arrival_rate=5.0),
        max_up_step=20,
    ),
    case(
        "shedding-paced-by-the-step-limit",
        7,
        Why.STEP_LIMITED,
        replicas=3,
        signals=Signals(oldest_queue_age=0.0, refusal_rate=30.0, arrival_rate=40.0),
    ),
    case(
        "stray-refusals-are-noise",
        3,
        Why.STEP_LIMITED,
        signals=Signals(oldest_queue_age=0.0, refusal_rate=0.01, arrival_rate=10.0),
    ),
    case(
        "shedding-capped-by-replicas-still-starting",
        6,
        Why.STARTING_ABSORB,
        replicas=6,
        ready=3,
        starting=3,
        signals=Signals(oldest_queue_age=0.0, refusal_rate=30.0, arrival_rate=40.0),
        max_up_step=20,
    ),
    case(
        "ttft-p95-over-its-objective-scales-in-proportion",
        6,
        Why.TTFT,
        signals=Signals(ttft_p95=1.5, kv_cache_usage=0.4),
        ttft=scaling.Objective(percentile=95, seconds=1.0),
    ),
    case(
        "ttft-reads-the-percentile-it-names",
        8,
        Why.TTFT,
        signals=Signals(ttft_p95=0.5, ttft_p99=2.0, kv_cache_usage=0.8),
        ttft=scaling.Objective(percentile=99, seconds=1.0),
    ),
    case(
        "tpot-over-its-objective-when-queue-and-kv-look-fine",
        5,
        Why.TPOT,
        signals=Signals(tpot_p95=0.06, oldest_queue_age=0.0, kv_cache_usage=0.5),
        tpot=scaling.Objective(percentile=95, seconds=0.05),
    ),
    case(
        "latency-within-its-objectives-lets-the-others-scale-down",
        3,
        Why.STEP_LIMITED,
        signals=Signals(ttft_p95=0.3, tpot_p95=0.02, kv_cache_usage=0.2),
        ttft=scaling.Objective(percentile=95, seconds=1.0),
        tpot=scaling.Objective(percentile=95, seconds=0.05),
        down_window=0,
    ),
    case(
        "an-objective-without-requests-is-no-evidence-and-holds",
        4,
        Why.METRICS_UNAVAILABLE,
        signals=Signals(),
        tpot=scaling.Objective(percentile=95, seconds=0.05),
    ),
    case(
        "tpot-asks-for-the-starting-ones-and-no-more",
        6,
        Why.TPOT,
        replicas=6,
        ready=3,
        starting=3,
        signals=Signals(tpot_p95=0.1),
        tpot=scaling.Objective(percentile=95, seconds=0.05),
    ),
    case(
        "ttft-is-a-backlog-capped-while-replicas-start",
        6,
        Why.STARTING_ABSORB,
        replicas=6,
        ready=3,
        starting=3,
        signals=Signals(ttft_p95=4.0),
        ttft=scaling.Objective(percentile=95, seconds=1.0),
        max_up_step=20,
    ),
    case(
        "a-rate-still-adds-beyond-the-starting-ones",
        13,
        Why.PANIC,
        ready=2,
        starting=2,
        signals=Signals(oldest_queue_age=10.0, arrival_rate=500.0, completion_rate=100.0),
        max_up_step=20,
    ),
]


@pytest.mark.parametrize(
    ("policy", "signals", "state", "ready", "starting", "now", "expected", "why"), CASES
)
def test_decide(
    policy: Policy,
    signals: Signals,
    state: State,
    ready: int,
    starting: int,
    now: datetime.datetime,
    expected: int,
    why: Why,
) -> None:
    decision = scaling.decide(
        policy=policy, signals=signals, state=state, ready=ready, starting=starting, now=now
    )
    assert (decision.replicas, decision.why) == (expected, why), decision.message
    assert decision.state.replicas == decision.replicas
    assert decision.message


def test_history_keeps_only_the_longest_window() -> None:
    state = State(replicas=4, history=((T - 1000, 9), (T - 200, 7), (T - 5, 5)))
    decision = scaling.decide(
        policy=BASE,
        signals=Signals(kv_cache_usage=0.8),
        state=state,
        ready=4,
        starting=0,
        now=MONDAY_9,
    )
    assert [n for _, n in decision.state.history] == [7, 5, 4]


def test_silence_never_scales_down_over_many_intervals() -> None:
    state = State(replicas=6)
    for minute in range(60):
        decision = scaling.decide(
            policy=BASE,
            signals=Signals(),
            state=state,
            ready=6,
            starting=0,
            now=MONDAY_9 + datetime.timedelta(minutes=minute),
        )
        state = decision.state
    assert state.replicas == 6


def test_policy_from_the_crd_uses_seconds_and_weekdays() -> None:
    autoscaling = Autoscaling.model_validate(
        {
            "targetQueueAgeMs": 300,
            "scaleUpStabilizationSeconds": 10,
            "schedules": [
                {
                    "name": "launch",
                    "days": ["Mon"],
                    "start": "08:00",
                    "end": "12:00",
                    "minReplicas": 12,
                    "maxReplicas": 24,
                }
            ],
        }
    )
    policy = Policy.of(autoscaling, ReplicaBounds(min=2, max=30))
    assert policy.target_queue_age == 0.3 and policy.up_window == 10
    assert policy.schedules[0].days == frozenset({0}) and policy.schedules[0].start_minute == 480
    assert (policy.min_replicas, policy.max_replicas) == (2, 30)


def test_latency_objectives_from_the_crd_and_in_a_preview() -> None:
    autoscaling = Autoscaling.model_validate(
        {
            "ttftObjective": {"milliseconds": 1000},
            "preview": {"tpotObjective": {"percentile": 99, "milliseconds": 50}},
        }
    )
    active, preview = scaling.policies(autoscaling, ReplicaBounds(min=1, max=10))
    assert active.ttft == scaling.Objective(percentile=95, seconds=1.0)
    assert active.tpot is None
    assert preview is not None
    assert preview.ttft == active.ttft  # the preview overrides only what it sets
    assert preview.tpot == scaling.Objective(percentile=99, seconds=0.05)


@pytest.mark.parametrize(
    ("configured", "classes", "expected"),
    [
        pytest.param([], [("interactive", 200), ("batch", 100)], ["interactive"], id="not-batch"),
        pytest.param([], [("only", 1)], ["only"], id="single-class-counts"),
        pytest.param(
            [],
            [("critical", 300), ("interactive", 200), ("batch", 100)],
            ["critical", "interactive"],
            id="defaults",
        ),
        pytest.param(["batch"], [("interactive", 200), ("batch", 100)], ["batch"], id="configured"),
        pytest.param([], [("a", 1), ("b", 1)], ["a", "b"], id="all-equal-all-count"),
    ],
)
def test_queue_age_classes(
    configured: list[str], classes: list[tuple[str, int]], expected: list[str]
) -> None:
    assert scaling.queue_age_classes(configured, classes) == expected


def test_an_event_floor_holds_through_a_metrics_outage() -> None:
    """A runtime floor for a known event (a schedule's minReplicas) lifts the pool even while
    every signal is silent: the outage holds the last decision, never below the floor."""
    policy = dataclasses.replace(BASE, schedules=(LAUNCH,))
    decision = scaling.decide(
        policy=policy, signals=Signals(), state=State(replicas=4), ready=4, starting=0, now=MONDAY_9
    )
    assert (decision.replicas, decision.why) == (12, Why.SCHEDULED_MIN), decision.message
    stale = scaling.decide(
        policy=policy,
        signals=Signals(kv_cache_usage=0.1, stale=True),
        state=decision.state,
        ready=12,
        starting=0,
        now=MONDAY_9,
    )
    assert stale.replicas == 12


PREVIEWED = {
    "targetKvCacheUsage": 0.8,
    "scaleDownStabilizationSeconds": 600,
    "preview": {"targetKvCacheUsage": 0.4},
}


def test_a_preview_overrides_only_the_fields_it_sets() -> None:
    active, preview = scaling.policies(
        Autoscaling.model_validate(PREVIEWED), ReplicaBounds(min=1, max=20)
    )
    assert preview is not None
    assert (active.target_kv_cache_usage, preview.target_kv_cache_usage) == (0.8, 0.4)
    assert active.down_window == preview.down_window == 600  # not set in the preview: inherited
    assert scaling.policies(Autoscaling(), ReplicaBounds())[1] is None


def test_promoting_a_preview_makes_it_act_and_shows_the_specs_own_beside_it() -> None:
    promoted = Autoscaling.model_validate({**PREVIEWED, "usePreview": True})
    active, shown = scaling.policies(promoted, ReplicaBounds(min=1, max=20))
    assert shown is not None
    assert (active.target_kv_cache_usage, shown.target_kv_cache_usage) == (0.4, 0.8)
    with pytest.raises(ValueError, match=r"usePreview needs autoscaling\.preview"):
        Autoscaling.model_validate({"usePreview": True})


def test_a_preview_decides_on_the_same_signals_without_acting() -> None:
    """At 60 % KV usage on 4 replicas the active target (80 %) asks for 3, the preview's (40 %)
    for 6: status shows both, the demand stays the active one's."""
    from tokenfleet.operator.plan.autoscaling_status import autoscaling_status

    active, preview = scaling.policies(
        Autoscaling.model_validate(PREVIEWED), ReplicaBounds(min=1, max=20)
    )
    assert preview is not None
    seen = Signals(kv_cache_usage=0.6)
    state = State(replicas=4)
    acts = scaling.decide(
        policy=active, signals=seen, state=state, ready=4, starting=0, now=MONDAY_9
    )
    would = scaling.decide(
        policy=preview, signals=seen, state=state, ready=4, starting=0, now=MONDAY_9
    )
    block = autoscaling_status(acts, old=None, now=MONDAY_9, preview=would)
    assert block.demand == acts.replicas == 3  # the active's decision is the demand
    assert block.preview is not None and block.preview.would_be_replicas == would.replicas == 6
    assert block.preview.reason == Why.KV_CACHE.value and block.preview.policy == "preview"
    wire = block.to_wire()
    assert wire["preview"]["wouldBeReplicas"] == 6, wire


def test_a_latency_objective_scales_the_replicas_its_percentile_was_measured_on() -> None:
    """The percentile covers the last minute: half of it on 3 replicas, half on 6 ready now,
    so 1.5x over the objective asks for 1.5 x 4.5 = 7 (not 1.5 x 6 = 9: the step to 6 would
    count twice); samples older than the minute are forgotten."""
    policy = dataclasses.replace(
        BASE, tpot=scaling.Objective(percentile=95, seconds=0.05), max_up_step=10, up_window=0
    )
    state = State(replicas=6, ready_seen=((T - 90, 1), (T - 30, 3)))
    decision = scaling.decide(
        policy=policy,
        signals=Signals(tpot_p95=0.075),
        state=state,
        ready=6,
        starting=0,
        now=MONDAY_9,
    )
    assert decision.recommendations["TPOTObjective"] == 7, decision.message
    assert decision.state.ready_seen == ((T - 30, 3), (T, 6))


def test_a_pool_without_signals_holds_its_scheduled_floor() -> None:
    """No model yet (or no Prometheus): nothing to decide on, but a known event's floor holds
    (example 01 planned 9 replicas instead of 18 during its Monday window without a model)."""
    policy = dataclasses.replace(BASE, min_replicas=6, schedules=(LAUNCH,))
    assert scaling.scheduled_floor(policy, MONDAY_9) == 12
    assert scaling.scheduled_floor(policy, MONDAY_9 + datetime.timedelta(hours=4)) == 6


@pytest.mark.parametrize(
    ("policy", "now", "expected"),
    [
        pytest.param(
            dataclasses.replace(BASE, min_replicas=6, schedules=(LAUNCH,)),
            MONDAY_9,
            12,
            id="a-window-above-min-holds-its-floor",
        ),
        pytest.param(
            dataclasses.replace(BASE, min_replicas=6, schedules=(LAUNCH,)),
            MONDAY_9 + datetime.timedelta(hours=4),
            0,
            id="the-window-over-min-decides",
        ),
        pytest.param(
            dataclasses.replace(BASE, min_replicas=12, schedules=(LAUNCH,)),
            MONDAY_9,
            0,
            id="a-window-equal-to-min-adds-nothing",
        ),
        pytest.param(
            dataclasses.replace(BASE, min_replicas=15, schedules=(LAUNCH,)),
            MONDAY_9,
            0,
            id="a-window-below-min-adds-nothing",
        ),
        pytest.param(dataclasses.replace(BASE, min_replicas=3), MONDAY_9, 0, id="no-schedule"),
        pytest.param(
            dataclasses.replace(BASE, min_replicas=2, schedules=(NIGHT,)),
            MONDAY_9.replace(hour=23),
            9,
            id="a-window-across-midnight-holds",
        ),
        pytest.param(
            dataclasses.replace(BASE, min_replicas=2, schedules=(CAPPED,)),
            MONDAY_9,
            0,
            id="a-window-that-only-caps-adds-nothing",
        ),
    ],
)
def test_demand_without_signals_is_the_scheduled_floor_else_zero(
    policy: Policy, now: datetime.datetime, expected: int
) -> None:
    """No model yet or no Prometheus: the demand a pool plans with is a known event's floor
    when that floor rises above replicas.min, else 0 (replicas.min decides)."""
    assert scaling.demand_without_signals(policy, now) == expected
