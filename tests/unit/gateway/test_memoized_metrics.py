"""The request path's metrics remember their children: the same series as prometheus_client's
own labels(), counted where a scrape reads them, by position or by name; and a request's
``model`` label is a name the catalog has, or one value for every other name (issue 35)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from tokenfleet.api.adapter import AdapterArtifact
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.gateway.adapter_catalog import Adapter
from tokenfleet.gateway.catalog import Catalog, Model
from tokenfleet.gateway.metrics import UNKNOWN_MODEL, Metrics, memoized, model_label, observe_all
from tokenfleet.gateway.policy import model_routes
from tokenfleet.gateway.policy.adapter_access import Offer
from tokenfleet.gateway.route_catalog import RouteEntry


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
    metrics.ttft.labels("m", "interactive", "ns/p").observe(0.2)
    metrics.in_flight.labels("ns/p", "interactive").inc()
    metrics.in_flight.labels("ns/p", "interactive").dec()
    text = generate_latest(metrics.registry).decode()
    assert (
        'tokenfleet_gateway_requests_total{class="interactive",model="m",namespace="ns",'
        'outcome="served",reason="",revision="r1",tenant="t"} 1.0'
    ) in text
    assert (
        'tokenfleet_gateway_time_to_first_token_seconds_count{class="interactive",model="m",'
        'pool="ns/p"} 1.0' in text
    )


def test_observe_all_gives_the_histogram_observe_would_give_one_by_one() -> None:
    gaps = [0.0, 0.0004, 0.001, 0.0011, 0.005, 0.0049, 0.2, 3.0, 100.0, 0.02]
    one, bulk = Metrics.create(), Metrics.create()
    for gap in gaps:
        one.inter_token.labels("m", "c", "ns/p").observe(gap)
    observe_all(bulk.inter_token.labels("m", "c", "ns/p"), gaps)

    def samples(metrics: Metrics) -> list[str]:
        text = generate_latest(metrics.registry).decode()
        return [line for line in text.splitlines() if "_created" not in line]

    assert samples(bulk) == samples(one)


def _catalog() -> Catalog:
    model = Model(name="llama", pools=("ns/p",), namespace="ns", names=frozenset({"llama", "l"}))
    adapter = Adapter(
        name="sql-lora",
        namespace="ns",
        resource="sql-lora",
        base_model="llama",
        tenants=frozenset({"t"}),
        artifact=AdapterArtifact(uri="file:///x", digest="sha256:" + "a" * 64),
        offer=Offer.OFFERED,
    )
    route = model_routes.compile_route(
        ModelRouteSpec.model_validate({"name": "auto", "defaultTargets": [{"model": "llama"}]})
    )
    return Catalog(
        models={"llama": model, "l": model},
        adapters={("ns", "sql-lora"): adapter},
        routes={("team", "auto"): RouteEntry(route=route, namespace="team", resource="auto")},
    )


@pytest.mark.parametrize(
    ("asked", "label"),
    [
        pytest.param("llama", "llama", id="a-served-name"),
        pytest.param("l", "l", id="an-alias"),
        pytest.param("sql-lora", "sql-lora", id="an-adapter"),
        pytest.param("auto", "auto", id="a-route-of-another-namespace"),
        pytest.param("", "", id="none-asked"),
        pytest.param("llama-typo", UNKNOWN_MODEL, id="unknown"),
        pytest.param("x" * 256, UNKNOWN_MODEL, id="long-unknown"),
    ],
)
def test_a_model_label_is_a_name_the_catalog_has_or_unknown(asked: str, label: str) -> None:
    assert model_label(_catalog(), asked) == label
