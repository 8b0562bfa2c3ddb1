"""Load as the gateway counts it, and prefix homes every gateway process agrees on (tables)."""

from __future__ import annotations

import random

import pytest

from tokenfleet.gateway.policy import prefix, routing
from tokenfleet.gateway.policy.routing import Load, Policy

NOW = 100.0


def ep(url: str, size: int = 16) -> routing.Endpoint:
    return routing.Endpoint(url=url, pool="", models=frozenset({"m"}), max_concurrency=size)


@pytest.mark.parametrize(
    ("load", "others"),
    [
        pytest.param(Load(), 0.0, id="never-scraped"),
        pytest.param(Load(waiting=3, running=5, own=2, scraped_at=NOW), 6.0, id="fresh-less-own"),
        pytest.param(Load(waiting=3, running=5, own=2, scraped_at=NOW - 2.5), 3.0, id="half-aged"),
        pytest.param(Load(waiting=3, running=5, own=2, scraped_at=NOW - 9), 0.0, id="stale"),
        pytest.param(
            Load(waiting=0, running=2, own=5, scraped_at=NOW), 0.0, id="own-finished-since"
        ),
    ],
)
def test_others(load: Load, others: float) -> None:
    assert load.others(NOW, 5.0) == pytest.approx(others)


def pick(
    eps: list[routing.Endpoint],
    in_flight: dict[str, int],
    loads: dict[str, Load],
    *,
    match: prefix.Match = prefix.NO_MATCH,
    kind: str = "LeastLoad",
    seed: int = 1,
    processes: int = 1,
) -> str:
    got = routing.pick(
        routing.Group.of(eps),
        in_flight=in_flight,
        loads=loads,
        ask=routing.Ask(match=match),
        policy=Policy(kind=kind),  # type: ignore[arg-type]
        now=NOW,
        rng=random.Random(seed),
        processes=processes,
    )
    assert got is not None
    return got.endpoint.url


@pytest.mark.parametrize(
    ("in_flight", "loads", "expected"),
    [
        # b's scrape shows the 4 requests this gateway sent it: not counted twice
        pytest.param(
            {"a": 3, "b": 4},
            {"b": Load(running=4, own=4, scraped_at=NOW)},
            "a",
            id="own-requests-not-double-counted",
        ),
        # a's engine runs 6 requests of other gateways
        pytest.param(
            {"a": 1, "b": 3},
            {"a": Load(running=7, own=1, scraped_at=NOW)},
            "b",
            id="other-gateways-count",
        ),
        # high KV usage a second ago does not outweigh a request and a half
        pytest.param(
            {"a": 0, "b": 2},
            {
                "a": Load(kv_usage=0.9, scraped_at=NOW - 1),
                "b": Load(kv_usage=0.1, scraped_at=NOW - 1),
            },
            "a",
            id="kv-is-a-tie-breaker",
        ),
    ],
)
def test_least_load(in_flight: dict[str, int], loads: dict[str, Load], expected: str) -> None:
    assert pick([ep("a"), ep("b")], in_flight, loads) == expected


def test_simultaneous_arrivals_spread() -> None:
    """Counted at once in flight, 32 arrivals in a burst land about 8 on each of 4 endpoints, even
    with a scrape that says one of them was idle and another had most of its KV cache used:
    at no point does one endpoint have two requests more than another."""
    eps = [ep(u) for u in "abcd"]
    loads = {"a": Load(scraped_at=NOW), "b": Load(kv_usage=0.8, running=0, scraped_at=NOW - 0.5)}
    for kind in ("LeastLoad", "PrefixAware"):
        in_flight: dict[str, int] = {}
        for i in range(32):
            key = prefix.block_hashes(f"unique {i} " * 200, model="m", salt="")
            url = pick(
                eps, in_flight, loads, match=prefix.Match({}, len(key), key[3]), kind=kind, seed=i
            )
            in_flight[url] = in_flight.get(url, 0) + 1
            assert max(in_flight.values()) - min(in_flight.get(u, 0) for u in "abcd") <= 2, kind
        assert max(in_flight.values()) <= 9, kind


def test_processes_agree_on_a_new_prefix() -> None:
    """Two processes with different seeds and different own loads send a prefix nobody holds
    to the same endpoint: its rendezvous home."""
    eps = [ep(u) for u in "abcd"]
    agreed = 0
    for i in range(40):
        hashes = prefix.block_hashes(f"system prompt {i} " * 80, model="m", salt="")
        m = prefix.Match({}, len(hashes), hashes[3])
        one = pick(eps, {}, {}, match=m, kind="PrefixAware", seed=1)
        two = pick(eps, {"a": 1, "c": 1}, {}, match=m, kind="PrefixAware", seed=2)
        home = max("abcd", key=lambda u: routing.rendezvous(hashes[3], u))
        assert one == home
        agreed += one == two
    # the second process defers to load only where the home is one of its busier endpoints
    assert agreed >= 20


def new_prefix(text: str) -> tuple[prefix.Match, str]:
    """A prompt nobody holds, and its rendezvous home among a, b, c, d."""
    hashes = prefix.block_hashes(text, model="m", salt="")
    home = max("abcd", key=lambda u: routing.rendezvous(hashes[3], u))
    return prefix.Match({}, len(hashes), hashes[3]), home


@pytest.mark.parametrize(
    ("home_load", "processes", "size", "to_home"),
    [
        pytest.param(0, 1, 16, True, id="idle-home"),
        pytest.param(1, 1, 16, True, id="one-request-more"),
        pytest.param(2, 1, 16, False, id="two-more-one-process"),
        pytest.param(2, 4, 16, True, id="two-more-four-processes"),  # their views are that far off
        pytest.param(4, 4, 16, True, id="four-more-four-processes"),
        pytest.param(5, 4, 16, False, id="five-more-four-processes"),
        pytest.param(2, 4, 2, False, id="home-has-no-free-sequence"),  # it would queue in vLLM
    ],
)
def test_a_new_prefix_goes_home_within_the_processes_slack(
    home_load: int, processes: int, size: int, to_home: bool
) -> None:
    """The others idle, the home ``home_load`` requests busy: home or balance."""
    match, home = new_prefix("a system prompt " * 80)
    eps = [ep(u, size) for u in "abcd"]
    got = pick(eps, {home: home_load}, {}, match=match, kind="PrefixAware", processes=processes)
    assert (got == home) is to_home, got


def test_match_key_is_the_leading_blocks() -> None:
    index = prefix.PrefixIndex()
    long = prefix.block_hashes("x" * 256 * 10, model="m", salt="")
    short = prefix.block_hashes("x" * 256 * 2, model="m", salt="")
    assert index.match(long).key == long[3] and index.match(short).key == short[1]
    assert index.match(()).key == b""
