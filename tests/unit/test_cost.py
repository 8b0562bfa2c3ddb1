"""The cost allocation rule (tokenfleet.accounting.cost): a hand-computed case with warm idle
capacity and a cancelled line, over-occupation scaled to what was paid, the unbenched fallback
by token work, cached prompt tokens free, and the list price a currency budget uses."""

from __future__ import annotations

import pytest

from tokenfleet.accounting import cost
from tokenfleet.api.pool import Cost, InferencePoolSpec

# 2 replicas × 1 GPU ready for 1 hour at 2.00/GPU-hour: 2 GPU-hours paid, 4.00.
# Benched replica: 10,000 prompt tokens/s, 1,000 output tokens/s.
PRICE = cost.PoolPrice(
    per_gpu_hour=2.0,
    gpus_per_replica=1,
    prompt_tokens_per_second=10_000,
    output_tokens_per_second=1_000,
)


def _usage(**overrides: object) -> cost.Usage:
    fields: dict[str, object] = {"tenant": "a", "model": "m", "outcome": "served"}
    return cost.Usage(**{**fields, **overrides})  # type: ignore[arg-type]


def test_hand_computed_case_with_idle_capacity_and_a_cancelled_line() -> None:
    # a served: 36M prompt = 3600 s, 1.8M output = 1800 s → 1.5 GPU-h → 3.00
    #   prompt part 1.0 GPU-h = 2.00 over 36M tokens → 0.0556/M; output 1.00 over 1.8M → 0.5556/M
    #   per request: 3.00 / 1000 = 0.003
    # b cancelled: 3.6M prompt = 360 s, 0.36M output = 360 s → 0.2 GPU-h → 0.40
    # idle: 2 − 1.5 − 0.2 = 0.3 GPU-h → 0.60.  Sum 4.00 = what was paid.
    lines = cost.allocate(
        usage=[
            _usage(requests=1000, prompt_tokens=36_000_000, completion_tokens=1_800_000),
            _usage(
                tenant="b",
                outcome="cancelled",
                requests=50,
                prompt_tokens=3_600_000,
                completion_tokens=360_000,
            ),
        ],
        price=PRICE,
        gpu_hours=2.0,
    )
    a, b, idle = lines
    assert a.gpu_hours == pytest.approx(1.5) and a.cost == pytest.approx(3.0)
    assert a.per_million_input == pytest.approx(2.0 / 36) and a.per_request == pytest.approx(0.003)
    assert a.per_million_output == pytest.approx(1.0 / 1.8)
    assert b.cost == pytest.approx(0.4) and b.per_request is None  # not a successful request
    assert (idle.tenant, idle.outcome) == (cost.IDLE, "idle")
    assert idle.gpu_hours == pytest.approx(0.3) and idle.cost == pytest.approx(0.6)
    assert sum(line.cost for line in lines) == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("usage", "gpu_hours", "expected_costs"),
    [
        pytest.param([], 1.0, [2.0], id="nothing-served-all-idle"),
        pytest.param(
            [_usage(requests=1, prompt_tokens=72_000_000)],
            1.0,
            [2.0],
            id="over-occupied-scaled-to-what-was-paid-no-idle",
        ),
        pytest.param(
            [_usage(requests=1, prompt_tokens=36_000_000, cached_prompt_tokens=36_000_000)],
            1.0,
            [0.0, 2.0],
            id="cached-prompt-tokens-skip-prefill",
        ),
        pytest.param([_usage(requests=1)], 0.0, [0.0], id="no-gpu-hours-no-cost"),
    ],
)
def test_allocation_table(
    usage: list[cost.Usage], gpu_hours: float, expected_costs: list[float]
) -> None:
    lines = cost.allocate(usage=usage, price=PRICE, gpu_hours=gpu_hours)
    assert [line.cost for line in lines] == pytest.approx(expected_costs)


def test_unbenched_pool_splits_by_token_work_without_an_idle_line() -> None:
    price = cost.PoolPrice(per_gpu_hour=3.0)
    # work: a = 100 + 2×50 = 200, b = 200 + 2×0 = 200 → 1.5 GPU-h each of 3 → 4.50 each
    lines = cost.allocate(
        usage=[
            _usage(prompt_tokens=100, completion_tokens=50),
            _usage(tenant="b", prompt_tokens=200),
        ],
        price=price,
        gpu_hours=3.0,
    )
    assert [line.cost for line in lines] == pytest.approx([4.5, 4.5])


def test_list_price_is_the_benched_rate_at_full_utilisation() -> None:
    rate = cost.list_price(PRICE)
    assert rate is not None
    # 2.00/h = 1/1800 per second; 1M prompt tokens take 100 s → 0.0556; 1M output 1000 s → 0.556
    assert rate.input_per_million == pytest.approx(100 / 1800)
    assert rate.output_per_million == pytest.approx(1000 / 1800)
    assert cost.charge(prompt_tokens=1_000_000, completion_tokens=0, rate=rate) == pytest.approx(
        100 / 1800
    )
    assert cost.list_price(cost.PoolPrice(per_gpu_hour=1.0)) is None


def _pool(cost_spec: dict[str, object] | None, **autoscaling: int) -> InferencePoolSpec:
    spec: dict[str, object] = {"accelerator": {"count": 2}, "autoscaling": autoscaling}
    if cost_spec is not None:
        spec["cost"] = cost_spec
    return InferencePoolSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("pool", "rate"),
    [
        pytest.param(
            _pool({"perGpuHour": 2.0, "perMillionInputTokens": 0.5, "perMillionOutputTokens": 1.5}),
            cost.Rate(input_per_million=0.5, output_per_million=1.5),
            id="explicit-prices-win",
        ),
        # 2 GPUs × 3.60/h = 0.002 per second; 1,000 prompt tok/s → 2.00/M; 100 out/s → 20.00/M
        pytest.param(
            _pool(
                {"perGpuHour": 3.6, "currency": "EUR"},
                targetPromptTokensPerSecondPerReplica=1000,
                targetGenerationTokensPerSecondPerReplica=100,
            ),
            cost.Rate(input_per_million=2.0, output_per_million=20.0, currency="EUR"),
            id="derived-from-gpu-hour-and-benched-rates",
        ),
        pytest.param(_pool({"perGpuHour": 3.6}), None, id="gpu-price-without-benched-rates"),
        pytest.param(_pool(None), None, id="unpriced"),
    ],
)
def test_rate_of_a_pool(pool: InferencePoolSpec, rate: cost.Rate | None) -> None:
    got = cost.rate_of(pool)
    if rate is None:
        assert got is None
    else:
        assert got is not None and got.currency == rate.currency
        assert (got.input_per_million, got.output_per_million) == (
            pytest.approx(rate.input_per_million),
            pytest.approx(rate.output_per_million),
        )


def test_token_prices_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="set both perMillionInputTokens"):
        Cost.model_validate({"perGpuHour": 1.0, "perMillionInputTokens": 0.5})
