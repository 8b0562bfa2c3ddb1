"""The simulator's HPA and KEDA baselines against the published algorithms.

HPA (autoscaling/v2 defaults): desired = ceil(current x metric / target), no change within a
tolerance of 0.1, unready pods left out when scaling down and counted idle when scaling up
(a flip of direction changes nothing), scale-up at most max(4 pods, 100 %) per 15 s sync, the
highest recommendation of the last 300 s when scaling down. KEDA: its queue-length scaler as an
external ``AverageValue`` metric through that HPA, on the queue a competent operator configures
(the classes that drive scaling, not the batch queue that waits by design). Every baseline
starts from the same steady state as TokenFleet's own policy: its opening replicas have been
recommended for the whole window.

Each case is a sequence of (time, pool view) the scaler sees at its syncs, and the replicas it
holds after the last one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.policy import placement
from tokenfleet.sim import scalers

SPEC = InferencePoolSpec.model_validate(
    {
        "zones": {"names": ["zone-a", "zone-b", "zone-c"], "tolerateLoss": 1},
        "replicas": {"min": 6, "max": 2000},
        "autoscaling": {"targetWaitingPerReplica": 4},
        "admission": {
            "classes": [
                {"name": "interactive", "priority": 200},
                {"name": "batch", "priority": 100},
            ]
        },
    }
)
ZONES = [placement.Zone(name=z, healthy=True) for z in ("zone-a", "zone-b", "zone-c")]


def view(t: float, **over: Any) -> scalers.PoolView:
    """A pool of 10 ready replicas, idle and with empty queues, at time ``t``; override by
    keyword."""
    base = scalers.PoolView(
        t=t,
        spec=SPEC,
        zones=ZONES,
        ready=10,
        starting=0,
        alive=10,
        oldest_queue_age=0.0,
        queue_wait_p95=None,
        queue_length=0,
        engine_waiting=0,
        kv_cache_usage=0.5,
        busy=0.0,
        prompt_tokens_rate=0.0,
        generation_tokens_rate=0.0,
        arrival_rate=0.0,
        completion_rate=0.0,
        scaling_queue_length=0,
    )
    return dataclasses.replace(base, **over)


def held(
    make: Callable[[InferencePoolSpec, int], scalers.Hpa],
    initial: int,
    views: list[scalers.PoolView],
) -> int:
    scaler = make(SPEC, initial)
    per_zone: dict[str, int] = {}
    for v in views:
        per_zone = scaler.targets(v)
    assert sum(per_zone.values()) == scaler.replicas  # an even spread of what it holds
    return scaler.replicas


def every_sync(until: float, **over: Any) -> list[scalers.PoolView]:
    """The same view at every 15 s sync from t=15 to ``until``."""
    return [view(float(t), **over) for t in range(15, int(until) + 1, 15)]


@pytest.mark.parametrize(
    ("initial", "views", "replicas"),
    [
        # steady state: 30 replicas held for the window, then the load falls away at once —
        # HPA keeps 30 for 300 s (the old model, with an empty history, dropped to 6 at once)
        pytest.param(30, [view(15, ready=30, alive=30, busy=1.0)], 30, id="steady-start-holds"),
        pytest.param(
            30, every_sync(285, ready=30, alive=30, busy=1.0), 30, id="holds-through-the-window"
        ),
        pytest.param(
            30,
            [
                *every_sync(285, ready=30, alive=30, busy=1.0),
                view(300, ready=30, alive=30, busy=1.0),
            ],
            6,
            id="window-over-scales-down-to-min",
        ),
        # desired = ceil(current x metric / target): 10 pods 100 % busy at a 70 % target → 15
        pytest.param(10, [view(15, busy=10.0)], 15, id="ratio-up"),
        # |ratio - 1| <= 0.1 changes nothing: 7.5 busy / (0.7 x 10) = 1.07
        pytest.param(10, [view(15, busy=7.5)], 10, id="within-tolerance"),
        # 100 pods, 100 % busy: ceil(143) limited to max(+4, +100 %) = 200 per sync
        pytest.param(100, [view(15, ready=100, alive=100, busy=100.0)], 143, id="ratio-up-many"),
        # 3 pods: +4 beats +100 % (ceil(43) asked)
        pytest.param(3, [view(15, ready=3, alive=3, busy=30.0)], 7, id="up-limit-4-pods"),
        pytest.param(10, [view(15, ready=10, alive=10, busy=10.0 * 5)], 20, id="up-limit-doubles"),
        # 10 ready and busy, 10 still loading: over ready pods the ratio says up (1.43); with the
        # loading ones idle it says down (0.71): a flipped direction changes nothing, at every
        # sync, so when the steady state leaves the window the starting pods are still wanted
        # (the old model recommended 15 each time and scaled its own starting pods away)
        pytest.param(
            20,
            [
                *every_sync(285, alive=20, starting=10, busy=10.0),
                view(300, alive=20, starting=10, busy=10.0),
            ],
            20,
            id="starting-pods-kept",
        ),
        # no ready pod has a sample: no metrics, no change
        pytest.param(
            20,
            [*every_sync(285, ready=0, alive=20, starting=20), view(300, ready=0, alive=20)],
            20,
            id="no-ready-pods-holds",
        ),
    ],
)
def test_hpa_cpu(initial: int, views: list[scalers.PoolView], replicas: int) -> None:
    assert held(scalers.hpa_cpu, initial, views) == replicas


@pytest.mark.parametrize(
    ("initial", "views", "replicas"),
    [
        # the case: 135 replicas at steady state, the queue empty — KEDA through HPA
        # keeps them for the 300 s window (the old model went to 6 at its first sync)
        pytest.param(135, [view(5, ready=135, alive=135)], 135, id="steady-start-holds"),
        pytest.param(
            135,
            [*every_sync(285, ready=135, alive=135), view(300, ready=135, alive=135)],
            6,
            id="window-over-scales-down-to-min",
        ),
        # a deep batch queue waits by design: it must not buy GPUs (40 engine-waiting over 10
        # pods at 4 each is on target)
        pytest.param(
            10,
            [view(15, queue_length=50_000, scaling_queue_length=0, engine_waiting=40)],
            10,
            id="batch-queue-ignored",
        ),
        # the interactive queue does: ceil(80 / 4) = 20
        pytest.param(
            10,
            [view(15, queue_length=50_080, scaling_queue_length=80, engine_waiting=0)],
            20,
            id="interactive-queue-scales",
        ),
        # ratio = 42 / (4 x 10) = 1.05: within the tolerance
        pytest.param(
            10,
            [view(15, queue_length=42, scaling_queue_length=42)],
            10,
            id="within-tolerance",
        ),
        # ceil(1,000 / 4) = 250, limited to +100 % per sync
        pytest.param(
            10,
            [view(15, queue_length=1000, scaling_queue_length=1000)],
            20,
            id="up-limit-doubles",
        ),
    ],
)
def test_keda_queue(initial: int, views: list[scalers.PoolView], replicas: int) -> None:
    assert held(scalers.keda_queue, initial, views) == replicas


def test_a_pool_that_reports_only_the_total_queue_is_counted_whole() -> None:
    total_only = view(15, queue_length=400, scaling_queue_length=None)
    assert held(scalers.keda_queue, 10, [total_only]) == 20
