"""The capacity planner: the seed's worked example, each constraint binding in turn, and the
properties a platform team relies on (more traffic, more tolerance or a tighter SLO never
yields fewer replicas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.capacity import planning
from tokenfleet.capacity.__main__ import main as plan_cli

SEED = planning.Workload.model_validate(
    {
        "peakRps": 10000,
        "inputTokens": {"mean": 1000},
        "outputTokens": {"mean": 200},
        "outputTokensPerSecond": 50,
        "zones": 3,
        "tolerateLoss": 1,
    }
)


def point(rps: float, ttft: float = 0.3, itl: float = 0.02, **over: float) -> dict[str, float]:
    return {
        "offeredRps": rps,
        "throughputRps": rps,
        "ttftP99Seconds": ttft,
        "interTokenP99Seconds": itl,
        "prefillTokensPerSecond": rps * 1000,
        "decodeTokensPerSecond": rps * 200,
        **over,
    }


def profile(*points: dict[str, float], **fields: Any) -> planning.Profile:
    return planning.Profile.model_validate({"model": "m", "points": list(points), **fields})


def test_the_seed_example() -> None:
    demand = planning.demand_of(SEED, ttft=0.0)
    assert demand.prefill_tokens_per_second == 10_000_000
    assert demand.decode_tokens_per_second == 2_000_000
    assert demand.seconds_in_system == 4.0
    assert demand.concurrent_sequences == 40_000


def test_the_seed_example_sized_from_a_profile() -> None:
    result = planning.plan(SEED, profile(point(10), point(20), point(30, ttft=2.5), maxNumSeqs=256))
    assert result is not None
    assert result.usable_point.throughput_rps == 20  # 30 rps breaks the 1 s TTFT SLO
    by_name = {c.name: c.replicas for c in result.constraints}
    assert by_name["requests/s"] == 715  # ceil(10000 / (20 x 0.7))
    assert by_name["concurrent sequences"] == 224  # ceil(40000 / (256 x 0.7))
    assert result.needed == 715
    assert result.total == 1073  # losing the largest of 3 zones still leaves 715
    assert sum(result.per_zone.values()) == 1073 and max(result.per_zone.values()) == 358


@pytest.mark.parametrize(
    ("fields", "binds"),
    [
        pytest.param({"maxNumSeqs": 8}, "concurrent sequences", id="sequences"),
        pytest.param(
            {"kvCacheBytes": 1e9, "kvBytesPerToken": 131072}, "KV-cache bytes", id="kv-cache"
        ),
    ],
)
def test_the_binding_constraint_is_named(fields: dict[str, float], binds: str) -> None:
    result = planning.plan(SEED, profile(point(20), **fields))
    assert result is not None and result.binding.name == binds
    assert any("<- binds" in line and binds in line for line in planning.table(result, SEED))


def test_decode_binds_when_generation_is_the_bottleneck() -> None:
    result = planning.plan(SEED, profile(point(20, decodeTokensPerSecond=1000)))
    assert result is not None and result.binding.name == "decode tokens/s"


def test_no_point_meets_the_slo() -> None:
    assert planning.plan(SEED, profile(point(20, ttft=3.0))) is None


rates = st.floats(min_value=1, max_value=50_000)


@settings(deadline=None)  # placement walks the headroom replica by replica: slow on a busy CI
@given(low=rates, extra=st.floats(min_value=0, max_value=50_000), tolerate=st.integers(0, 2))
def test_more_traffic_never_needs_fewer_replicas(low: float, extra: float, tolerate: int) -> None:
    p = profile(point(5), point(20))
    a = planning.plan(SEED.model_copy(update={"peak_rps": low, "tolerate_loss": tolerate}), p)
    b = planning.plan(
        SEED.model_copy(update={"peak_rps": low + extra, "tolerate_loss": tolerate}), p
    )
    assert a is not None and b is not None and b.total >= a.total


@settings(deadline=None)
@given(rps=rates, zones=st.integers(1, 5), tolerate=st.integers(0, 3))
def test_tolerating_loss_only_adds(rps: float, zones: int, tolerate: int) -> None:
    p = profile(point(20))
    base = planning.plan(
        SEED.model_copy(update={"peak_rps": rps, "zones": zones, "tolerate_loss": 0}), p
    )
    more = planning.plan(
        SEED.model_copy(update={"peak_rps": rps, "zones": zones, "tolerate_loss": tolerate}), p
    )
    assert base is not None and more is not None
    assert more.total >= base.total and more.needed == base.needed


@settings(deadline=None)
@given(ttft=st.floats(min_value=0.2, max_value=5), tighter=st.floats(min_value=0, max_value=1))
def test_a_tighter_slo_never_needs_fewer_replicas(ttft: float, tighter: float) -> None:
    p = profile(point(5, ttft=0.1), point(15, ttft=0.8), point(25, ttft=2.0), point(40, ttft=4.0))
    loose = SEED.model_copy(update={"slo": planning.Slo(ttft_p99_seconds=ttft)})
    tight = SEED.model_copy(update={"slo": planning.Slo(ttft_p99_seconds=max(0.1, ttft * tighter))})
    a, b = planning.plan(loose, p), planning.plan(tight, p)
    assert a is not None and b is not None and b.total >= a.total


def test_cli_prints_the_table_and_a_valid_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(SEED.to_wire()))
    (tmp_path / "p.json").write_text(
        json.dumps(profile(point(20), accelerator="NVIDIA-H100-80GB-HBM3").to_wire())
    )
    assert (
        plan_cli(["--workload", str(tmp_path / "w.yaml"), "--profile", str(tmp_path / "p.json")])
        == 0
    )
    out = capsys.readouterr().out
    assert "10,000,000 prefill tokens/s" in out and "40,000 concurrent sequences" in out
    pool = yaml.safe_load(out[out.index("apiVersion:") :])
    spec = InferencePoolSpec.model_validate(pool["spec"])
    assert spec.replicas.min == 715 and spec.zones.tolerate_loss == 1
    assert spec.accelerator.product == "NVIDIA-H100-80GB-HBM3"
