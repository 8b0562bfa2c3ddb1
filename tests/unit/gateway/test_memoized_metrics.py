"""The request path's metrics remember their children: the same series as prometheus_client's
own labels(), counted where a scrape reads them, by position or by name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from tokenfleet.gateway.metrics import Metrics, memoized, observe_all


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


def test_observe_all_gives_the_histogram_observe_would_give_one_by_one() -> None:
    gaps = [0.0, 0.0004, 0.001, 0.0011, 0.005, 0.0049, 0.2, 3.0, 100.0, 0.02]
    one, bulk = Metrics.create(), Metrics.create()
    for gap in gaps:
        one.inter_token.labels("m", "c").observe(gap)
    observe_all(bulk.inter_token.labels("m", "c"), gaps)

    def samples(metrics: Metrics) -> list[str]:
        text = generate_latest(metrics.registry).decode()
        return [line for line in text.splitlines() if "_created" not in line]

    assert samples(bulk) == samples(one)
