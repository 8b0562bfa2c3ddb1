"""What a planned fleet costs at the sustained rate, warm idle floor included (pure).

The pool holds its peak fleet all the time (a short peak is over before a cold start ends), so
every figure divides the cost of the whole held fleet by what it carries at the *sustained*
rate: idle warm replicas are paid for, not hidden. Each per-unit figure is the whole cost over
that unit — alternative views of one bill, not parts to add up.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from tokenfleet.api.base import Model

SECONDS_PER_HOUR = 3600.0


class Cost(Model):
    """What the GPUs cost."""

    gpu_hour_price: float = Field(ge=0, description="Dollars per GPU-hour.")
    gpus_per_replica: int = Field(default=1, ge=1, description="GPUs one replica holds.")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sheet:
    """The bill of a held fleet at the sustained rate."""

    replicas: int  # held all the time
    idle_replicas: int  # held beyond the sustained plan: the warm floor for the peak
    gpus: int
    gpu_hour_price: float
    rps: float  # sustained
    success: float  # share of requests that succeed
    per_hour: float
    per_million_input_tokens: float
    per_million_output_tokens: float
    per_million_tokens: float  # input and output together
    per_successful_request: float


def _per(cost: float, units: float) -> float:
    return cost / units if units > 0 else float("inf")


def sheet(
    *,
    cost: Cost,
    replicas: int,
    beyond_sustained: int,
    rps: float,
    input_tokens: float,
    output_tokens: float,
    success: float,
) -> Sheet:
    """The bill of ``replicas`` carrying ``rps`` requests of ``input_tokens`` in and
    ``output_tokens`` out (means), of which a share ``success`` succeed."""
    gpus = replicas * cost.gpus_per_replica
    per_hour = gpus * cost.gpu_hour_price
    per_second = per_hour / SECONDS_PER_HOUR
    return Sheet(
        replicas=replicas,
        idle_replicas=beyond_sustained,
        gpus=gpus,
        gpu_hour_price=cost.gpu_hour_price,
        rps=rps,
        success=success,
        per_hour=per_hour,
        per_million_input_tokens=_per(per_second * 1e6, rps * input_tokens),
        per_million_output_tokens=_per(per_second * 1e6, rps * output_tokens),
        per_million_tokens=_per(per_second * 1e6, rps * (input_tokens + output_tokens)),
        per_successful_request=_per(per_second, rps * success),
    )


def lines(bill: Sheet) -> list[str]:
    """The bill as text lines."""
    return [
        f"cost at the sustained {bill.rps:,.0f} req/s, ${bill.gpu_hour_price:g}/GPU-hour, "
        f"{bill.replicas} replicas ({bill.gpus} GPUs) held, {bill.idle_replicas} of them the "
        "warm floor for the peak:",
        f"  ${bill.per_hour:,.2f} per hour",
        f"  ${bill.per_million_input_tokens:.4f} per million input tokens "
        f"(the whole cost over input tokens)",
        f"  ${bill.per_million_output_tokens:.4f} per million output tokens "
        f"(the whole cost over output tokens)",
        f"  ${bill.per_million_tokens:.4f} per million tokens, input and output together",
        f"  ${bill.per_successful_request:.6f} per successful request "
        f"({bill.success:.1%} succeed at the usable load level)",
    ]
