"""Disaggregation as a planning decision: the KV size from the model's shape, the link, each
pool's ceilings and binding resource, and the verdict.

Matrix: model shape → KV bytes; link → transfer time; workload (prompt/output ratio, KV room,
bandwidth, loss) → replicas per pool, binding resource, winner.
"""

from __future__ import annotations

import dataclasses

import pytest

from tokenfleet.capacity import disaggregation as dg

#: The examples' replica: an 8B model on one 80 GB GPU (examples/05-simulations).
REPLICA = dg.Replica(
    base=0.006,
    per_sequence=0.00002,
    per_token=0.000005,
    chunk=8192,
    max_seqs=384,
    kv_tokens=460_000,
)
SEED = dg.Traffic(
    rps=10_000,
    input_tokens=1000,
    output_tokens=200,
    input_tail=4000,
    ttft=1.0,
    tpot=0.05,
    utilization=0.7,
)
KV_8B = 131_072


@pytest.mark.parametrize(
    ("shape", "bytes_"),
    [
        pytest.param(dg.ModelShape(), 131_072, id="llama-3-8b-bf16"),
        pytest.param(dg.ModelShape(layers=80, kv_heads=8, head_dim=128), 327_680, id="llama-3-70b"),
        pytest.param(dg.ModelShape(dtype_bytes=1), 65_536, id="8b-fp8-kv"),
    ],
)
def test_kv_bytes_per_token_from_the_shape(shape: dg.ModelShape, bytes_: int) -> None:
    assert shape.kv_bytes_per_token() == bytes_


def test_a_transfer_is_latency_plus_bytes_over_bandwidth() -> None:
    link = dg.Link(bandwidth_gbps=100, latency_ms=0.5)
    # 1,000 tokens x 128 KiB = 131 MB at 12.5 GB/s
    assert link.seconds(1000, KV_8B) == pytest.approx(0.0005 + 131.072e6 / 12.5e9)


def test_the_seed_workload_on_a_fast_link_combined_wins_bound_by_kv() -> None:
    """At 1,000 in / 200 out the replica is KV-bound either way; the combined pool spends the
    decode steps' spare time on prefill, which a split cannot."""
    v = dg.decide(REPLICA, SEED, dg.Link(bandwidth_gbps=400), kv_bytes=KV_8B)
    assert v.winner == "combined"
    assert v.combined.binding is dg.Resource.KV_CAPACITY
    assert v.decode is not None and v.decode.binding is dg.Resource.KV_CAPACITY
    assert v.prefill is not None and v.prefill.binding is dg.Resource.PREFILL_COMPUTE


@pytest.mark.parametrize(
    ("gbps", "binding"),
    [
        pytest.param(25, dg.Resource.NETWORK, id="25-gbit-network-binds"),
        pytest.param(1600, dg.Resource.PREFILL_COMPUTE, id="1600-gbit-compute-binds"),
    ],
)
def test_the_prefill_pool_is_bound_by_the_network_on_a_slow_link(
    gbps: float, binding: dg.Resource
) -> None:
    p = dg.prefill(REPLICA, SEED, dg.Link(bandwidth_gbps=gbps), kv_bytes=KV_8B)
    assert p.binding is binding


@pytest.mark.parametrize(
    ("chunk", "winner"),
    [
        pytest.param(8192, "combined", id="prefill-chunk-8192-combined"),
        pytest.param(65536, "disaggregated", id="prefill-chunk-65536-split"),
    ],
)
def test_with_kv_to_spare_the_split_wins_only_by_the_prefill_steps_overhead(
    chunk: int, winner: str
) -> None:
    """On the additive step model the two designs do the same work; the split saves the step
    overhead that prefill tokens carry in a combined step (base / TPOT of them) and pays
    ``base / chunk`` per prompt token in its own steps: it wins when its chunk exceeds
    (TPOT − base) / per_token (8,800 tokens here), and then by a few percent."""
    roomy = dataclasses.replace(REPLICA, kv_tokens=40_000_000, max_seqs=100_000, chunk=chunk)
    v = dg.decide(roomy, SEED, dg.Link(bandwidth_gbps=3200), kv_bytes=KV_8B)
    assert v.combined.binding is dg.Resource.PREFILL_COMPUTE
    assert v.decode is not None and v.decode.binding is dg.Resource.DECODE_BANDWIDTH
    assert v.winner == winner
    assert v.saving < 0.1


def test_a_transfer_that_cannot_fit_the_ttft_objective_rules_the_split_out() -> None:
    long_prompt = dataclasses.replace(SEED, input_tail=32_000)
    v = dg.decide(REPLICA, long_prompt, dg.Link(bandwidth_gbps=10), kv_bytes=KV_8B)
    assert v.prefill is None and v.winner == "combined"
    assert v.transfer_seconds > 3.0


def test_lost_transfers_are_recomputed_so_the_prefill_pool_grows() -> None:
    clean = dg.prefill(REPLICA, SEED, dg.Link(bandwidth_gbps=400), kv_bytes=KV_8B)
    lossy = dg.prefill(REPLICA, SEED, dg.Link(bandwidth_gbps=400, loss=0.2), kv_bytes=KV_8B)
    assert lossy.per_replica_rps == pytest.approx(clean.per_replica_rps * 0.8)
    assert lossy.replicas > clean.replicas


def test_a_replica_whose_step_alone_exceeds_the_tpot_objective_meets_it_in_neither_design() -> None:
    """The repo's measured profile fits a 64 ms step base: no batch meets a 50 ms TPOT."""
    slow = dataclasses.replace(REPLICA, base=0.064, per_sequence=0.0056, per_token=0.0)
    v = dg.decide(slow, SEED, dg.Link(bandwidth_gbps=400), kv_bytes=KV_8B)
    assert not v.combined.feasible
    assert v.winner == "neither"
    assert v.prefill is None
