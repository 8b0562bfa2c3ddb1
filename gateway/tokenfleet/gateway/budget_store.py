"""Tenant budgets shared by every gateway replica: reserve at admission, settle with real usage.

The decision is :func:`tokenfleet.api.budget.decide`; this shell keeps the period's count in
Redis (one key per tenant and period) with one Lua script whose arithmetic is
:class:`tokenfleet.api.budget.Tally`'s. For a Reject budget the check and the increment are one
atomic step, so two replicas never both take the last units; Downgrade and Notify budgets
always count (usage goes on) and act on the count they saw.

Without Redis the count is per process (:class:`~tokenfleet.api.budget.Tally`), as the quotas
fail open.
"""

from __future__ import annotations

import dataclasses
import datetime

from tokenfleet.api import budget
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import redis_client

REDIS_TIMEOUT_SECONDS = 0.5

# KEYS: the period's counter. ARGV: op (reserve | settle), amount, limit, hard (1 | 0), ttl s.
# reserve → {taken, used before}; settle → {1, used after} (never below 0).
LUA = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] == 'settle' then
  local after = math.max(0, used + amount)
  redis.call('SET', KEYS[1], after, 'EX', ARGV[5])
  return {1, after}
end
if ARGV[4] == '1' and used + amount > limit then return {0, used} end
redis.call('INCRBY', KEYS[1], amount)
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {1, used}
"""


def key(tenant: str, period: budget.Period, currency: str = "") -> str:
    """The counter of one tenant's period; the {tenant} hash tag keeps a tenant in one slot.
    A currency budget counts micro-units in a key of its own (``…:USD``), so a budget switched
    between tokens and an amount mid-period never reads the other's units."""
    return f"tf:b:{{{tenant}}}:{period.key}" + (f":{currency}" if currency else "")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """What a request holds against its tenant's budget until it settles."""

    key: str
    amount: int  # 0 when nothing was taken (refused)
    ttl: int
    spec: Budget | None = None  # the budget it counts against: settlement prices the usage


class BudgetStore:
    """Budget counters in Redis (or per process without it)."""

    def __init__(self, url: str | None) -> None:
        self._redis = redis_client.RespClient(url, timeout=REDIS_TIMEOUT_SECONDS) if url else None
        self._script = redis_client.Script(self._redis, LUA) if self._redis else None
        self._local: dict[str, budget.Tally] = {}

    async def reserve(
        self, *, tenant: str, spec: Budget, amount: int, now: datetime.datetime
    ) -> tuple[budget.Verdict, Held]:
        """The verdict for a request costing ``amount`` units, and what it holds."""
        period = budget.period_of(spec.period, now)
        k = key(tenant, period, "" if spec.tokens is not None else spec.currency)
        ttl = int((period.end - now).total_seconds()) + 3600  # outlives the period a little
        limit, hard = budget.limit_units(spec), spec.action == "Reject"
        if self._script is None:
            taken, used = self._local.setdefault(k, budget.Tally()).reserve(
                cost=amount, limit=limit, hard=hard
            )
        else:
            reply = await self._script([k], ["reserve", amount, limit, int(hard), ttl])
            taken, used = bool(reply[0]), int(reply[1])
        verdict = budget.decide(budget=spec, used=used, cost=amount, now=now)
        return verdict, Held(key=k, amount=amount if taken else 0, ttl=ttl, spec=spec)

    async def settle(self, held: Held, *, used: int) -> int:
        """Correct the hold to what the request used; the period's count after."""
        if not held.key or (held.amount == 0 and used == 0):
            return 0  # no budget, or refused: nothing was held
        delta = used - held.amount
        if self._script is None:
            tally = self._local.setdefault(held.key, budget.Tally())
            tally.settle(delta=delta)
            return tally.used
        reply = await self._script([held.key], ["settle", delta, 0, 0, held.ttl])
        return int(reply[1])

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.close()
