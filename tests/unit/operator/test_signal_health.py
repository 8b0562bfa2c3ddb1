"""Which configured scaling signals have no data and why (policy/signal_health.py): by signal
(queue age from the gateway job, KV usage and waiting from the engines, token rates only when
targeted), by the scrape job's targets (none, all down, up) and by whether the engines' series
carry the pool labels (the condition they make: test_plan.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tokenfleet.operator.policy import scaling, signal_health
from tokenfleet.operator.policy.scaling import Why
from tokenfleet.signals import jobs

UP = signal_health.JobHealth(up=1)
DOWN = signal_health.JobHealth(down=1, error="dial tcp 192.0.2.7:8080: connect: connection refused")
ALL_UP = {jobs.GATEWAY: UP, jobs.WORKERS: UP}
FULL = scaling.Signals(oldest_queue_age=0.0, kv_cache_usage=0.2, waiting=0.0)


def missing(
    signals: scaling.Signals = FULL,
    *,
    targets: dict[str, signal_health.JobHealth] | None = None,
    ready: int = 3,
    unlabelled: int = 0,
    policy: scaling.Policy | None = None,
) -> dict[Why, str]:
    found = signal_health.missing(
        policy=policy or scaling.Policy(),
        signals=signals,
        namespace="default",
        pool="chat",
        ready=ready,
        targets=ALL_UP if targets is None else targets,
        unlabelled_engines=unlabelled,
    )
    return {m.signal: m.why for m in found}


@pytest.mark.parametrize(
    ("signals", "targets", "ready", "unlabelled", "want"),
    [
        pytest.param(FULL, None, 3, 0, {}, id="every-series-present"),
        pytest.param(
            dataclasses.replace(FULL, oldest_queue_age=None),
            None,
            3,
            0,
            {},
            id="gateway-up-no-queue-series-is-no-traffic-yet",
        ),
        pytest.param(
            dataclasses.replace(FULL, oldest_queue_age=None),
            {jobs.WORKERS: UP, jobs.GATEWAY: DOWN},
            3,
            0,
            {Why.QUEUE_AGE: "job tokenfleet-gateway has no up target (0 of 1 up: dial tcp"},
            id="gateway-target-down",
        ),
        pytest.param(
            dataclasses.replace(FULL, oldest_queue_age=None),
            {jobs.WORKERS: UP, jobs.GATEWAY: signal_health.JobHealth(pending=2)},
            3,
            0,
            {Why.QUEUE_AGE: "job tokenfleet-gateway's 2 target(s) not scraped yet"},
            id="gateway-discovered-not-scraped-yet",
        ),
        pytest.param(
            dataclasses.replace(FULL, oldest_queue_age=None),
            {jobs.WORKERS: UP},
            3,
            0,
            {Why.QUEUE_AGE: "job tokenfleet-gateway has no target"},
            id="gateway-not-scraped-at-all",
        ),
        pytest.param(
            scaling.Signals(oldest_queue_age=0.0),
            {jobs.GATEWAY: UP},
            2,
            0,
            {Why.KV_CACHE: "job vllm has no target", Why.WAITING: "job vllm has no target"},
            id="workers-not-scraped",
        ),
        pytest.param(
            scaling.Signals(oldest_queue_age=0.0),
            None,
            2,
            5,
            {
                Why.KV_CACHE: "5 engine series carry no namespace/pool labels",
                Why.WAITING: "5 engine series carry no namespace/pool labels",
            },
            id="workers-scraped-without-pool-labels",
        ),
        pytest.param(
            scaling.Signals(oldest_queue_age=0.0),
            {jobs.GATEWAY: UP},
            0,
            0,
            {},
            id="no-ready-worker",
        ),
    ],
)
def test_missing_signals_name_their_cause(
    signals: scaling.Signals,
    targets: dict[str, signal_health.JobHealth] | None,
    ready: int,
    unlabelled: int,
    want: dict[Why, str],
) -> None:
    got = missing(signals, targets=targets, ready=ready, unlabelled=unlabelled)
    assert set(got) == set(want)
    for why, text in want.items():
        assert text in got[why], (why, got[why])


def test_token_rates_are_judged_only_when_targeted() -> None:
    silent = dataclasses.replace(FULL, prompt_tokens_rate=None, generation_tokens_rate=None)
    assert missing(silent, targets={jobs.GATEWAY: UP}) == {}  # the other engine series exist
    targeted = scaling.Policy(target_prompt_tokens=1000.0)
    assert set(missing(silent, targets={jobs.GATEWAY: UP}, policy=targeted)) == {Why.PROMPT_TOKENS}


def test_stale_or_disabled_is_not_reported_as_missing() -> None:
    nothing = scaling.Signals()
    assert missing(dataclasses.replace(nothing, stale=True), targets={}) == {}
    assert missing(nothing, targets={}, policy=scaling.Policy(enabled=False)) == {}


OBJECTIVES = scaling.Policy(
    ttft=scaling.Objective(percentile=95, seconds=1.0),
    tpot=scaling.Objective(percentile=99, seconds=0.05),
)


@pytest.mark.parametrize(
    ("targets", "ready", "unlabelled", "want"),
    [
        pytest.param(ALL_UP, 3, 0, {}, id="both-jobs-up-a-quiet-minute-is-no-traffic"),
        pytest.param(
            {jobs.WORKERS: UP},
            3,
            0,
            {Why.TTFT: "job tokenfleet-gateway has no target"},
            id="gateway-not-scraped-names-the-ttft-objective",
        ),
        pytest.param(
            {jobs.GATEWAY: UP, jobs.WORKERS: DOWN},
            3,
            0,
            {Why.TPOT: "0 of 1 up", Why.KV_CACHE: "0 of 1 up", Why.WAITING: "0 of 1 up"},
            id="engines-down-names-the-tpot-objective",
        ),
        pytest.param(
            ALL_UP,
            3,
            2,
            {Why.TPOT: "carry no namespace/pool labels"},
            id="unlabelled-engines-name-the-tpot-objective",
        ),
        pytest.param({jobs.GATEWAY: UP}, 0, 0, {}, id="no-ready-worker-no-engine-latency"),
    ],
)
def test_a_latency_objective_without_a_percentile_is_named_only_when_a_job_explains_it(
    targets: dict[str, signal_health.JobHealth],
    ready: int,
    unlabelled: int,
    want: dict[Why, str],
) -> None:
    engines_silent = {jobs.WORKERS} - set(k for k, v in targets.items() if v.up)
    signals = dataclasses.replace(
        FULL, **({"kv_cache_usage": None, "waiting": None} if engines_silent else {})
    )
    got = missing(signals, targets=targets, ready=ready, unlabelled=unlabelled, policy=OBJECTIVES)
    assert set(got) == set(want), got
    for why, text in want.items():
        assert text in got[why], (why, got[why])
    measured = dataclasses.replace(signals, ttft_p95=0.4, tpot_p99=0.02)
    assert not {Why.TTFT, Why.TPOT} & set(
        missing(measured, targets=targets, ready=ready, unlabelled=unlabelled, policy=OBJECTIVES)
    )
