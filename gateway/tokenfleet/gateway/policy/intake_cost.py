"""What a request body costs a gateway process's memory, and how much of it may be in flight
(pure: sizes and counts in, a new ledger or a refusal out).

A body is parsed into Python objects whole (``orjson.loads``), and those objects live until the
request ends: a 4 MiB body of tiny JSON values (``[{},{},...]`` in any field the gateway passes
through) became ~96 MiB of dicts, and a few dozen queued at once exhausted a 1 GiB pod
(issue 35). Two bounds close that, both decided before the parse:

- **per body**: at most :attr:`Limits.max_values` JSON values, counted by a scan of the bytes
  (C speed: ``bytes.count``; punctuation inside strings counts too, so the count is an upper
  bound and errs towards refusing);
- **in flight, per process**: every admitted body holds its estimated cost (:func:`estimate`)
  until its request ends; a tenant may hold at most :attr:`Limits.tenant_bytes` (429, retry),
  all tenants together :attr:`Limits.process_bytes` (503). The first hold is taken from the
  declared ``Content-Length`` before the body is read (so reading is bounded too), then shrunk
  to the body's real cost.

Measured amplification (``bench/intake_memory.py``): parsed objects take 8-24× the body's
bytes for value-dense JSON (36-82 B per value), ~1× for prose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tokenfleet.gateway.policy.rejections import Reason, Rejected

#: Bytes one parsed JSON value may take, with its slot in its container: measured 32 (float),
#: 36 (empty dict), 59 (short string), 82 (a chat message, per value) on CPython 3.11.
BYTES_PER_VALUE = 100
#: Copies of the body's bytes a request holds: the raw body (aiohttp keeps it), the strings
#: parsed out of it, and the engine's serialised body.
BODY_COPIES = 3
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds; defaults sized for two worker processes in the chart's 1 GiB gateway pod."""

    max_values: int = 131_072
    """JSON values per body: a 128k-token prompt sent as token ids (2^17) fits; a chat needs a
    few per message. Worst case ~13 MiB parsed, not ~96 MiB."""
    tenant_bytes: int = 64 * MIB
    """Estimated cost one tenant's bodies may hold in one process: ~20 ordinary 1 MiB bodies,
    or two worst-case 4 MiB ones."""
    process_bytes: int = 256 * MIB
    """Estimated cost all bodies may hold in one process (two per pod: 512 MiB of 1 GiB)."""


def values(body: bytes) -> int:
    """An upper bound on the JSON values in ``body``, keys included: each value after the first
    follows a comma or a colon or opens an object or array (punctuation inside strings counts
    too)."""
    return body.count(b",") + body.count(b":") + body.count(b"{") + body.count(b"[") + 1


def estimate(size: int, count: int) -> int:
    """Bytes a body of ``size`` bytes and ``count`` values holds while its request runs."""
    return BODY_COPIES * size + BYTES_PER_VALUE * count


def before_reading(declared: int, limits: Limits) -> int:
    """The cost held while a body of ``declared`` bytes (the size limit when it declared none) is
    read: the worst it can be, at most one value per two bytes (``1,``)."""
    return estimate(declared, min(limits.max_values, declared // 2 + 1))


def too_complex(count: int, limits: Limits) -> Rejected | None:
    """A body with more values than :attr:`Limits.max_values`: refused before it is parsed."""
    if count <= limits.max_values:
        return None
    return Rejected(
        reason=Reason.BODY_TOO_LARGE,
        message=f"the request body holds more than {limits.max_values} JSON values",
    )


@dataclasses.dataclass(frozen=True, slots=True)
class InFlight:
    """The estimated cost bodies hold in one process, per tenant (only those holding any)."""

    by_tenant: Mapping[str, int] = dataclasses.field(default_factory=dict)
    total: int = 0


def take(state: InFlight, *, tenant: str, cost: int, limits: Limits) -> InFlight | Rejected:
    """``state`` with ``cost`` more held by ``tenant``, or why it may not be."""
    held = state.by_tenant.get(tenant, 0)
    if held + cost > limits.tenant_bytes and held:  # one body alone is always let in
        return Rejected(
            reason=Reason.RATE_LIMITED,
            retry_after=1.0,
            message="too many large request bodies in flight for this key: retry shortly",
        )
    if state.total + cost > limits.process_bytes and state.total:
        return Rejected(
            reason=Reason.SHED,
            retry_after=1.0,
            message="the gateway holds too many large request bodies: retry shortly",
        )
    return InFlight({**state.by_tenant, tenant: held + cost}, state.total + cost)


def give_back(state: InFlight, *, tenant: str, cost: int) -> InFlight:
    """``state`` with ``cost`` of ``tenant``'s released."""
    left = state.by_tenant.get(tenant, 0) - cost
    by_tenant = {k: v for k, v in state.by_tenant.items() if k != tenant}
    if left > 0:
        by_tenant[tenant] = left
    return InFlight(by_tenant, max(0, state.total - cost))
