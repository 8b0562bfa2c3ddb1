"""The Redis quota script against its Python reference (policy.quotas.Buckets), property-tested.

Random sequences of reserve, settle (refund or extra charge), and clock advances — across a UTC
day boundary too — run through the real Lua script in a real redis-server and through Buckets,
for random RPM, TPM, TPD and concurrency limits (each possibly unlimited). Every decision (ok,
reason, retry-after) and every stored balance must be equal. Levels are stored with 17
significant digits, so "equal" is exact: the documented rounding is none. The lease script
(quotas.LEASE_LUA: grants of at least what a request needs and up to more, concurrency slots
included, and their return, debts included) is held to Buckets.lease and Buckets.give_back the
same way, interleaved with per-request reserve and settle on the same concurrency counter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.gateway import Redis
from tokenfleet.gateway import redis_client
from tokenfleet.gateway.policy import quotas

DAY = quotas.SECONDS_PER_DAY
_tenants = itertools.count()


@dataclasses.dataclass(frozen=True)
class Reserve:
    tokens: int


@dataclasses.dataclass(frozen=True)
class Settle:
    which: int  # index into the reservations still open (mod their number)
    used: int  # tokens the request really used (may exceed what it reserved)


@dataclasses.dataclass(frozen=True)
class Advance:
    seconds: float


limit = st.one_of(st.none(), st.integers(min_value=1, max_value=400))
ops = st.lists(
    st.one_of(
        st.builds(Reserve, tokens=st.integers(min_value=0, max_value=300)),
        st.builds(Settle, which=st.integers(0, 50), used=st.integers(min_value=0, max_value=400)),
        st.builds(Advance, seconds=st.floats(min_value=0.0, max_value=90.0, allow_nan=False)),
    ),
    min_size=1,
    max_size=40,
)


async def _replay(url: str, limits: quotas.Limits, start: float, steps: list[object]) -> None:
    client = redis_client.RespClient(url, timeout=5.0)
    script = redis_client.Script(client, quotas.LUA)
    tenant = f"prop-{next(_tenants)}"
    reference = quotas.Buckets()
    now, open_reservations = start, []
    try:
        for step in steps:
            day, left = quotas.day_of(now)
            keys = quotas.keys(tenant, day)
            if isinstance(step, Advance):
                now += step.seconds
                continue
            if isinstance(step, Reserve):
                args = ["reserve", step.tokens, 0, *limits.as_args(), left, repr(now)]
                ok, retry_ms, reason = await script(keys=keys, args=args)
                expected = reference.reserve(limits, step.tokens, now)
                if expected is None:
                    assert (int(ok), reason) == (1, b""), step
                    open_reservations.append(step.tokens)
                else:
                    want = quotas.refusal(reason.decode(), int(retry_ms), limits, step.tokens)
                    assert int(ok) == 0 and want == expected, (step, reason, retry_ms)
            elif open_reservations:
                reserved = open_reservations.pop(step.which % len(open_reservations))
                refund = reserved - step.used
                await script(
                    keys=keys, args=["settle", 0, refund, *limits.as_args(), left, repr(now)]
                )
                reference.settle(limits, refund, now)
            await _same_balances(client, keys, reference, day)
    finally:
        await client.close()


async def _same_balances(
    client: redis_client.RespClient, keys: list[str], reference: quotas.Buckets, day: int
) -> None:
    for key, bucket in ((keys[0], reference.rpm), (keys[1], reference.tpm)):
        level, at = await client.call("HMGET", key, "level", "at")
        got = None if level is None else (float(level), float(at))
        assert got == (None if bucket is None else (bucket.level, bucket.at)), key
    per_day = await client.call("GET", keys[2])
    assert int(per_day or 0) == reference.per_day.get(day, 0)
    concurrent = await client.call("GET", keys[3])
    assert int(concurrent or 0) == reference.concurrent


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rpm=limit,
    tpm=limit,
    tpd=st.one_of(st.none(), st.integers(min_value=1, max_value=2000)),
    conc=st.one_of(st.none(), st.integers(min_value=1, max_value=5)),
    # Near a UTC midnight half the time, so advances cross into a new tokens-per-day counter.
    start=st.one_of(
        st.floats(min_value=1.8e9, max_value=1.9e9, allow_nan=False),
        st.integers(min_value=20_000, max_value=21_000).map(lambda d: d * DAY - 30.0),
    ),
    steps=ops,
)
def test_the_lua_script_decides_and_counts_exactly_like_buckets(
    redis: Redis,
    rpm: int | None,
    tpm: int | None,
    tpd: int | None,
    conc: int | None,
    start: float,
    steps: list[object],
) -> None:
    limits = quotas.Limits(
        requests_per_minute=rpm, tokens_per_minute=tpm, tokens_per_day=tpd, max_concurrent=conc
    )
    asyncio.run(_replay(redis.url, limits, start, steps))


def test_the_gateway_path_reads_the_redis_clock(redis: Redis) -> None:
    """Without the test-only clock argument the script uses Redis's TIME: stored 'at' is now."""

    async def run() -> float:
        client = redis_client.RespClient(redis.url, timeout=5.0)
        try:
            script = redis_client.Script(client, quotas.LUA)
            limits = quotas.Limits(requests_per_minute=10)
            keys = quotas.keys("clock", 0)
            ok, _, _ = await script(keys=keys, args=["reserve", 1, 0, *limits.as_args(), 60])
            assert int(ok) == 1
            seconds, micros = await client.call("TIME")
            _, at = await client.call("HMGET", keys[0], "level", "at")
            return float(seconds) + float(micros) / 1e6 - float(at)
        finally:
            await client.close()

    assert 0 <= asyncio.run(run()) < 5


@dataclasses.dataclass(frozen=True)
class Lease:
    requests: int
    tokens: int
    extra_requests: int
    extra_tokens: int
    slots: int = 0
    extra_slots: int = 0


@dataclasses.dataclass(frozen=True)
class GiveBack:
    requests: int
    tokens: int  # negative: a debt charged
    slots: int = 0  # free slots (more than the counter holds: it stops at 0)


lease_ops = st.lists(
    st.one_of(
        st.builds(
            Lease,
            requests=st.integers(0, 2),
            tokens=st.integers(0, 300),
            extra_requests=st.integers(0, 10),
            extra_tokens=st.integers(0, 600),
            slots=st.integers(0, 2),
            extra_slots=st.integers(0, 8),
        ),
        st.builds(
            GiveBack,
            requests=st.integers(0, 10),
            tokens=st.integers(-100, 600),
            slots=st.integers(0, 6),
        ),
        # per-request reservations on the same counters (a tenant not leased on some replica)
        st.builds(Reserve, tokens=st.integers(min_value=0, max_value=300)),
        st.builds(Settle, which=st.integers(0, 50), used=st.integers(min_value=0, max_value=400)),
        st.builds(Advance, seconds=st.floats(min_value=0.0, max_value=90.0, allow_nan=False)),
    ),
    min_size=1,
    max_size=40,
)


async def _replay_leases(
    url: str, limits: quotas.Limits, start: float, steps: list[object]
) -> None:
    client = redis_client.RespClient(url, timeout=5.0)
    script = redis_client.Script(client, quotas.LEASE_LUA)
    per_request = redis_client.Script(client, quotas.LUA)
    tenant = f"lease-{next(_tenants)}"
    reference = quotas.Buckets()
    rpm, tpm, tpd, conc = limits.as_args()
    now, open_reservations = start, []
    try:
        for step in steps:
            day, left = quotas.day_of(now)
            keys = quotas.keys(tenant, day)
            if isinstance(step, Advance):
                now += step.seconds
                continue
            if isinstance(step, Lease):
                args = [
                    "lease", step.requests, step.tokens, step.slots,
                    step.extra_requests, step.extra_tokens, step.extra_slots,
                    rpm, tpm, tpd, conc, left, repr(now),
                ]  # fmt: skip
                ok, first, second, third = await script(keys=keys, args=args)
                expected = reference.lease(
                    limits,
                    requests=step.requests,
                    tokens=step.tokens,
                    extra_requests=step.extra_requests,
                    extra_tokens=step.extra_tokens,
                    slots=step.slots,
                    extra_slots=step.extra_slots,
                    now=now,
                )
                if isinstance(expected, tuple):
                    assert (int(ok), int(first), int(second), int(third)) == (1, *expected), step
                    assert expected[0] >= step.requests and expected[1] >= step.tokens
                    if limits.max_concurrent is not None:
                        assert step.slots <= expected[2] <= step.slots + step.extra_slots
                        assert reference.concurrent <= limits.max_concurrent or not expected[2]
                else:
                    got = quotas.refusal(second.decode(), int(first), limits, step.tokens)
                    assert int(ok) == 0 and got == expected, (step, second, first)
            elif isinstance(step, GiveBack):
                args = [
                    "return", step.requests, step.tokens, step.slots, 0, 0, 0,
                    rpm, tpm, tpd, conc, left, repr(now),
                ]  # fmt: skip
                assert [int(x) for x in await script(keys=keys, args=args)] == [1, 0, 0, 0]
                reference.give_back(
                    limits, requests=step.requests, tokens=step.tokens, slots=step.slots, now=now
                )
            elif isinstance(step, Reserve):
                args = ["reserve", step.tokens, 0, *limits.as_args(), left, repr(now)]
                ok, _, _ = await per_request(keys=keys, args=args)
                assert (int(ok) == 1) is (reference.reserve(limits, step.tokens, now) is None)
                if int(ok):
                    open_reservations.append(step.tokens)
            elif isinstance(step, Settle) and open_reservations:
                refund = open_reservations.pop(step.which % len(open_reservations)) - step.used
                args = ["settle", 0, refund, *limits.as_args(), left, repr(now)]
                await per_request(keys=keys, args=args)
                reference.settle(limits, refund, now)
            await _same_balances(client, keys, reference, day)
    finally:
        await client.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rpm=limit,
    tpm=limit,
    tpd=st.one_of(st.none(), st.integers(min_value=1, max_value=2000)),
    conc=st.one_of(st.none(), st.integers(min_value=1, max_value=12)),
    start=st.one_of(
        st.floats(min_value=1.8e9, max_value=1.9e9, allow_nan=False),
        st.integers(min_value=20_000, max_value=21_000).map(lambda d: d * DAY - 30.0),
    ),
    steps=lease_ops,
)
def test_the_lease_script_grants_and_counts_exactly_like_buckets(
    redis: Redis,
    rpm: int | None,
    tpm: int | None,
    tpd: int | None,
    conc: int | None,
    start: float,
    steps: list[object],
) -> None:
    limits = quotas.Limits(
        requests_per_minute=rpm, tokens_per_minute=tpm, tokens_per_day=tpd, max_concurrent=conc
    )
    asyncio.run(_replay_leases(redis.url, limits, start, steps))
