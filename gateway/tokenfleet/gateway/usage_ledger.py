"""The durable usage ledger: every settled request's usage, by tenant, model, pool and outcome.

:meth:`UsageLedger.record` is the one entry point, called once per request where the request
path settles (served, cancelled, failed or shed). It counts the Prometheus counters at once (and
sets the tenant's last-served gauge, which ``Tenant.status.lastUsed`` is read from) and adds the
entry to an in-memory batch, summed per (hour, tenant, model, pool, outcome); a background task
writes the batch to Redis (layout: :mod:`tokenfleet.accounting.usage_layout`) every
:data:`FLUSH_SECONDS`, one atomic script per summed entry. So a request never waits for the
ledger, and a busy replica writes a few entries a second, not one per request.

What can be lost: a process killed without its shutdown (SIGKILL, OOM) loses at most the last
:data:`FLUSH_SECONDS` of entries; a stopped gateway flushes in :meth:`UsageLedger.close`. When
Redis does not answer (the ledger's declared failure mode: buffer and replay, on the process's
one :class:`~tokenfleet.gateway.redis_backend.Backend`), the batch stays in memory (bounded:
:data:`MAX_PENDING` summed entries, new ones dropped and counted in ``dropped`` beyond that)
and goes with the next write that succeeds. Prometheus counts every request either way.

Nothing is counted twice: a write that timed out may still have run in Redis, so each summed
entry gets an id when it is first written, the script applies an id once
(``usage_layout.once_key``, remembered ``usage_layout.ONCE_SECONDS``), and an entry that failed
is tried again as it was —
same id, same sums, ahead of the fresh batch; what was recorded since goes in a new entry. The
writer task is started again whenever it is gone (an event loop that ended, an error that
killed it), and :meth:`UsageLedger.close` flushes whatever it left.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid

from prometheus_client import CollectorRegistry, Counter, Gauge

from tokenfleet.accounting import usage_layout
from tokenfleet.gateway import redis_backend, redis_client
from tokenfleet.gateway.metrics import memoized
from tokenfleet.signals import usage

log = logging.getLogger("tokenfleet.gateway.usage")
REDIS_TIMEOUT_SECONDS = 0.5
FLUSH_SECONDS = 0.5  # the most a killed process can lose; a few Redis writes a second at most
MAX_PENDING = 100_000  # summed entries held while Redis is away (hours × label sets): ~20 MB
LABELS = ["tenant", "model", "pool", "outcome"]
FAILURE = redis_backend.Failure(
    store="usage ledger",
    mode=redis_backend.Mode.BUFFER,
    effect="entries wait in memory, written once each when Redis is back",
)

#: A batch: (hour key, labels) -> the summed entry and the latest settlement time in it.
_Batch = dict[tuple[str, tuple[str, str, str, str]], tuple[usage_layout.Entry, int]]
#: A write tried and to try again: (hour key, write id, entry, latest settlement time), fixed
#: once first tried — Redis applies an id once, so its content must not change.
_Write = tuple[str, str, usage_layout.Entry, int]


def _merged(
    batch: _Batch, key: tuple[str, tuple[str, str, str, str]], entry: usage_layout.Entry, at: int
) -> None:
    held = batch.get(key)
    if held is None:
        batch[key] = (entry, at)
        return
    summed, last = held
    batch[key] = (
        # not dataclasses.replace: this runs once a request, and replace is slow
        usage_layout.Entry(
            tenant=summed.tenant,
            model=summed.model,
            pool=summed.pool,
            outcome=summed.outcome,
            requests=summed.requests + entry.requests,
            prompt_tokens=summed.prompt_tokens + entry.prompt_tokens,
            cached_prompt_tokens=summed.cached_prompt_tokens + entry.cached_prompt_tokens,
            completion_tokens=summed.completion_tokens + entry.completion_tokens,
        ),
        max(last, at),
    )


class UsageLedger:
    """Counters and the Redis ledger of one gateway process."""

    def __init__(
        self,
        url: str | None = None,
        *,
        registry: CollectorRegistry,
        backend: redis_backend.Backend | None = None,
    ) -> None:
        """``backend``: the process's shared Redis (else one of its own on ``url``)."""
        self._owns_backend = backend is None
        self._backend = backend or redis_backend.Backend(url)
        self.failure = self._backend.declare(FAILURE)
        self._script = (
            self._backend.script(usage_layout.RECORD_LUA) if self._backend.configured else None
        )
        self._pending: _Batch = {}
        self._retry: list[_Write] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # what the connection and lock use
        self._lock = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None  # the writer's: close() cuts its wait short
        self._closing = False
        self._hour = (-1, "")
        self._failing = False
        self.dropped = 0
        self._counters = {
            "requests": Counter(
                usage.USAGE_REQUESTS, "Settled requests.", LABELS, registry=registry
            ),
            "prompt_tokens": Counter(
                usage.USAGE_PROMPT_TOKENS,
                "Prompt tokens of settled requests.",
                LABELS,
                registry=registry,
            ),
            "cached_prompt_tokens": Counter(
                usage.USAGE_CACHED_PROMPT_TOKENS,
                "Prompt tokens served from the engine's prefix cache.",
                LABELS,
                registry=registry,
            ),
            "completion_tokens": Counter(
                usage.USAGE_COMPLETION_TOKENS,
                "Completion tokens of settled requests.",
                LABELS,
                registry=registry,
            ),
        }

        self._last_served = Gauge(
            usage.USAGE_LAST_SERVED,
            "Unix time this replica last served the tenant (a served request settled).",
            ["tenant"],
            registry=registry,
        )
        for metric in (*self._counters.values(), self._last_served):
            memoized(metric)

    def record(
        self,
        *,
        tenant: str,
        model: str,
        pool: str,
        outcome: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_prompt_tokens: int = 0,
        now: datetime.datetime | None = None,
    ) -> None:
        """Count one settled request; never raises, never waits (usage must not slow or fail a
        request)."""
        entry = usage_layout.Entry(
            tenant=tenant,
            model=model,
            pool=pool,
            outcome=outcome if outcome in usage_layout.OUTCOMES else "failed",
            requests=1,
            prompt_tokens=max(0, prompt_tokens),
            cached_prompt_tokens=max(0, cached_prompt_tokens),
            completion_tokens=max(0, completion_tokens),
        )
        for name, counter in self._counters.items():
            value = getattr(entry, name)
            if value or name == "requests":
                counter.labels(*entry.labels).inc(value)
        at = now or datetime.datetime.now(datetime.UTC)
        if entry.outcome == "served":
            self._last_served.labels(tenant).set(at.timestamp())
        if self._script is None:
            return
        stamp = int(at.timestamp())
        key = (self._hour_key(stamp, at), entry.labels)
        if key not in self._pending and len(self._pending) + len(self._retry) >= MAX_PENDING:
            self.dropped += 1
            return
        _merged(self._pending, key, entry, stamp)
        writer = self._writer
        if (writer is None or writer.done()) and not self._closing:
            self._start_writer()

    def _start_writer(self) -> None:
        """A writer in the running loop (none without one: close() flushes)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._wake = asyncio.Event()
        self._writer = loop.create_task(self._write_behind(self._wake))

    def _hour_key(self, stamp: int, at: datetime.datetime) -> str:
        """usage_layout.hour_key, formatted once an hour rather than once a request."""
        hour = stamp // 3600
        if self._hour[0] != hour:
            self._hour = (hour, usage_layout.hour_key(at))
        return self._hour[1]

    async def _write_behind(self, wake: asyncio.Event) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), FLUSH_SECONDS)
            try:
                await self.flush()
            except Exception:  # a bug here must not stop the ledger for good
                log.exception("usage ledger: flush failed")

    def _bind(self) -> None:
        """The lock belongs to one event loop; a ledger may outlive its first (asyncio.run
        twice): the next one gets its own (and the backend a connection of its own)."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()

    async def flush(self) -> bool:
        """Write every pending entry; False when Redis did not take them all (those stay)."""
        if self._script is None:
            return True
        self._bind()
        script = self._script
        async with self._lock:  # one writer, so every entry lands exactly once
            retried, self._retry = self._retry, []  # failed before: first, as they were
            writes = retried + [
                (k[0], uuid.uuid4().hex, e, t) for k, (e, t) in self._pending.items()
            ]
            self._pending = {}
            done, lost_answer = 0, True
            try:
                for hour, write_id, entry, at in writes:
                    args: list[str | int] = [usage_layout.RETENTION_SECONDS, entry.tenant, at]
                    for field, value in usage_layout.fields(entry):
                        args += [field, value]
                    await script(
                        [hour, usage_layout.LAST_USED_KEY, usage_layout.once_key(write_id)], args
                    )
                    done += 1
            except redis_backend.ERRORS as exc:
                lost_answer = not isinstance(exc, redis_client.NotSent)
                self._backend.failed(exc)
                if not self._failing:
                    log.warning("usage ledger: redis unavailable (%s); entries wait", exc)
                self._failing = True
                return False
            finally:
                self._requeue(writes[done:], retried, lost_answer=lost_answer)
        if writes:
            self._backend.answered()
        if self._failing:
            log.info("usage ledger: redis is back; the entries that waited are written")
        self._failing = False
        return True

    def _requeue(
        self, unwritten: list[_Write], retried: list[_Write], *, lost_answer: bool
    ) -> None:
        """What a flush did not write. The write that failed with its answer lost may have run:
        it is tried again under its id, never merged with what came since (Redis would skip
        that part with it), as are earlier such writes. The rest were never sent: back into the
        batch, summed with what came since, so an outage costs memory per label set, not per
        flush."""
        again = {w[1] for w in retried}
        if unwritten and lost_answer:
            again.add(unwritten[0][1])
        for write in unwritten:
            hour, write_id, entry, at = write
            if write_id in again:
                self._retry.append(write)
            else:
                _merged(self._pending, (hour, entry.labels), entry, at)

    async def close(self) -> None:
        """Let the writer finish its last flush, if it still runs; flush; close the connection."""
        self._closing = True
        writer = self._writer
        if (
            writer is not None
            and not writer.done()
            and writer.get_loop() is asyncio.get_running_loop()
        ):
            if self._wake is not None:
                self._wake.set()
            try:
                await writer
            except asyncio.CancelledError:  # the writer was cancelled, not close()
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
        if self._backend.configured:
            await self.flush()  # rebinds the lock (and the backend's connection) if need be
        if self._owns_backend:
            await self._backend.close()


async def read(
    client: redis_client.RespClient, *, since: datetime.datetime, until: datetime.datetime
) -> list[tuple[str, list[usage_layout.Entry]]]:
    """(hour key, entries) for every hour hash in the window: what reports are built from."""
    out = []
    for key in usage_layout.hour_keys(since, until):
        flat = await client.call("HGETALL", key)
        pairs = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat or []), 2)}
        if pairs:
            out.append((key, usage_layout.entries([pairs])))
    return out
