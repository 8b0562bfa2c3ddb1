"""Spill's pure rules (policy.spill) and the remotes' key files (remotes.Remotes).

Covered: which local refusals spill under which spillOn trigger (never the tenant's own limits
or a bad request); when a try at a remote is a retry; the most a request may cost there; the
body a remote gets (its model name, no vLLM salt for a provider, the tenant's salt for another
gateway, max_tokens as reserved); the URL from an SDK-style base URL; keys read from files,
re-read after their TTL, missing or empty as None; the per-remote concurrency bound; a failed
remote's ejection, doubling to its cap, cleared by a success.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenfleet.api.route import Remote
from tokenfleet.gateway import remotes
from tokenfleet.gateway.policy import spill
from tokenfleet.gateway.policy.rejections import Reason

BOTH = ("Unavailable", "Overloaded")


def remote(**fields: object) -> Remote:
    base: dict[str, object] = {
        "name": "eu",
        "kind": "Gateway",
        "baseUrl": "https://eu.example.com/v1",
        "apiKeySecret": {"name": "eu-key"},
    }
    return Remote.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (Reason.NO_ENDPOINTS, "Unavailable"),
        (Reason.UPSTREAM_ERROR, "Unavailable"),
        (Reason.UPSTREAM_TIMEOUT, "Unavailable"),
        (Reason.QUEUE_FULL, "Overloaded"),
        (Reason.SHED, "Overloaded"),
        (Reason.DEADLINE_UNMEETABLE, "Overloaded"),
        (Reason.QUEUE_TIMEOUT, "Overloaded"),
        # the tenant's own limits and bad requests: no region would answer differently
        (Reason.RATE_LIMITED, None),
        (Reason.DAILY_QUOTA, None),
        (Reason.CONCURRENCY_LIMIT, None),
        (Reason.CONTEXT_TOO_LONG, None),
        (Reason.INVALID_REQUEST, None),
        (Reason.DEADLINE_EXCEEDED, None),
        (Reason.MODEL_NOT_ALLOWED, None),
    ],
)
def test_which_refusals_spill(reason: Reason, expected: str | None) -> None:
    assert spill.trigger(reason, spill_on=BOTH) == expected


def test_spill_on_narrows_the_triggers() -> None:
    assert spill.trigger(Reason.SHED, spill_on=("Unavailable",)) is None
    assert spill.trigger(Reason.NO_ENDPOINTS, spill_on=("Unavailable",)) == "Unavailable"
    assert spill.trigger(Reason.NO_ENDPOINTS, spill_on=()) is None


def test_a_first_spill_with_nothing_sent_locally_is_no_retry() -> None:
    """A lost pool must spill every request, not only the retry budget's tenth."""
    assert not spill.takes_retry(tried_remotes=0, sent_locally=False)
    assert spill.takes_retry(tried_remotes=0, sent_locally=True)  # a local attempt failed
    assert spill.takes_retry(tried_remotes=1, sent_locally=False)  # the next remote


def test_the_estimate_is_the_most_the_request_may_cost() -> None:
    priced = remote(price={"inputPerMillionTokens": 0.5, "outputPerMillionTokens": 1.5})
    # micro-units: 1,000 prompt tokens × 0.5 + 200 max tokens × 1.5
    assert spill.estimate(priced, currency="USD", prompt_tokens=1000, max_tokens=200) == 800
    assert spill.estimate(remote(), currency="USD", prompt_tokens=1000, max_tokens=200) == 0
    # every sequence (n choices here) may generate max_tokens: 1,000 × 0.5 + 2 × 200 × 1.5
    two = spill.estimate(priced, currency="USD", prompt_tokens=1000, max_tokens=200, sequences=2)
    assert two == 1100


def test_a_provider_gets_no_vllm_extension_and_its_own_model_name() -> None:
    engine = {"model": "chat-small", "cache_salt": "s", "max_tokens": 7, "messages": []}
    provider = remote(kind="OpenAI", model="gpt-x")
    assert spill.remote_body(engine, remote=provider, route_name="chat-auto", salt="s") == {
        "model": "gpt-x",
        "max_tokens": 7,
        "messages": [],
    }


def test_another_gateway_gets_the_route_name_and_the_tenants_salt() -> None:
    engine = {"model": "chat-small", "cache_salt": "engine", "max_tokens": 7}
    body = spill.remote_body(engine, remote=remote(), route_name="chat-auto", salt="tenant-salt")
    assert body == {"model": "chat-auto", "cache_salt": "tenant-salt", "max_tokens": 7}
    named = spill.remote_body(engine, remote=remote(model="m"), route_name="r", salt="t")
    assert named["model"] == "m"


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://eu.example.com/v1", "https://eu.example.com/v1/chat/completions"),
        ("https://eu.example.com/v1/", "https://eu.example.com/v1/chat/completions"),
        (
            "https://proxy.example.com/openai",
            "https://proxy.example.com/openai/v1/chat/completions",
        ),
        ("http://127.0.0.1:8090/v1", "http://127.0.0.1:8090/v1/chat/completions"),
    ],
)
def test_the_url_joins_an_sdk_style_base(base: str, expected: str) -> None:
    assert spill.url(remote(baseUrl=base), "/v1/chat/completions") == expected


def mount(
    root: Path, secret: str, key: str, *, urls: str | None, namespaces: str | None = None
) -> None:
    """A Secret as the chart mounts it: its token, and where it may go."""
    (root / secret).mkdir(exist_ok=True)
    (root / secret / "api-key").write_text(key)
    if urls is not None:
        (root / secret / remotes.BASE_URL_KEY).write_text(urls)
    if namespaces is not None:
        (root / secret / remotes.NAMESPACES_KEY).write_text(namespaces)


def test_keys_are_read_from_their_files_and_re_read_after_their_ttl(tmp_path: Path) -> None:
    known = remotes.Remotes(tmp_path)
    eu = remote()
    assert known.key(eu, namespace="ns", now=0.0) is None  # not mounted
    mount(tmp_path, "eu-key", "sk-1\n", urls="https://eu.example.com/v1/\n")
    assert known.key(eu, namespace="ns", now=1.0) is None  # still the cached miss
    assert known.key(eu, namespace="ns", now=remotes.KEY_TTL_SECONDS) == "sk-1"
    (tmp_path / "eu-key" / "api-key").write_text("sk-2")  # kubelet swapped the Secret
    assert known.key(eu, namespace="ns", now=remotes.KEY_TTL_SECONDS + 1) == "sk-1"
    assert known.key(eu, namespace="ns", now=2 * remotes.KEY_TTL_SECONDS + 1) == "sk-2"
    (tmp_path / "eu-key" / "api-key").write_text("  \n")
    assert known.key(eu, namespace="ns", now=4 * remotes.KEY_TTL_SECONDS) is None  # empty


@pytest.mark.parametrize(
    ("urls", "namespaces", "namespace", "given", "why"),
    [
        pytest.param("https://eu.example.com/v1", None, "ns", True, "", id="bound-any-namespace"),
        pytest.param(
            "https://other.example.com/v1\nhttps://eu.example.com/v1",
            "a\nns\n",
            "ns",
            True,
            "",
            id="one-of-several-urls-and-listed-namespace",
        ),
        pytest.param(
            "https://evil.example.com/v1", None, "ns", False, "does not bind", id="other-url"
        ),
        pytest.param(None, None, "ns", False, "does not bind", id="bound-to-nothing"),
        pytest.param(
            "https://eu.example.com/v1", "team-a", "ns", False, "not for routes", id="namespace"
        ),
    ],
)
def test_a_key_goes_only_where_its_secret_binds_it(
    tmp_path: Path, urls: str | None, namespaces: str | None, namespace: str, given: bool, why: str
) -> None:
    """A route author cannot point a route at their own server and name someone's mounted key."""
    mount(tmp_path, "eu-key", "sk-1", urls=urls, namespaces=namespaces)
    known, eu = remotes.Remotes(tmp_path), remote()
    assert (known.key(eu, namespace=namespace, now=0.0) == "sk-1") is given
    problem = known.problem(eu, namespace=namespace, now=0.0)
    assert (why in problem and bool(problem) != given) if why else problem == ""
    assert "sk-1" not in problem


def test_a_remote_takes_at_most_its_max_concurrency(tmp_path: Path) -> None:
    known, eu = remotes.Remotes(tmp_path), remote(maxConcurrency=2)
    assert known.take("ns/r", eu) and known.take("ns/r", eu)
    assert not known.take("ns/r", eu)
    assert known.take("ns/other", eu)  # per route
    known.release("ns/r", eu)
    assert known.in_flight("ns/r", eu) == 1 and known.take("ns/r", eu)


def test_a_failed_remote_is_ejected_longer_each_time_and_cleared_by_a_success(
    tmp_path: Path,
) -> None:
    known, eu = remotes.Remotes(tmp_path), remote()
    assert not known.ejected("r", eu, now=0.0)
    assert known.failed("r", eu, now=0.0) == remotes.EJECT_SECONDS
    assert known.ejected("r", eu, now=remotes.EJECT_SECONDS - 0.1)
    assert not known.ejected("r", eu, now=remotes.EJECT_SECONDS)  # the probe may go
    assert known.failed("r", eu, now=10.0) == 2 * remotes.EJECT_SECONDS  # the probe failed
    assert known.failed("r", eu, now=11.0) == 2 * remotes.EJECT_SECONDS  # already ejected: once
    now = 20.0
    for _ in range(10):  # each probe fails once its ejection has passed
        span = known.failed("r", eu, now=now)
        now += span
    assert span == remotes.EJECT_MAX_SECONDS
    assert not known.ejected("other-route", eu, now=now)  # per route
    known.succeeded("r", eu)
    assert not known.ejected("r", eu, now=now)
    assert known.failed("r", eu, now=now) == remotes.EJECT_SECONDS  # starts over
