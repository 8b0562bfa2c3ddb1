"""cache_salt isolation, deadlines from headers, admission class fallback."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy import deadlines
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


def test_a_callers_salt_splits_its_own_tenant_and_never_reaches_another() -> None:
    """A spilling gateway is one tenant at the remote gateway; its tenants' salts, sent as the
    caller's, keep them apart there, and no caller salt lets one tenant join another's."""
    own = cache_salt(secret=b"s", tenant="ns/a")
    split = cache_salt(secret=b"s", tenant="ns/a", caller="user-1")
    assert split not in (own, cache_salt(secret=b"s", tenant="ns/a", caller="user-2"))
    assert split == cache_salt(secret=b"s", tenant="ns/a", caller="user-1")
    victim = cache_salt(secret=b"s", tenant="ns/b")
    assert cache_salt(secret=b"s", tenant="ns/a", caller=victim) != victim
    assert cache_salt(secret=b"s", tenant="ns/a", caller="ns/b") != victim


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


def test_class_for_falls_back_to_the_lowest_priority() -> None:
    from tokenfleet.gateway.policy.admission import ClassPolicy, class_for

    def c(name: str, priority: int) -> ClassPolicy:
        return ClassPolicy(
            name=name, priority=priority, max_queue_depth=1, max_queue_age=1.0, default_deadline=1.0
        )

    policies = {"critical": c("critical", 300), "batch": c("batch", 100)}
    assert class_for("critical", policies) == "critical"
    assert class_for("gold", policies) == "batch"  # an unknown class never gets priority
