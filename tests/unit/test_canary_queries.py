"""Canary PromQL (pure strings): every query selects one revision of one model in one namespace;
latency quantiles fall back to deprecated metric names; the error rate reads the gateway. The
integration test test_canary_analysis.py runs them against real Prometheus."""

from __future__ import annotations

import pytest

from tokenfleet.signals import gateway, queries, vllm

ARGS = ("team-a", "llama", "3f2a9c0d1e", "60s")
SELECTOR = 'namespace="team-a",model="llama",revision="3f2a9c0d1e"'


@pytest.mark.parametrize(
    ("build", "names"),
    [
        pytest.param(queries.revision_ttft_p99, vllm.TIME_TO_FIRST_TOKEN, id="ttft"),
        pytest.param(queries.revision_inter_token_p99, vllm.INTER_TOKEN_LATENCY, id="itl"),
    ],
)
def test_p99_per_revision_with_fallback_names(build: object, names: tuple[str, ...]) -> None:
    query = build(*ARGS)  # type: ignore[operator]
    parts = query.split(" or ")
    assert len(parts) == len(names)
    for part, name in zip(parts, names, strict=True):
        assert part == (
            f"histogram_quantile(0.99, sum by (le) (rate({name}_bucket{{{SELECTOR}}}[60s])))"
        )


def test_request_count_per_revision() -> None:
    assert queries.revision_requests(*ARGS) == (
        f"sum(increase(vllm:e2e_request_latency_seconds_count{{{SELECTOR}}}[60s]))"
    )


def test_error_rate_reads_failed_gateway_requests_of_the_revision() -> None:
    query = queries.revision_error_rate(*ARGS)
    failed, total = query.split(" / ")
    # failures after the first byte and requests whose every attempt on the revision failed
    assert f'{gateway.REQUESTS}{{{SELECTOR},outcome=~"failed|rejected"}}[60s]' in failed
    # no failure at all is a rate of 0, not a missing series that would keep a canary unproven
    assert failed.endswith(" or vector(0))")
    assert f"{gateway.REQUESTS}{{{SELECTOR}}}[60s]" in total
