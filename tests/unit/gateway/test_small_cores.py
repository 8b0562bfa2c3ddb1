"""cache_salt isolation, deadlines from headers, least-in-flight routing."""

from __future__ import annotations

import random

import pytest

from tokenfleet.gateway.policy import deadlines, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.policy.salt import cache_salt


def test_salt_isolates_tenants_and_joins_groups() -> None:
    a = cache_salt(secret=b"s", tenant="ns/a")
    assert a == cache_salt(secret=b"s", tenant="ns/a")
    assert a != cache_salt(secret=b"s", tenant="ns/b")
    assert a != cache_salt(secret=b"other", tenant="ns/a")  # unguessable without the secret
    assert cache_salt(secret=b"s", tenant="ns/a", group="g") == cache_salt(
        secret=b"s", tenant="ns/b", group="g"
    )
    assert len(a) == 32 and a  # vLLM rejects an empty salt


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, 130.0, id="class-default"),
        pytest.param("2500", 102.5, id="header"),
        pytest.param("0", Reason.INVALID_REQUEST, id="zero"),
        pytest.param("-5", Reason.INVALID_REQUEST, id="negative"),
        pytest.param("soon", Reason.INVALID_REQUEST, id="not-a-number"),
        pytest.param(str(deadlines.MAX_DEADLINE_MS + 1), Reason.INVALID_REQUEST, id="too-far"),
    ],
)
def test_deadline(header: str | None, expected: float | Reason) -> None:
    got = deadlines.deadline(now=100.0, header=header, default_seconds=30.0)
    if isinstance(expected, Reason):
        assert (
            isinstance(got, Rejected) and got.reason == expected and got.param == deadlines.HEADER
        )
    else:
        assert got == expected


def ep(url: str, size: int = 4) -> routing.Endpoint:
    return routing.Endpoint(url=url, pool="p", models=frozenset({"m"}), max_concurrency=size)


@pytest.mark.parametrize(
    ("candidates", "in_flight", "exclude", "expected"),
    [
        pytest.param([ep("a"), ep("b")], {"a": 2, "b": 1}, frozenset(), "b", id="fewest"),
        pytest.param(
            [ep("a", 8), ep("b", 2)], {"a": 2, "b": 1}, frozenset(), "a", id="relative-to-size"
        ),
        pytest.param([ep("a"), ep("b")], {"a": 0, "b": 3}, frozenset({"a"}), "b", id="excluded"),
        pytest.param([ep("a")], {}, frozenset({"a"}), None, id="nothing-left"),
        pytest.param([], {}, frozenset(), None, id="no-endpoints"),
    ],
)
def test_choose(
    candidates: list[routing.Endpoint],
    in_flight: dict[str, int],
    exclude: frozenset[str],
    expected: str | None,
) -> None:
    got = routing.choose(candidates, in_flight, random.Random(1), exclude)
    assert (got.url if got else None) == expected


def test_ties_are_shared_and_replay_with_a_seed() -> None:
    eps = [ep("a"), ep("b"), ep("c")]
    picks = [routing.choose(eps, {}, rng).url for rng in [random.Random(7)] for _ in range(300)]  # type: ignore[union-attr]
    again = [routing.choose(eps, {}, rng).url for rng in [random.Random(7)] for _ in range(300)]  # type: ignore[union-attr]
    assert picks == again
    assert {picks.count(u) for u in "abc"} and min(picks.count(u) for u in "abc") > 60


@pytest.mark.parametrize(
    ("buckets", "prompt", "expected"),
    [
        pytest.param([("short", 50), ("long", 8000)], 40, "short", id="first-that-fits"),
        pytest.param([("short", 50), ("long", 8000)], 400, "long", id="long-prompt-to-long-pool"),
        pytest.param([("short", 50), ("mid", 500)], 9000, "mid", id="none-fits-largest"),
        pytest.param([], 10, None, id="no-pools"),
    ],
)
def test_choose_pool_by_context_bucket(
    buckets: list[tuple[str, int]], prompt: int, expected: str | None
) -> None:
    assert routing.choose_pool(buckets, prompt) == expected


def test_class_for_falls_back_to_the_lowest_priority() -> None:
    from tokenfleet.gateway.policy.admission import ClassPolicy, class_for

    def c(name: str, priority: int) -> ClassPolicy:
        return ClassPolicy(
            name=name, priority=priority, max_queue_depth=1, max_queue_age=1.0, default_deadline=1.0
        )

    policies = {"critical": c("critical", 300), "batch": c("batch", 100)}
    assert class_for("critical", policies) == "critical"
    assert class_for("gold", policies) == "batch"  # an unknown class never gets priority
