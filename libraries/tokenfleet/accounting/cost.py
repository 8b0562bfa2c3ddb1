"""What a pool's GPU-hours cost each tenant: the allocation rule behind ``tokenfleet usage --cost``
(pure).

It is part of what ``InferencePool.spec.cost`` *means*, and every runtime that reads the field
must agree on it: the CLI reports with it, the operator writes ``Tenant.status.usage.cost`` with
it, and the gateway prices currency budgets with it. The gateway must not import the fleet tools
and the operator must not import the gateway, so it lives on the floor all three stand on,
:mod:`tokenfleet.accounting`, just over the API types it gives meaning to.

The rule, per pool and report window:

1. **What was paid.** ``gpu_hours`` (ready replicas × accelerators per replica, integrated over
   the window: every ready GPU is paid for, busy or warm-idle) × ``spec.cost.perGpuHour``.
2. **What each usage line occupied.** A line is (tenant, model, outcome). Its GPU-seconds are
   its uncached prompt tokens ÷ the replica's benched prompt rate plus its completion tokens ÷
   the benched generation rate, × accelerators per replica (``autoscaling.target*PerReplica``,
   from ``tokenfleet bench replica``). Cached prompt tokens skip prefill, so they cost nothing.
3. **Warm idle** is what was paid minus what the lines occupied: its own line (tenant
   ``(idle)``), never spread silently over the tenants. If the lines occupied more than was paid
   (the benched rates are pessimistic for this traffic), they are scaled down in proportion so
   the lines sum to what was paid and idle is 0.
4. **Failed, cancelled and shed work** keeps its own lines (by outcome): it used GPUs, and who
   caused it is known. Only ``served`` lines count in the cost per successful request.
5. **No benched rates** (both targets 0): GPU time is split by token work with the fair
   scheduler's weights (prompt 1, output 2, as :mod:`~tokenfleet.gateway.policy.fairness`
   charges), and no idle line can be told apart.

The per-token price a currency budget is charged (:func:`rate_of`) is the pool's explicit
``spec.cost.perMillionInputTokens`` / ``perMillionOutputTokens`` when set — a chargeback rate is
a business decision (it may include margin, idle capacity, support), not something to measure —
and otherwise :func:`list_price`, step 2 at full utilisation: what a token costs when the replica
runs at its benched rate. A pool with neither has no per-token price: its tokens cost a currency
budget nothing (it is left out of cost reports too), which ``docs/tenants.md`` says.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from tokenfleet.api.pool import InferencePoolSpec

IDLE = "(idle)"
#: Token-work weights when there are no benched rates: the fair scheduler's (prompt 1, output 2).
PROMPT_WORK, OUTPUT_WORK = 1.0, 2.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolPrice:
    """One pool's price and its replica's benched rates (0: not benched)."""

    per_gpu_hour: float
    gpus_per_replica: int = 1
    prompt_tokens_per_second: float = 0.0
    output_tokens_per_second: float = 0.0
    currency: str = "USD"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Settled usage of one (tenant, model, outcome) in one pool."""

    tenant: str
    model: str
    outcome: str  # served | cancelled | failed | shed
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CostLine:
    """One line of the report: a usage line's share of the pool's cost, or the idle line."""

    tenant: str
    model: str
    outcome: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    gpu_hours: float
    cost: float
    per_million_input: float | None  # cost of the prompt part per million prompt tokens
    per_million_output: float | None
    per_request: float | None  # served lines only


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Rate:
    """Currency per million prompt and per million output tokens."""

    input_per_million: float
    output_per_million: float
    currency: str = "USD"


def list_price(price: PoolPrice) -> Rate | None:
    """Per-token price at full utilisation of a benched replica; None without benched rates."""
    if price.prompt_tokens_per_second <= 0 or price.output_tokens_per_second <= 0:
        return None
    per_gpu_second = price.per_gpu_hour * price.gpus_per_replica / 3600
    return Rate(
        input_per_million=1e6 * per_gpu_second / price.prompt_tokens_per_second,
        output_per_million=1e6 * per_gpu_second / price.output_tokens_per_second,
        currency=price.currency,
    )


def rate_of(spec: InferencePoolSpec) -> Rate | None:
    """The pool's price per million prompt and output tokens: the explicit one, else the list
    price from perGpuHour and the benched rates; None when the pool has neither."""
    c = spec.cost
    if c is None:
        return None
    if c.per_million_input_tokens is not None and c.per_million_output_tokens is not None:
        return Rate(
            input_per_million=c.per_million_input_tokens,
            output_per_million=c.per_million_output_tokens,
            currency=c.currency,
        )
    a = spec.autoscaling
    return list_price(
        PoolPrice(
            per_gpu_hour=c.per_gpu_hour,
            gpus_per_replica=spec.accelerator.count,
            prompt_tokens_per_second=a.target_prompt_tokens_per_second_per_replica,
            output_tokens_per_second=a.target_generation_tokens_per_second_per_replica,
            currency=c.currency,
        )
    )


def _occupied(usage: Usage, price: PoolPrice) -> tuple[float, float]:
    """(prompt, output) GPU-hours a line occupied (rule 2), or token work without rates."""
    uncached = max(0, usage.prompt_tokens - usage.cached_prompt_tokens)
    if list_price(price) is None:
        return PROMPT_WORK * uncached, OUTPUT_WORK * usage.completion_tokens
    gpus = price.gpus_per_replica / 3600
    return (
        gpus * uncached / price.prompt_tokens_per_second,
        gpus * usage.completion_tokens / price.output_tokens_per_second,
    )


def _per_million(cost: float, tokens: int) -> float | None:
    return cost * 1e6 / tokens if tokens else None


def allocate(*, usage: Sequence[Usage], price: PoolPrice, gpu_hours: float) -> list[CostLine]:
    """The pool's cost over a window, split by the module's rule; lines sum to what was paid."""
    parts = [_occupied(u, price) for u in usage]
    occupied = sum(p + o for p, o in parts)
    benched = list_price(price) is not None
    # Hours per unit of occupation: 1 with benched rates (scaled down if over), else by work.
    if benched:
        scale = min(1.0, gpu_hours / occupied) if occupied > 0 else 1.0
    else:
        scale = gpu_hours / occupied if occupied > 0 else 0.0
    lines = []
    for u, (p, o) in zip(usage, parts, strict=True):
        p_cost = p * scale * price.per_gpu_hour
        o_cost = o * scale * price.per_gpu_hour
        lines.append(
            CostLine(
                tenant=u.tenant,
                model=u.model,
                outcome=u.outcome,
                requests=u.requests,
                prompt_tokens=u.prompt_tokens,
                completion_tokens=u.completion_tokens,
                gpu_hours=(p + o) * scale,
                cost=p_cost + o_cost,
                per_million_input=_per_million(p_cost, u.prompt_tokens),
                per_million_output=_per_million(o_cost, u.completion_tokens),
                per_request=(p_cost + o_cost) / u.requests
                if u.outcome == "served" and u.requests
                else None,
            )
        )
    idle = gpu_hours - sum(line.gpu_hours for line in lines)
    if idle > 1e-12 and (benched or not lines):
        lines.append(_idle_line(idle, price))
    return lines


def _idle_line(hours: float, price: PoolPrice) -> CostLine:
    return CostLine(
        tenant=IDLE,
        model="",
        outcome="idle",
        requests=0,
        prompt_tokens=0,
        completion_tokens=0,
        gpu_hours=hours,
        cost=hours * price.per_gpu_hour,
        per_million_input=None,
        per_million_output=None,
        per_request=None,
    )


def charge(*, prompt_tokens: int, completion_tokens: int, rate: Rate) -> float:
    """What a request costs at ``rate`` (currency)."""
    return (
        prompt_tokens * rate.input_per_million + completion_tokens * rate.output_per_million
    ) / 1e6


MICRO = 1_000_000  # micro-units per currency unit: budgets and status count whole micro-units


def micro(*, prompt_tokens: int, completion_tokens: int, rate: Rate) -> int:
    """What tokens cost at ``rate``, in micro-units: a price per million tokens is exactly
    micro-units per token, so ``prompt × input + completion × output``, rounded up (never free
    once priced; rounded to 6 places first so float noise, 0.1 + 0.2, does not add a unit)."""
    exact = prompt_tokens * rate.input_per_million + completion_tokens * rate.output_per_million
    return math.ceil(round(exact, 6))


def money(amount: int, currency: str) -> str:
    """``amount`` micro-units as text: 12.40 USD, 0.000328 USD (2 to 6 decimals, exact)."""
    whole, part = divmod(amount, MICRO)
    decimals = f"{part:06d}".rstrip("0").ljust(2, "0")
    return f"{whole}.{decimals} {currency}"


def priced(
    tokens: Mapping[str, tuple[int, int]], rates: Mapping[str, Rate | None]
) -> dict[str, int]:
    """Currency → micro-units that (prompt, completion) tokens per pool cost at each pool's
    rate; an unpriced pool is left out."""
    out: dict[str, int] = {}
    for pool, (prompt, completion) in sorted(tokens.items()):
        rate = rates.get(pool)
        if rate is not None:
            cost = micro(prompt_tokens=prompt, completion_tokens=completion, rate=rate)
            out[rate.currency] = out.get(rate.currency, 0) + cost
    return out
