"""Tenant budgets shared by every gateway replica: reserve at admission, settle with real usage.

The decision is :func:`tokenfleet.accounting.budget.decide`; this shell keeps the period's count
in Redis (one key per tenant and period) with one Lua script whose arithmetic is
:class:`tokenfleet.accounting.budget.Tally`'s. For a Reject budget the check and the increment
are one atomic step, so two replicas never both take the last units; Downgrade and Notify budgets
always count (usage goes on) and act on the count they saw.

Without Redis the count is per process (:class:`~tokenfleet.accounting.budget.Tally`). With Redis
configured but not answering, the budget does what the quotas do (its declared
:class:`~tokenfleet.gateway.redis_backend.Failure`, ``--quota-failure``): open counts in this
process, as without Redis; closed refuses with 503 ``quota_backend_unavailable`` and a
Retry-After — never a 500. A hold taken in Redis whose settlement Redis does not answer keeps
its worst case counted (a budget errs toward refusing early, never toward overspending); one
taken in this process settles here.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Literal

from tokenfleet.accounting import budget
from tokenfleet.api.tenant import Budget
from tokenfleet.gateway import redis_backend
from tokenfleet.gateway.policy.rejections import Reason, Rejected

REDIS_TIMEOUT_SECONDS = redis_backend.TIMEOUT_SECONDS

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
    local: bool = False  # counted in this process (no Redis, or Redis down and failing open)


def failure_mode(failure: Literal["open", "closed"]) -> redis_backend.Failure:
    """The budget's declared behaviour while Redis is down: the quota's setting."""
    if failure == "closed":
        return redis_backend.Failure(
            store="budget", mode=redis_backend.Mode.CLOSED, effect="503 for tenants with one"
        )
    return redis_backend.Failure(
        store="budget", mode=redis_backend.Mode.OPEN, effect="counted in each process"
    )


CLOSED = redis_backend.Mode.CLOSED
#: A budget with Redis down and failing closed: the quotas' refusal, not a 500.
DOWN = Rejected(
    reason=Reason.QUOTA_BACKEND_DOWN,
    retry_after=redis_backend.RETRY_SECONDS,
    message="budget service unavailable; try again shortly",
)


class BudgetStore:
    """Budget counters in Redis (or per process without it)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        backend: redis_backend.Backend | None = None,
        failure: Literal["open", "closed"] = "open",
    ) -> None:
        """``backend``: the process's shared Redis (else one of its own on ``url``)."""
        self._owns_backend = backend is None
        self._backend = backend or redis_backend.Backend(url)
        self.failure = self._backend.declare(failure_mode(failure))
        self._script = self._backend.script(LUA) if self._backend.configured else None
        self._local: dict[str, budget.Tally] = {}

    async def reserve(
        self, *, tenant: str, spec: Budget, amount: int, now: datetime.datetime
    ) -> tuple[budget.Verdict, Held] | Rejected:
        """The verdict for a request costing ``amount`` units, and what it holds; Rejected
        when Redis does not answer and the budget fails closed."""
        period = budget.period_of(spec.period, now)
        k = key(tenant, period, "" if spec.tokens is not None else spec.currency)
        ttl = int((period.end - now).total_seconds()) + 3600  # outlives the period a little
        limit, hard = budget.limit_units(spec), spec.action == "Reject"
        counted = await self._shared(k, ["reserve", amount, limit, int(hard), ttl])
        if counted is None and self._backend.configured and self.failure.mode is CLOSED:
            return DOWN
        if counted is None:
            taken, used = self._local.setdefault(k, budget.Tally()).reserve(
                cost=amount, limit=limit, hard=hard
            )
        else:
            taken, used = counted
        verdict = budget.decide(budget=spec, used=used, cost=amount, now=now)
        held = Held(key=k, amount=amount if taken else 0, ttl=ttl, spec=spec, local=counted is None)
        return verdict, held

    async def settle(self, held: Held, *, used: int) -> int:
        """Correct the hold to what the request used; the period's count after (-1 when Redis
        did not answer: the hold stays counted)."""
        if not held.key or (held.amount == 0 and used == 0):
            return 0  # no budget, or refused: nothing was held
        delta = used - held.amount
        if held.local:
            tally = self._local.setdefault(held.key, budget.Tally())
            tally.settle(delta=delta)
            return tally.used
        counted = await self._shared(held.key, ["settle", delta, 0, 0, held.ttl])
        return -1 if counted is None else counted[1]

    async def _shared(self, k: str, args: list[str | int]) -> tuple[bool, int] | None:
        """The script's answer (taken, count); None without Redis or while it does not
        answer (the backend's health says which, and when to try again)."""
        if self._script is None or not self._backend.usable():
            return None
        try:
            reply = await self._script([k], list(args))
        except redis_backend.ERRORS as exc:
            self._backend.failed(exc)
            return None
        self._backend.answered()
        return bool(reply[0]), int(reply[1])

    async def close(self) -> None:
        if self._owns_backend:
            await self._backend.close()
