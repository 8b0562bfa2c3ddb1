"""The usage ledger's layout in Redis: one vocabulary for the gateway that writes it and the CLI
that reads it (pure: strings and numbers in and out). Its metric names are
:mod:`tokenfleet.signals.usage`.

Per UTC hour one hash, ``tf:u:h:<YYYYMMDDHH>``, counts settled requests:

    field  <tenant> \\x1f <model> \\x1f <pool> \\x1f <outcome> \\x1f <counter>   value  integer

with counter one of :data:`COUNTERS` and outcome one of :data:`OUTCOMES`. Hours make reports of
any window (``--since 24h``) and time series (cost per tenant per hour) a sum of whole hashes,
and a restart loses nothing: a request's usage is in Redis (HINCRBY, one atomic script) before
the gateway lets go of it. ``tf:u:last`` maps a tenant to its last settled request (epoch s).
Hashes expire after :data:`RETENTION_SECONDS`, longer than the longest budget period. Each write
carries an id, and ``tf:u:once:<id>`` (kept :data:`ONCE_SECONDS`) marks it applied, so that a
write sent again because its answer was lost is not counted twice.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping

OUTCOMES = ("served", "cancelled", "failed", "shed")
COUNTERS = ("requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")
SEP = "\x1f"  # ASCII unit separator: never in a Kubernetes name or a served model name
LAST_USED_KEY = "tf:u:last"
RETENTION_SECONDS = 400 * 86400  # 13 months: a monthly report a year back, and the running month
#: How long a write's id is remembered. A write is retried at the next flush (0.5 s) unless
#: Redis is away, so this only has to outlast an outage; kept short because every write
#: leaves one key (a busy replica writes tens a second). A retry later than this may count twice.
ONCE_SECONDS = 900


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One settled request, or the sum of many with the same labels."""

    tenant: str
    model: str
    pool: str
    outcome: str
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def labels(self) -> tuple[str, str, str, str]:
        return (self.tenant, self.model, self.pool, self.outcome)


def hour_key(moment: datetime.datetime) -> str:
    """The hash of the hour ``moment`` falls in."""
    return "tf:u:h:" + moment.astimezone(datetime.UTC).strftime("%Y%m%d%H")


def hour_keys(since: datetime.datetime, until: datetime.datetime) -> list[str]:
    """Every hour hash from ``since``'s hour to ``until``'s, oldest first."""
    start = since.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)
    keys, at = [], start
    while at <= until:
        keys.append(hour_key(at))
        at += datetime.timedelta(hours=1)
    return keys


def fields(entry: Entry) -> list[tuple[str, int]]:
    """(field, increment) pairs that add ``entry`` to an hour hash; zero counts left out."""
    head = SEP.join(entry.labels)
    values = (
        entry.requests,
        entry.prompt_tokens,
        entry.cached_prompt_tokens,
        entry.completion_tokens,
    )
    return [(f"{head}{SEP}{c}", v) for c, v in zip(COUNTERS, values, strict=True) if v]


def entries(hashes: Iterable[Mapping[str, int]]) -> list[Entry]:
    """Hour hashes read back, summed per (tenant, model, pool, outcome), sorted."""
    totals: dict[tuple[str, str, str, str], dict[str, int]] = {}
    for h in hashes:
        for field, value in h.items():
            parts = field.split(SEP)
            if len(parts) != 5 or parts[4] not in COUNTERS:
                continue  # not ours: a newer layout's field is skipped, never misread
            labels = (parts[0], parts[1], parts[2], parts[3])
            counts = totals.setdefault(labels, dict.fromkeys(COUNTERS, 0))
            counts[parts[4]] += int(value)
    return [
        Entry(tenant=t, model=m, pool=p, outcome=o, **counts)
        for (t, m, p, o), counts in sorted(totals.items())
    ]


def once_key(write_id: str) -> str:
    """The key that marks the write ``write_id`` applied, for :data:`ONCE_SECONDS`."""
    return "tf:u:once:" + write_id


#: One atomic write: KEYS = hour hash, last-used hash, the write's :func:`once_key`; ARGV =
#: retention, tenant, epoch, then field/increment pairs. The whole entry lands or none of it,
#: and once per write id: a write sent again (its answer was lost) returns 0 and adds nothing.
RECORD_LUA = (
    """
if not redis.call('SET', KEYS[3], 1, 'NX', 'EX', """
    + str(ONCE_SECONDS)
    + """) then return 0 end
for i = 4, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if tonumber(ARGV[3]) > last then redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]) end
return 1
"""
)
