"""What ``Tenant.spec.budget`` decides for one request, and the budget's state (pure).

Shared by the gateway (which enforces it), the operator (which writes ``Tenant.status.budget``)
and the CLI, so it lives on the floor they all stand on, :mod:`tokenfleet.accounting`, beside
:mod:`~tokenfleet.accounting.cost`.

A budget counts *units* per period (a UTC day or month): tokens for a token budget, micro-units
of currency (1e-6, integers, so Redis counts them exactly) for a currency budget. It follows the
quotas' reserve/settle arithmetic: admission reserves the request's prompt plus ``max_tokens``
(priced, for currency), settlement adds what it really used minus what was reserved.

At the limit — when ``used + this request's reservation > limit`` — the action decides:

    ============  ======================================  ===========================
    action        this request                            reservation
    ============  ======================================  ===========================
    Reject        429, Retry-After = until the reset      not taken (the count stays)
    Downgrade     served by ``downgradeTo``, header says  taken (usage keeps counting)
    Notify        served as asked; BudgetExceeded set     taken
    ============  ======================================  ===========================

Reject never lets concurrent gateway replicas both take the last units: the check and the
increment are one Lua script in Redis (``tokenfleet.gateway.budget_store``), whose arithmetic is
:class:`Tally`'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Literal

from tokenfleet.accounting import cost
from tokenfleet.api.tenant import Budget, BudgetStatus

MICRO = cost.MICRO  # currency micro-units per unit


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Period:
    """One budget period, [start, end) in UTC."""

    start: datetime.datetime
    end: datetime.datetime

    @property
    def key(self) -> str:
        """Names the period in store keys: 2026-12 or 2026-12-01."""
        return self.start.strftime("%Y-%m-%d" if self.end - self.start <= _DAY else "%Y-%m")


_DAY = datetime.timedelta(days=1)


def period_of(period: Literal["Monthly", "Daily"], now: datetime.datetime) -> Period:
    """The period ``now`` falls in."""
    now = now.astimezone(datetime.UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "Daily":
        return Period(start=day, end=day + _DAY)
    start = day.replace(day=1)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Period(start=start, end=end)


def limit_units(budget: Budget) -> int:
    """The budget's limit in units (tokens, or currency micro-units)."""
    if budget.tokens is not None:
        return budget.tokens
    return round((budget.amount or 0.0) * MICRO)


def units(budget: Budget, *, tokens: int, currency: float) -> int:
    """A request's charge in the budget's units: its tokens, or its cost in micro-units."""
    return tokens if budget.tokens is not None else math.ceil(currency * MICRO)


def charge(
    budget: Budget, *, prompt_tokens: int, completion_tokens: int, rate: cost.Rate | None
) -> int:
    """What a request's tokens cost ``budget``, in its units.

    A token budget counts the tokens. A currency budget prices them at ``rate`` (the serving
    pool's, :func:`tokenfleet.accounting.cost.rate_of`): a price per million tokens is exactly
    micro-units per token, so the charge is :func:`tokenfleet.accounting.cost.micro`. An unpriced
    pool, or one priced in another currency (no exchange rate is known), charges 0.
    """
    if budget.tokens is not None:
        return prompt_tokens + completion_tokens
    if rate is None or rate.currency != budget.currency:
        return 0
    return cost.micro(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, rate=rate)


def text(budget: Budget, amount: int) -> str:
    """``amount`` units as a person reads them: 1200 tokens, or 12.40 USD (up to 6 decimals)."""
    if budget.tokens is not None:
        return f"{amount} tokens"
    return cost.money(amount, budget.currency)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What to do with one request."""

    serve: bool
    model: str | None = None  # the model to serve instead (Downgrade), else None
    exceeded: bool = False
    take: bool = True  # whether the reservation is counted
    retry_after: float | None = None  # seconds, Reject only
    message: str = ""


def decide(*, budget: Budget, used: int, cost: int, now: datetime.datetime) -> Verdict:
    """The verdict for a request costing ``cost`` units when ``used`` are spent this period."""
    limit = limit_units(budget)
    if used + cost <= limit:
        return Verdict(serve=True)
    period = period_of(budget.period, now)
    spent = f"{budget.period.lower()} budget of {_limit_text(budget)} is spent"
    match budget.action:
        case "Reject":
            reset = period.end.strftime("%Y-%m-%dT%H:%M:%SZ")
            return Verdict(
                serve=False,
                exceeded=True,
                take=False,
                retry_after=max(1.0, (period.end - now).total_seconds()),
                message=f"{spent}; it resets at {reset}",
            )
        case "Downgrade":
            return Verdict(
                serve=True,
                model=budget.downgrade_to,
                exceeded=True,
                message=f"{spent}; served by {budget.downgrade_to}",
            )
        case _:
            return Verdict(serve=True, exceeded=True, message=spent)


def _limit_text(budget: Budget) -> str:
    if budget.tokens is not None:
        return f"{budget.tokens} tokens"
    return f"{budget.amount:.2f} {budget.currency}"


def state(*, budget: Budget, used: int, now: datetime.datetime) -> BudgetStatus:
    """The budget's state for ``Tenant.status.budget``."""
    limit = limit_units(budget)
    period = period_of(budget.period, now)
    return BudgetStatus(
        state="Exhausted" if used >= limit else "WithinBudget",
        used_percent=min(999, used * 100 // max(1, limit)),
        resets_at=period.end.strftime("%Y-%m-%dT%H:%M:%SZ"),
        limit=text(budget, limit),
        spent=text(budget, used),
        remaining=text(budget, max(0, limit - used)),
    )


@dataclasses.dataclass(slots=True)
class Tally:
    """The budget store's arithmetic for one tenant and period, in memory (tests, fail-open)."""

    used: int = 0

    def reserve(self, *, cost: int, limit: int, hard: bool) -> tuple[bool, int]:
        """(taken, used before): a hard budget refuses what would pass the limit."""
        before = self.used
        if hard and before + cost > limit:
            return False, before
        self.used = before + cost
        return True, before

    def settle(self, *, delta: int) -> None:
        """Add what the request used beyond its reservation (negative: a refund)."""
        self.used = max(0, self.used + delta)
