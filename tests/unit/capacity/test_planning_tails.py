"""The planner plans for the tails and the peak, and prints cost.

The matrix: the seed's worked example at its sustained and peak rates; the p99 request
changing which constraint binds (sequences and KV cache hold whole requests, throughputs take
the mean); the peak kept warm with its zone-loss headroom; a hand-computed bill that includes
the warm idle floor; and the CLI printing all of it, refusing bad input with a clear message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.capacity import costing, planning
from tokenfleet.capacity.__main__ import main as plan_cli

#: The seed's workload (000_*.txt §1-2): 10K sustained with a 15K short peak, 1,000 in / 200 out
#: on average, 50 tokens/s, p99 TTFT 1 s, one zone of three may be lost, 70 % utilisation.
SEED: dict[str, Any] = {
    "sustainedRps": 10000,
    "peakRps": 15000,
    "inputTokens": {"mean": 1000},
    "outputTokens": {"mean": 200},
    "outputTokensPerSecond": 50,
    "slo": {"ttftP99Seconds": 1.0},
    "zones": 3,
    "tolerateLoss": 1,
    "targetUtilization": 0.7,
}


def workload(**over: Any) -> planning.Workload:
    return planning.Workload.model_validate(SEED | over)


def profile(rps: float = 20, *, error_rate: float = 0.0, **fields: Any) -> planning.Profile:
    """One usable load level of ``rps`` at the seed's mean request shape."""
    point = {
        "offeredRps": rps,
        "throughputRps": rps,
        "ttftP99Seconds": 0.4,
        "interTokenP99Seconds": 0.02,
        "prefillTokensPerSecond": rps * 1000,
        "decodeTokensPerSecond": rps * 200,
        "errorRate": error_rate,
    }
    return planning.Profile.model_validate(
        {"model": "m", "points": [point], "maxNumSeqs": 256} | fields
    )


def test_the_seed_example_at_both_rates() -> None:
    sustained = planning.demand_of(workload(), ttft=0.0, rps=10000)
    peak = planning.demand_of(workload(), ttft=0.0)
    assert (sustained.prefill_tokens_per_second, sustained.decode_tokens_per_second) == (
        10_000_000,
        2_000_000,
    )
    assert sustained.seconds_in_system == 4.0 and sustained.concurrent_sequences == 40_000
    assert (peak.prefill_tokens_per_second, peak.decode_tokens_per_second) == (
        15_000_000,
        3_000_000,
    )
    assert peak.concurrent_sequences == 60_000


def test_sustained_and_peak_each_get_their_fleet_and_the_peak_is_kept_warm() -> None:
    result = planning.plan(workload(), profile(20))
    assert result is not None
    # sustained: ceil(10,000 / (20 x 0.7)) = 715; losing one of 3 zones must leave 715
    assert (result.sustained.needed, result.sustained.total) == (715, 1073)
    # peak: ceil(15,000 / 14) = 1,072, and 536 in each zone so that two zones carry it
    assert (result.peak.needed, result.peak.total) == (1072, 1608)
    assert result.peak.per_zone == {"zone-a": 536, "zone-b": 536, "zone-c": 536}
    # a short peak is over before a cold start: the pool holds the peak's fleet, warm
    assert result.total == 1608 and result.warm_beyond_sustained == 535
    pool = yaml.safe_load(planning.pool_snippet(result, workload(), profile(20)))
    spec = InferencePoolSpec.model_validate(pool["spec"])
    assert spec.replicas.min == 1072 and spec.zones.tolerate_loss == 1


def test_no_distinct_peak_needs_no_warm_floor() -> None:
    result = planning.plan(workload(sustainedRps=None, peakRps=10000), profile(20))
    assert result is not None and result.peak is result.sustained
    assert result.warm_beyond_sustained == 0 and result.total == 1073


@pytest.mark.parametrize(
    ("tokens", "fields", "binds", "replicas", "basis"),
    [
        pytest.param(
            {},
            {},
            "requests/s",
            1072,
            "peak 15,000 req/s",
            id="means-requests-bind",
        ),
        # p99 answers of 800 tokens stay 16 s: 15,000 x 16 = 240,000 sequences, 256 per
        # replica at 70 % -> 1,340 replicas, more than the request rate needs
        pytest.param(
            {"outputTokens": {"mean": 200, "p99": 800}},
            {},
            "concurrent sequences",
            1340,
            "peak 15,000 req/s, output p99 800",
            id="p99-output-sequences-bind",
        ),
        # KV cache of 40 GB at 128 KiB a token: at the mean context (1,200 tokens) 60,000
        # sequences need ceil(60,000 x 1,200 x 131,072 / (40e9 x 0.7)) = 338 replicas (requests
        # bind); at the p99 context (4,000 + 800) for 240,000 sequences, 5,393
        pytest.param(
            {},
            {"kvCacheBytes": 40e9, "kvBytesPerToken": 131072},
            "requests/s",
            1072,
            "peak 15,000 req/s",
            id="mean-context-kv-fits",
        ),
        pytest.param(
            {"inputTokens": {"mean": 1000, "p99": 4000}, "outputTokens": {"mean": 200, "p99": 800}},
            {"kvCacheBytes": 40e9, "kvBytesPerToken": 131072},
            "KV-cache bytes",
            5393,
            "concurrent sequences x input p99 4,000 + output p99 800",
            id="p99-context-kv-binds",
        ),
    ],
)
def test_the_tail_changes_what_binds(
    tokens: dict[str, Any], fields: dict[str, Any], binds: str, replicas: int, basis: str
) -> None:
    result = planning.plan(workload(**tokens), profile(20, **fields))
    assert result is not None
    assert result.peak.binding.name == binds and result.peak.needed == replicas
    assert result.peak.binding.basis == basis


def test_each_row_says_which_rate_and_percentile_it_uses() -> None:
    result = planning.plan(workload(outputTokens={"mean": 200, "p99": 800}), profile(20))
    assert result is not None
    basis = {c.name: c.basis for c in result.sustained.constraints}
    assert basis == {
        "requests/s": "sustained 10,000 req/s",
        "prefill tokens/s": "sustained 10,000 req/s x mean input",
        "decode tokens/s": "sustained 10,000 req/s x mean output",
        "concurrent sequences": "sustained 10,000 req/s, output p99 800",
    }
    no_tail = planning.plan(workload(), profile(20))
    assert no_tail is not None
    assert "mean 200 (no p99 given)" in no_tail.peak.constraints[3].basis


def test_the_bill_by_hand_includes_the_warm_idle_floor() -> None:
    # 1,608 replicas held (the peak's, warm) x 2 GPUs x $2.50 = $8,040 an hour, carrying the
    # sustained 10,000 req/s: 36,000 M input and 7,200 M output tokens an hour, 98 % succeed
    cost = {"gpuHourPrice": 2.5, "gpusPerReplica": 2}
    result = planning.plan(workload(cost=cost), profile(20, error_rate=0.02))
    assert result is not None and result.cost is not None
    bill = result.cost
    assert (bill.replicas, bill.idle_replicas, bill.gpus) == (1608, 535, 3216)
    assert bill.per_hour == pytest.approx(8040.0)
    assert bill.per_million_input_tokens == pytest.approx(8040 / 36_000)
    assert bill.per_million_output_tokens == pytest.approx(8040 / 7_200)
    assert bill.per_million_tokens == pytest.approx(8040 / 43_200)
    assert bill.per_successful_request == pytest.approx(8040 / (10_000 * 0.98 * 3600))
    # without the peak, the same traffic holds 1,073 replicas: the idle floor is in the bill
    flat = planning.plan(workload(cost=cost, peakRps=10000), profile(20, error_rate=0.02))
    assert flat is not None and flat.cost is not None
    assert flat.cost.per_hour == pytest.approx(1073 * 2 * 2.5) and flat.cost.idle_replicas == 0


def test_no_traffic_costs_infinity_per_unit_not_a_crash() -> None:
    bill = costing.sheet(
        cost=costing.Cost(gpu_hour_price=2.0),
        replicas=6,
        beyond_sustained=0,
        rps=0.0,
        input_tokens=1000,
        output_tokens=200,
        success=1.0,
    )
    assert bill.per_hour == 12.0 and bill.per_successful_request == float("inf")


def files(tmp_path: Path, **over: Any) -> list[str]:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(SEED | over))
    (tmp_path / "p.json").write_text(json.dumps(profile(20).to_wire()))
    return ["--workload", str(tmp_path / "w.yaml"), "--profile", str(tmp_path / "p.json")]


def test_cli_prints_sustained_peak_and_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plan_cli([*files(tmp_path), "--gpu-hour-price", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "sustained 10,000 req/s:" in out and "peak 15,000 req/s:" in out
    assert "with tolerateLoss=1 over 3 zones: 1073" in out
    assert "with tolerateLoss=1 over 3 zones: 1608" in out
    assert "fleet held: 1608 replicas (replicas.min 1072): 535 above the sustained plan" in out
    assert "$4,020.00 per hour" in out and "per successful request" in out
    pool = yaml.safe_load(out[out.index("apiVersion:") :])
    assert pool["spec"]["replicas"]["min"] == 1072


@pytest.mark.parametrize(
    ("over", "message"),
    [
        pytest.param({"sustainedRps": 20000}, "is above peakRps", id="sustained-above-peak"),
        pytest.param({"peakRps": -1}, "peakRps", id="negative-rate"),
        pytest.param({"cost": {"gpuHourPrice": -2}}, "gpuHourPrice", id="negative-price"),
    ],
)
def test_cli_refuses_bad_input_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: dict[str, Any], message: str
) -> None:
    assert plan_cli(files(tmp_path, **over)) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenfleet plan: ") and message in err


def test_a_fleet_beyond_one_pool_says_so_instead_of_a_snippet() -> None:
    result = planning.plan(workload(), profile(1))  # 1 req/s a replica: 32,145 replicas
    assert result is not None and result.total > planning.MAX_REPLICAS
    snippet = planning.pool_snippet(result, workload(), profile(1))
    assert snippet.startswith("# no InferencePool:") and "split the fleet" in snippet
