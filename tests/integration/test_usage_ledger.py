"""The durable usage ledger against a real redis-server: what one gateway process recorded is
read back by another (a restart loses nothing settled), entries recorded while Redis is down
are written once it is back, and the Prometheus counters agree with the ledger."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from support.gateway import Redis, free_port
from tokenfleet.accounting import usage_layout
from tokenfleet.gateway import redis_client, usage_ledger
from tokenfleet.signals import usage

NOW = datetime.datetime(2026, 12, 1, 11, 20, tzinfo=datetime.UTC)


@pytest.fixture()
def redis(tmp_path: Path) -> Iterator[Redis]:
    r = Redis(port=free_port(), log=tmp_path / "redis.log")
    r.start()
    yield r
    r.kill()


def _record_mix(ledger: usage_ledger.UsageLedger) -> None:
    ledger.record(
        tenant="t/a",
        model="m",
        pool="t/p",
        outcome="served",
        prompt_tokens=100,
        cached_prompt_tokens=64,
        completion_tokens=20,
        now=NOW,
    )
    ledger.record(
        tenant="t/a",
        model="m",
        pool="t/p",
        outcome="served",
        prompt_tokens=50,
        completion_tokens=10,
        now=NOW,
    )
    ledger.record(
        tenant="t/b",
        model="m",
        pool="t/p",
        outcome="cancelled",
        prompt_tokens=3000,
        completion_tokens=7,
        now=NOW,
    )


async def _read(url: str) -> list[usage_layout.Entry]:
    client = redis_client.RespClient(url, timeout=2)
    try:
        hours = await usage_ledger.read(client, since=NOW, until=NOW)
        return [e for _, entries in hours for e in entries]
    finally:
        await client.close()


def test_a_new_process_reads_what_the_last_one_recorded(redis: Redis) -> None:
    async def scenario() -> tuple[list[usage_layout.Entry], float]:
        registry = CollectorRegistry()
        ledger = usage_ledger.UsageLedger(redis.url, registry=registry)
        _record_mix(ledger)
        await ledger.close()  # the gateway process ends; only Redis remains
        counted = registry.get_sample_value(
            usage.USAGE_PROMPT_TOKENS,
            {"tenant": "t/a", "model": "m", "pool": "t/p", "outcome": "served"},
        )
        return await _read(redis.url), counted or 0.0

    entries, counted = asyncio.run(scenario())
    assert entries == [
        usage_layout.Entry(
            tenant="t/a",
            model="m",
            pool="t/p",
            outcome="served",
            requests=2,
            prompt_tokens=150,
            cached_prompt_tokens=64,
            completion_tokens=30,
        ),
        usage_layout.Entry(
            tenant="t/b",
            model="m",
            pool="t/p",
            outcome="cancelled",
            requests=1,
            prompt_tokens=3000,
            completion_tokens=7,
        ),
    ]
    assert counted == 150  # Prometheus and the ledger agree


def test_entries_wait_for_redis_and_land_once(tmp_path: Path) -> None:
    port = free_port()
    down = Redis(port=port, log=tmp_path / "redis.log")

    async def scenario() -> list[usage_layout.Entry]:
        ledger = usage_ledger.UsageLedger(down.url, registry=CollectorRegistry())
        _record_mix(ledger)  # Redis is not running: nothing raises, all three wait
        down.start()
        assert await ledger.flush()
        await ledger.close()
        return await _read(down.url)

    try:
        entries = asyncio.run(scenario())
    finally:
        down.kill()
    assert [(e.tenant, e.requests) for e in entries] == [("t/a", 2), ("t/b", 1)]


def test_a_long_outage_holds_one_entry_per_label_set_not_one_per_flush(tmp_path: Path) -> None:
    """Redis unreachable (nothing was sent): every failed flush puts its batch back, summed
    with what came since, so memory stays at one entry per label set however many flushes
    fail, and nothing is dropped or counted twice once Redis is back."""
    port = free_port()
    down = Redis(port=port, log=tmp_path / "redis.log")

    async def scenario() -> tuple[list[int], list[usage_layout.Entry]]:
        ledger = usage_ledger.UsageLedger(down.url, registry=CollectorRegistry())
        held = []
        for _ in range(20):  # 20 failed flushes, records between them
            _record_mix(ledger)
            assert not await ledger.flush()
            held.append(len(ledger._pending) + len(ledger._retry))
        down.start()
        assert await ledger.flush()
        await ledger.close()
        return held, await _read(down.url)

    try:
        held, entries = asyncio.run(scenario())
    finally:
        down.kill()
    assert set(held) == {2}, held  # t/a served and t/b cancelled, whatever the count of flushes
    assert [(e.tenant, e.requests) for e in entries] == [("t/a", 40), ("t/b", 20)]


async def _script_calls(url: str) -> int:
    """EVALSHA and EVAL calls Redis has run (INFO commandstats)."""
    client = redis_client.RespClient(url, timeout=2)
    try:
        info = (await client.call("INFO", "commandstats")).decode()
    finally:
        await client.close()
    calls = 0
    for line in info.splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
            calls += int(line.split("calls=")[1].split(",")[0])
    return calls


def test_requests_do_not_wait_for_the_ledger_and_it_lands_behind_them_in_few_writes(
    redis: Redis,
) -> None:
    """record() returns at once; within FLUSH_SECONDS the batch is in Redis without a close,
    summed, so 500 requests of one tenant cost a handful of script calls, not 500."""

    async def scenario() -> tuple[list[usage_layout.Entry], float, int]:
        ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())
        before = await _script_calls(redis.url)
        started = time.monotonic()
        for _ in range(500):
            ledger.record(
                tenant="t/a",
                model="m",
                pool="t/p",
                outcome="served",
                prompt_tokens=10,
                completion_tokens=2,
                now=NOW,
            )
            await asyncio.sleep(0)  # requests interleave with the writer, as they do in a gateway
        entries: list[usage_layout.Entry] = []
        while time.monotonic() - started < 5 and sum(e.requests for e in entries) < 500:
            await asyncio.sleep(0.05)
            entries = await _read(redis.url)
        landed_after = time.monotonic() - started
        writes = await _script_calls(redis.url) - before
        await ledger.close()
        return entries, landed_after, writes

    entries, landed_after, writes = asyncio.run(scenario())
    assert entries == [
        usage_layout.Entry(
            tenant="t/a",
            model="m",
            pool="t/p",
            outcome="served",
            requests=500,
            prompt_tokens=5000,
            completion_tokens=1000,
        )
    ]
    assert landed_after < usage_ledger.FLUSH_SECONDS + 1.5, landed_after
    assert 1 <= writes <= 4, writes  # one per flush interval that had entries


def test_entries_recorded_while_a_write_is_in_flight_land_once(redis: Redis) -> None:
    """A flush takes the batch and writes it entry by entry; what is recorded meanwhile (and
    what close() finds) goes with the next write: nothing lost, nothing counted twice."""

    def record_round(ledger: usage_ledger.UsageLedger) -> None:
        for i in range(1000):
            ledger.record(
                tenant=f"t/{i % 50}",  # 50 summed entries: 50 script calls in one flush
                model="m",
                pool="t/p",
                outcome="served",
                prompt_tokens=1,
                completion_tokens=1,
                now=NOW,
            )

    async def scenario() -> tuple[list[usage_layout.Entry], bool]:
        ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())
        record_round(ledger)
        writing = asyncio.create_task(ledger.flush())
        await asyncio.sleep(0)  # the flush runs up to its first Redis call: it holds the batch
        in_flight = not writing.done()
        record_round(ledger)
        await ledger.close()
        assert await writing
        return await _read(redis.url), in_flight

    entries, in_flight = asyncio.run(scenario())
    assert in_flight, "the second round must arrive while the first is being written"
    assert len(entries) == 50
    assert sum(e.requests for e in entries) == 2000
    assert {e.prompt_tokens for e in entries} == {40}


class AppliedButTimedOut:
    """The ledger's script, except that its first call is answered by a timeout after Redis ran
    it: what the client sees when the watchdog fails a write Redis then executes."""

    def __init__(self, script: redis_client.Script) -> None:
        self.script, self.armed = script, True

    async def __call__(self, keys: list[str], args: list[object]) -> object:
        answer = await self.script(keys, args)
        if self.armed:
            self.armed = False
            raise TimeoutError("redis did not answer in time")
        return answer


def _rounds(entries: list[usage_layout.Entry]) -> list[tuple[str, int, int]]:
    return [(e.tenant, e.requests, e.prompt_tokens) for e in entries]


def test_a_write_redis_ran_but_answered_late_counts_once(redis: Redis) -> None:
    """The first write times out after Redis applied it: retried under its id, it is skipped;
    what was recorded after the failure is not merged into it (that would be skipped too) but
    written as a new entry."""

    async def scenario() -> list[usage_layout.Entry]:
        ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())
        _record_mix(ledger)
        assert ledger._script is not None
        ledger._script = AppliedButTimedOut(ledger._script)  # type: ignore[assignment]
        assert not await ledger.flush()
        _record_mix(ledger)  # the same labels again, after the failure
        assert await ledger.flush()
        await ledger.close()
        return await _read(redis.url)

    assert _rounds(asyncio.run(scenario())) == [("t/a", 4, 300), ("t/b", 2, 6000)]


def test_the_record_script_applies_an_entry_id_once(redis: Redis) -> None:
    async def scenario() -> list[usage_layout.Entry]:
        client = redis_client.RespClient(redis.url, timeout=2)
        script = redis_client.Script(client, usage_layout.RECORD_LUA)
        key = usage_layout.hour_key(NOW)
        entry = usage_layout.Entry(
            tenant="t/a", model="m", pool="t/p", outcome="served", requests=3
        )
        args: list[object] = [usage_layout.RETENTION_SECONDS, "t/a", int(NOW.timestamp())]
        args += [x for pair in usage_layout.fields(entry) for x in pair]
        try:
            for once in ("one", "one", "two"):
                await script([key, usage_layout.LAST_USED_KEY, usage_layout.once_key(once)], args)
        finally:
            await client.close()
        return await _read(redis.url)

    assert [e.requests for e in asyncio.run(scenario())] == [6]


def test_a_ledger_outlives_an_event_loop(redis: Redis) -> None:
    """asyncio.run ends and cancels the writer (and the connection's loop is gone): the next
    loop's records get a new writer, and close() writes what the dead one left."""
    ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())

    async def first() -> None:
        _record_mix(ledger)
        assert await ledger.flush()  # connected in this loop
        _record_mix(ledger)  # left pending when the loop ends

    async def second() -> tuple[list[usage_layout.Entry], list[usage_layout.Entry]]:
        _record_mix(ledger)
        landed: list[usage_layout.Entry] = []
        deadline = time.monotonic() + usage_ledger.FLUSH_SECONDS + 2
        while time.monotonic() < deadline and sum(e.requests for e in landed) < 9:
            await asyncio.sleep(0.05)
            landed = await _read(redis.url)
        await ledger.close()
        return landed, await _read(redis.url)

    asyncio.run(first())
    landed, closed = asyncio.run(second())
    assert _rounds(landed) == _rounds(closed) == [("t/a", 6, 450), ("t/b", 3, 9000)]


def test_a_dead_writer_is_replaced_and_close_still_flushes(redis: Redis) -> None:
    async def scenario() -> tuple[list[usage_layout.Entry], list[usage_layout.Entry]]:
        ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())
        _record_mix(ledger)
        writer = ledger._writer
        assert writer is not None
        writer.cancel()  # dies as a BaseException would kill it
        await asyncio.sleep(0)
        assert writer.done()
        _record_mix(ledger)
        await asyncio.sleep(usage_ledger.FLUSH_SECONDS + 0.5)
        landed = await _read(redis.url)
        _record_mix(ledger)
        ledger._writer = writer  # dead again at close
        await ledger.close()
        return landed, await _read(redis.url)

    landed, closed = asyncio.run(scenario())
    assert _rounds(landed) == [("t/a", 4, 300), ("t/b", 2, 6000)]
    assert _rounds(closed) == [("t/a", 6, 450), ("t/b", 3, 9000)]


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tokenfleet.cli", "usage", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


HOUR = datetime.datetime(2026, 11, 30, 9, tzinfo=datetime.UTC)  # a whole, closed hour
WINDOW = ("--since", "1h", "--until", "2026-11-30T10:00:00Z")


def test_tokenfleet_usage_reports_the_ledger_with_cost(redis: Redis, tmp_path: Path) -> None:
    async def record() -> None:
        ledger = usage_ledger.UsageLedger(redis.url, registry=CollectorRegistry())
        now = HOUR + datetime.timedelta(minutes=20)
        ledger.record(
            tenant="t/a",
            model="m",
            pool="t/p",
            outcome="served",
            prompt_tokens=36_000_000,
            completion_tokens=1_800_000,
            now=now,
        )
        ledger.record(
            tenant="t/b",
            model="m",
            pool="t/p",
            outcome="cancelled",
            prompt_tokens=3_600_000,
            completion_tokens=360_000,
            now=now,
        )
        await ledger.close()

    asyncio.run(record())
    plain = json.loads(_cli("--redis", redis.url, *WINDOW, "-o", "json"))
    assert [(r["tenant"], r["outcome"], r["prompt_tokens"]) for r in plain] == [
        ("t/a", "served", 36_000_000),
        ("t/b", "cancelled", 3_600_000),
    ]
    only_b = json.loads(_cli("--redis", redis.url, *WINDOW, "--tenant", "t/b", "-o", "json"))
    assert [r["tenant"] for r in only_b] == ["t/b"]
    # The hand-computed case of tests/unit/test_cost.py through the ledger: 2 GPU-hours at
    # 2.00, benched 10k prompt / 1k output tokens per second → a 3.00, b 0.40, idle 0.60.
    png = tmp_path / "cost.png"
    priced = json.loads(
        _cli(
            "--redis",
            redis.url,
            *WINDOW,
            "-o",
            "json",
            "--cost",
            "--price",
            "t/p=2.0:1:10000:1000",
            "--ready-gpus",
            "t/p=2.0",
            "--plot",
            str(png),
        )
    )
    by_tenant = {r["tenant"]: r for r in priced}
    assert by_tenant["t/a"]["cost"] == pytest.approx(3.0)
    assert by_tenant["t/a"]["per_request"] == pytest.approx(3.0)
    assert (
        by_tenant["t/b"]["cost"] == pytest.approx(0.4) and by_tenant["t/b"]["per_request"] is None
    )
    assert by_tenant["(idle)"]["cost"] == pytest.approx(0.6)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = _cli(
        "--redis",
        redis.url,
        *WINDOW,
        "--cost",
        "--price",
        "t/p=2.0:1:10000:1000",
        "--ready-gpus",
        "t/p=2.0",
    )
    assert table.splitlines()[0].split()[:3] == ["TENANT", "MODEL", "OUTCOME"]
