"""policy.intake_cost: the value count of a body (an upper bound, before any parse), the per-body
limit, and the in-flight ledger per tenant and per process (issue 35: a 4 MiB body of tiny
values was parsed into ~96 MiB of objects before any limit).

Matrix: bodies (chat, token ids, dense JSON in a pass-through field, prose with punctuation)
× the count's bound; takes within, at and past the tenant and the process limits; give-backs.
"""

from __future__ import annotations

import json

import orjson
import pytest

from tokenfleet.gateway import intake
from tokenfleet.gateway.policy import intake_cost
from tokenfleet.gateway.policy.rejections import Reason, Rejected

MIB = intake_cost.MIB
LIMITS = intake_cost.Limits(max_values=1000, tenant_bytes=10 * MIB, process_bytes=25 * MIB)


def chat(**extra: object) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    ).encode()


def true_values(value: object) -> int:
    """The values a decoded document holds (keys included), for comparison."""
    if isinstance(value, dict):
        return 1 + sum(1 + true_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(true_values(v) for v in value)
    return 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(chat(), id="a-small-chat"),
        pytest.param(chat(prompt=list(range(500))), id="token-ids"),
        pytest.param(chat(metadata=[{}] * 300), id="empty-objects"),
        pytest.param(chat(x=[[[[]]]] * 50), id="nested-arrays"),
        pytest.param(chat(temperature=0.5, n=2, stop=["a", "b"]), id="options"),
        pytest.param(b"[]", id="an-empty-array"),
        pytest.param(b"{}", id="an-empty-object"),
    ],
)
def test_the_count_bounds_the_values_from_above(body: bytes) -> None:
    assert intake_cost.values(body) >= true_values(orjson.loads(body))


def test_punctuation_inside_strings_is_counted_too_erring_towards_refusal() -> None:
    body = chat(messages=[{"role": "user", "content": "a, b, {c}, [d]"}])
    assert intake_cost.values(body) > true_values(orjson.loads(body))


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        pytest.param(chat(), False, id="a-chat"),
        pytest.param(chat(prompt=list(range(900))), False, id="900-token-ids"),
        pytest.param(b'{"model":"m","x":[' + b"{}," * 2000 + b"{}]}", True, id="2000-objects"),
        pytest.param(b'{"model":"m","x":[' + b"1," * 5000 + b"1]}", True, id="5000-numbers"),
        pytest.param(
            json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": ""}] * 400}
            ).encode(),
            True,
            id="400-tiny-messages",
        ),
    ],
)
def test_a_body_with_too_many_values_is_refused_before_it_is_parsed(
    body: bytes, refused: bool
) -> None:
    rejected = intake_cost.too_complex(intake_cost.values(body), LIMITS)
    assert (rejected is not None) == refused
    decoded = intake.decode(body, "chat", LIMITS)
    if refused:
        assert isinstance(decoded, Rejected) and decoded.reason is Reason.BODY_TOO_LARGE
        assert decoded.status == 413


def test_the_estimate_grows_with_size_and_values() -> None:
    assert intake_cost.estimate(1000, 10) < intake_cost.estimate(2000, 10)
    assert intake_cost.estimate(1000, 10) < intake_cost.estimate(1000, 20)
    worst = intake_cost.before_reading(4 * MIB, intake_cost.Limits())
    assert worst == intake_cost.estimate(4 * MIB, intake_cost.Limits().max_values)


@pytest.mark.parametrize(
    ("held", "tenant", "cost", "reason"),
    [
        pytest.param({}, "a", 9 * MIB, None, id="the-first-body-within"),
        pytest.param({}, "a", 40 * MIB, None, id="one-body-alone-always-in"),
        pytest.param({"a": 6 * MIB}, "a", 4 * MIB, None, id="at-the-tenant-limit"),
        pytest.param({"a": 6 * MIB}, "a", 5 * MIB, Reason.RATE_LIMITED, id="past-the-tenant"),
        pytest.param({"a": 9 * MIB}, "b", 9 * MIB, None, id="another-tenant-its-own"),
        pytest.param(
            {"a": 9 * MIB, "b": 9 * MIB}, "c", 8 * MIB, Reason.SHED, id="past-the-process"
        ),
    ],
)
def test_takes_within_the_tenant_and_process_limits(
    held: dict[str, int], tenant: str, cost: int, reason: Reason | None
) -> None:
    state = intake_cost.InFlight(held, sum(held.values()))
    taken = intake_cost.take(state, tenant=tenant, cost=cost, limits=LIMITS)
    if reason is None:
        assert isinstance(taken, intake_cost.InFlight)
        assert taken.by_tenant[tenant] == held.get(tenant, 0) + cost
        assert taken.total == state.total + cost
        assert state.total == sum(held.values())  # the state given is not changed
    else:
        assert isinstance(taken, Rejected) and taken.reason is reason
        assert taken.retry_after == 1.0


def test_give_back_returns_to_empty() -> None:
    state = intake_cost.InFlight()
    for cost in (MIB, 2 * MIB):
        taken = intake_cost.take(state, tenant="a", cost=cost, limits=LIMITS)
        assert isinstance(taken, intake_cost.InFlight)
        state = taken
    state = intake_cost.give_back(state, tenant="a", cost=MIB)
    assert state == intake_cost.InFlight({"a": 2 * MIB}, 2 * MIB)
    assert intake_cost.give_back(state, tenant="a", cost=2 * MIB) == intake_cost.InFlight()
