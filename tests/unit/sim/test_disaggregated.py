"""The combined pool against prefill + decode pools, request by request, and
``tokenfleet plan --disaggregation``.

Matrix: design (combined / split) x link (fast / slow / lossy) → TTFT and TPOT p95, SLO
attainment, lost transfers, NIC waiting; the example workload → the printed verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tokenfleet.capacity import __main__ as plan_cli
from tokenfleet.sim import disaggregated

EXAMPLE = (
    Path(__file__).resolve().parents[3] / "examples" / "06-capacity-plan" / "disaggregation.yaml"
)


def workload(**over: Any) -> disaggregated.Workload:
    raw: dict[str, Any] = {
        "rps": 200,
        "inputTokens": {"mean": 1000, "p99": 4000, "max": 8000},
        "outputTokens": {"mean": 200, "p99": 800, "max": 4000},
        "link": {"bandwidthGbps": 100, "latencyMs": 0.5},
        "performance": {"maxNumSeqs": 384, "kvCacheTokens": 460000},
        "simulate": {"durationSeconds": 20, "seed": 3},
    }
    raw.update(over)
    return disaggregated.Workload.model_validate(raw)


def test_both_planned_designs_meet_the_slo_when_simulated() -> None:
    w = workload()
    v = w.decide()
    assert v.prefill is not None and v.decode is not None
    one = disaggregated.run_combined(w, v.combined.replicas)
    split = disaggregated.run_disaggregated(w, v.prefill.replicas, v.decode.replicas)
    for m in (one, split):
        assert m.requests > 3000
        assert m.within_slo > 0.99
        assert m.ttft_p95 < 1.0 and m.tpot_p95 < 0.05
    assert split.lost_transfers == 0


def test_a_lossy_link_recomputes_the_lost_prefills() -> None:
    w = workload(link={"bandwidthGbps": 100, "loss": 0.05})
    m = disaggregated.run_disaggregated(w, 4, 4)
    assert m.lost_transfers == pytest.approx(0.05 * m.requests, rel=0.2)
    assert m.within_slo > 0.95


@pytest.mark.parametrize(
    ("gbps", "waits"),
    [pytest.param(400, False, id="fast-link-no-queue"), pytest.param(8, True, id="8-gbit-queues")],
)
def test_a_slow_link_queues_transfers(gbps: float, waits: bool) -> None:
    m = disaggregated.run_disaggregated(workload(link={"bandwidthGbps": gbps}), 4, 4)
    assert (m.transfer_wait_p95 > 0.01) is waits
    if waits:
        assert m.ttft_p95 > 0.1


def test_plan_disaggregation_prints_the_verdict_and_binding(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["--disaggregation", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "verdict: combined wins" in out
    assert "binding: KV capacity" in out
    assert "prefill" in out and "decode" in out and "128 KiB per token" in out


def test_plan_without_files_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        plan_cli.main([])
