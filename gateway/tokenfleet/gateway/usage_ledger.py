"""The durable usage ledger: every settled request's usage, by tenant, model, pool and outcome.

:meth:`UsageLedger.record` is the one entry point, called once per request where the request
path settles (served, cancelled, failed or shed). It counts the Prometheus counters at once (and
sets the tenant's last-served gauge, which ``Tenant.status.lastUsed`` is read from) and
writes the entry to Redis (layout: :mod:`tokenfleet.signals.usage`) in one atomic script, so a
gateway restart loses nothing that was recorded.

When Redis does not answer, entries wait in memory (bounded, oldest dropped first and counted in
``dropped``) and go with the next write that succeeds; only those can be lost by a restart
during an outage. Prometheus counts them either way.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging

from prometheus_client import CollectorRegistry, Counter, Gauge

from tokenfleet.gateway import redis_client
from tokenfleet.signals import usage

log = logging.getLogger("tokenfleet.gateway.usage")
REDIS_TIMEOUT_SECONDS = 0.5
MAX_PENDING = 100_000  # entries held while Redis is away: ~20 MB, minutes of a busy replica
LABELS = ["tenant", "model", "pool", "outcome"]


class UsageLedger:
    """Counters and the Redis ledger of one gateway process."""

    def __init__(self, url: str | None, *, registry: CollectorRegistry) -> None:
        self._redis = redis_client.RespClient(url, timeout=REDIS_TIMEOUT_SECONDS) if url else None
        self._script = redis_client.Script(self._redis, usage.RECORD_LUA) if self._redis else None
        self._pending: collections.deque[tuple[datetime.datetime, usage.Entry]] = collections.deque(
            maxlen=MAX_PENDING
        )
        self._lock = asyncio.Lock()
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

    async def record(
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
        """Count one settled request; never raises (usage must not fail a request)."""
        entry = usage.Entry(
            tenant=tenant,
            model=model,
            pool=pool,
            outcome=outcome if outcome in usage.OUTCOMES else "failed",
            requests=1,
            prompt_tokens=max(0, prompt_tokens),
            cached_prompt_tokens=max(0, cached_prompt_tokens),
            completion_tokens=max(0, completion_tokens),
        )
        for name, counter in self._counters.items():
            value = getattr(entry, name)
            if value or name == "requests":
                counter.labels(*entry.labels).inc(value)
        if entry.outcome == "served":
            self._last_served.labels(tenant).set(
                (now or datetime.datetime.now(datetime.UTC)).timestamp()
            )
        if self._script is None:
            return
        if len(self._pending) == MAX_PENDING:
            self.dropped += 1
        self._pending.append((now or datetime.datetime.now(datetime.UTC), entry))
        await self.flush()

    async def flush(self) -> bool:
        """Write every pending entry, oldest first; False when Redis did not take them all."""
        if self._script is None:
            return True
        async with self._lock:  # one writer, so entries land in order and exactly once
            while self._pending:
                at, entry = self._pending[0]
                args: list[str | int] = [usage.RETENTION_SECONDS, entry.tenant, int(at.timestamp())]
                for field, value in usage.fields(entry):
                    args += [field, value]
                try:
                    await self._script([usage.hour_key(at), usage.LAST_USED_KEY], args)
                except (redis_client.RespError, OSError, TimeoutError) as exc:
                    log.warning(
                        "usage ledger: redis unavailable (%s); %d pending", exc, len(self._pending)
                    )
                    return False
                self._pending.popleft()
        return True

    async def close(self) -> None:
        """Try a last flush, then close the connection."""
        if self._redis is not None:
            await self.flush()
            await self._redis.close()


async def read(
    client: redis_client.RespClient, *, since: datetime.datetime, until: datetime.datetime
) -> list[tuple[str, list[usage.Entry]]]:
    """(hour key, entries) for every hour hash in the window: what reports are built from."""
    out = []
    for key in usage.hour_keys(since, until):
        flat = await client.call("HGETALL", key)
        pairs = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat or []), 2)}
        if pairs:
            out.append((key, usage.entries([pairs])))
    return out
