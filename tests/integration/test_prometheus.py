"""Prometheus in the local stack scrapes every simulated vLLM of a pool, labelled by pool, and
the scaling signals' PromQL reads them — with prometheus-api-client, as the operator will."""

from __future__ import annotations

from typing import Any

import openai
from prometheus_api_client import PrometheusConnect

from support import artifact
from support.cluster import Cluster, wait_for
from support.objects import manifest
from tokenfleet.api import labels
from tokenfleet.signals import queries


def value(prom: PrometheusConnect, query: str) -> float | None:
    result = prom.custom_query(query)
    return float(result[0]["value"][1]) if result else None


def test_pool_workers_are_scraped_with_their_labels(
    cluster: Cluster, ns: str, operator: Any
) -> None:
    cluster.apply(
        artifact.trust_secret(ns),
        manifest(
            "InferencePool",
            "scraped",
            ns,
            {"zones": {"names": ["zone-a", "zone-b", "zone-c"]}, "replicas": {"min": 3, "max": 6}},
        ),
        manifest(
            "ModelDeployment",
            "scraped-model",
            ns,
            {
                "model": {"name": "scraped-model"},
                "pools": ["scraped"],
                "artifact": artifact.spec(),
            },
        ),
    )
    prom = PrometheusConnect(url=cluster.info["prometheus"], disable_ssl=True)
    wait_for(
        "3 scraped workers",
        lambda: (
            len(prom.custom_query(f'up{{job="vllm",namespace="{ns}",pool="scraped"}} == 1')) == 3
        ),
        timeout=90,
    )
    series = prom.custom_query(f'vllm:num_requests_running{{namespace="{ns}",pool="scraped"}}')
    assert {s["metric"]["zone"] for s in series} == {"zone-a", "zone-b", "zone-c"}
    assert all(s["metric"]["model"] == "scraped-model" and s["metric"]["revision"] for s in series)
    assert value(prom, queries.kv_cache_usage(ns, "scraped")) == 0.0
    assert value(prom, queries.waiting(ns, "scraped")) == 0.0
    assert (
        value(prom, queries.oldest_queue_age(ns, "scraped")) is None
    )  # no gateway: no series, not zero

    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=scraped")["items"]
    client = openai.OpenAI(
        base_url=f"http://{pods[0]['status']['podIP']}:8000/v1", api_key="x", max_retries=0
    )
    for _ in range(5):
        client.completions.create(model="scraped-model", prompt="hello there", max_tokens=4)
    wait_for(
        "the generated tokens to show up",
        lambda: (
            (
                value(
                    prom, (f'sum(vllm:generation_tokens_total{{namespace="{ns}",pool="scraped"}})')
                )
                or 0
            )
            >= 5
        ),
        timeout=30,
    )

    # rate() needs two scrapes with an increase between them, and a labelled counter's series
    # first appears with its first request: if the five requests above all land between two
    # scrapes, the rate stays 0. Keep serving while waiting, as traffic would.
    def rate_while_serving(*rates: str) -> bool:
        client.completions.create(model="scraped-model", prompt="again", max_tokens=2)
        return all((value(prom, rate) or 0) > 0 for rate in rates)

    wait_for(
        "the pool's token rates",
        lambda: rate_while_serving(
            queries.generation_rate(ns, "scraped"), queries.prompt_rate(ns, "scraped")
        ),
        timeout=30,
        every=1.0,
    )
    # no gateway in front: the queue-wait histogram has no series, which is not zero
    assert value(prom, queries.queue_wait_p95(ns, "scraped", ["interactive"])) is None

    # engines' completions are a rate the operator reads; gateway arrivals need a gateway.
    wait_for(
        "the pool's completion rate",
        lambda: rate_while_serving(queries.completion_rate(ns, "scraped")),
        timeout=30,
        every=1.0,
    )
    assert value(prom, queries.arrival_rate(ns, "scraped")) is None
