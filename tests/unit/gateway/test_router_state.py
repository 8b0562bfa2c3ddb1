"""The routing shell's pure parts: scraped /metrics → Load, the joined load view, and the
per-process state transitions (in-flight counts, ejection and readmission, the retry budget)."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from tokenfleet.gateway import router
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.metrics import Metrics
from tokenfleet.gateway.policy import prefix, routing

PAGE = """# HELP vllm:num_requests_waiting waiting
vllm:num_requests_waiting{model_name="m"} 3
vllm:num_requests_waiting{model_name="lora"} 2
vllm:kv_cache_usage_perc{model_name="m"} 0.25
vllm:num_requests_running{model_name="m"} 7
"""


@pytest.mark.parametrize(
    ("text", "waiting", "kv"),
    [
        pytest.param(PAGE, 5, 0.25, id="summed-over-engines"),
        pytest.param('vllm:gpu_cache_usage_perc{a="b"} 0.5\n', 0, 0.5, id="deprecated-alias"),
        pytest.param("", 0, 0.0, id="empty"),
        pytest.param("vllm:num_requests_waiting{} not-a-number\n", 0, 0.0, id="garbage"),
    ],
)
def test_parse_load(text: str, waiting: int, kv: float) -> None:
    got = router.parse_load(text, now=12.0)
    assert (got.waiting, got.kv_usage, got.scraped_at) == (waiting, kv, 12.0)


def ep(url: str) -> routing.Endpoint:
    return routing.Endpoint(url=url, pool="p", models=frozenset({"m"}))


def make() -> router.Router:
    settings = Settings(seed=1, retry_budget_min=1, retry_budget_ratio=0.0)
    return router.Router(settings, Metrics.create(CollectorRegistry()).routing)


def test_choosing_counts_in_flight_beside_the_scrape() -> None:
    r = make()
    r.scraped["a"] = routing.Load(waiting=4, kv_usage=0.5, scraped_at=1.0)
    group = routing.Group.of([ep("a")])
    choice = r.choose(
        group, model="m", policy=routing.Policy(), match=prefix.NO_MATCH, tried=frozenset()
    )
    assert choice is not None
    assert r.in_flight == {"a": 1}
    assert r.scraped["a"] == routing.Load(waiting=4, kv_usage=0.5, scraped_at=1.0)
    r.done(choice.endpoint, ok=True)
    assert "a" not in r.in_flight


def test_failures_eject_and_the_budget_runs_out() -> None:
    r = make()
    group = routing.Group.of([ep("a"), ep("b")])
    for _ in range(5):  # EjectionPolicy.consecutive
        choice = r.choose(
            group, model="m", policy=routing.Policy(), match=prefix.NO_MATCH, tried=frozenset({"b"})
        )
        assert choice is not None and choice.endpoint.url == "a"
        r.done(choice.endpoint, ok=False)
    assert r.ejected(time.monotonic()) == {"a"}
    again = r.choose(
        group, model="m", policy=routing.Policy(), match=prefix.NO_MATCH, tried=frozenset()
    )
    assert again is not None and again.endpoint.url == "b"
    r.count_request()
    assert r.try_retry("m") is True  # the floor of one per window
    assert r.try_retry("m") is False
