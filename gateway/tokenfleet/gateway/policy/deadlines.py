"""A request's deadline: the client's header, capped by nothing but sense, or its class default."""

from __future__ import annotations

from tokenfleet.gateway.policy.rejections import Reason, Rejected

HEADER = "X-TokenFleet-Deadline-Ms"
#: A deadline further out than this is a typo, not a plan (1 hour, in milliseconds).
MAX_DEADLINE_MS = 3_600_000


def deadline(*, now: float, header: str | None, default_seconds: float) -> float | Rejected:
    """Absolute deadline (same clock as ``now``) from a relative header in milliseconds."""
    if header is None:
        return now + default_seconds
    try:
        ms = int(header)
    except ValueError:
        ms = -1
    if not 0 < ms <= MAX_DEADLINE_MS:
        return Rejected(
            reason=Reason.INVALID_REQUEST,
            param=HEADER,
            message=f"{HEADER} must be whole milliseconds between 1 and {MAX_DEADLINE_MS}",
        )
    return now + ms / 1000
