"""The request path's metrics remember their children: the same series as prometheus_client's
own labels(), counted where a scrape reads them, by position or by name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from tokenfleet.gateway.metrics import Metrics, memoized


def test_a_memoized_counter_counts_into_the_same_series_as_an_unmemoized_one() -> None:
    registry = CollectorRegistry()
    counter = Counter("t_requests", "test", ["tenant", "outcome"], registry=registry)
    plain = counter.labels("a", "served")
    memoized(counter)
    assert counter.labels("a", "served") is plain
    assert counter.labels("a", "served") is counter.labels("a", "served")
    counter.labels("a", "served").inc()
    counter.labels(tenant="a", outcome="served").inc()  # by name: still the same series
    counter.labels("b", "failed").inc(3)
    assert registry.get_sample_value("t_requests_total", {"tenant": "a", "outcome": "served"}) == 2
    assert registry.get_sample_value("t_requests_total", {"tenant": "b", "outcome": "failed"}) == 3


def test_the_gateway_metrics_scrape_the_same_with_memoized_children() -> None:
    metrics = Metrics.create()
    metrics.requests.labels("t", "m", "interactive", "served", "", "ns", "r1").inc()
    metrics.ttft.labels("m", "interactive").observe(0.2)
    metrics.in_flight.labels("ns/p", "interactive").inc()
    metrics.in_flight.labels("ns/p", "interactive").dec()
    text = generate_latest(metrics.registry).decode()
    assert (
        'tokenfleet_gateway_requests_total{class="interactive",model="m",namespace="ns",'
        'outcome="served",reason="",revision="r1",tenant="t"} 1.0'
    ) in text
    assert (
        'tokenfleet_gateway_time_to_first_token_seconds_count{class="interactive",model="m"} 1.0'
        in text
    )
