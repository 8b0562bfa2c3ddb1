"""What a request may use and what it used (pure): the max_tokens it runs with, the tokens its
quota reserves, the tokens settled when it ends, and how it ended (metric and log labels).

The reservation is made before the request runs, from the prompt estimate of
:mod:`~tokenfleet.gateway.policy.bodies` and every token the request may generate; it is settled
with what the engine reported, or an estimate when it reported nothing.
"""

from __future__ import annotations

from tokenfleet.gateway.policy.rejections import Reason

#: Data events of a stream that carry no generated token, about two: the opening role delta and
#: the closing ``[DONE]``.
FRAMING_EVENTS = 2


def max_tokens(requested: int, *, cap: int | None) -> int:
    """The tenant's cap bounds the request's max_tokens (no cap, or 0: the request's own).

    A request that asked for more than its cap was refused already (bodies.check_limits);
    this bounds the default a request gets when it asks for nothing."""
    return min(requested, cap or requested)


def reservation(*, prompt_tokens: int, max_tokens: int) -> int:
    """Tokens the quota holds for a request while it runs: its prompt and all it may generate."""
    return prompt_tokens + max_tokens


def used(
    *,
    prompt_reported: int | None,
    completion_reported: int | None,
    prompt_estimate: int,
    events: int,
) -> tuple[int, int]:
    """(prompt, completion) tokens a served request used: the engine's usage report, else the
    prompt estimate and one token per stream event that carries one."""
    completion = (
        completion_reported if completion_reported is not None else max(0, events - FRAMING_EVENTS)
    )
    prompt = prompt_reported if prompt_reported is not None else prompt_estimate
    return prompt, completion


def ending(*, status: int, error: Reason | None) -> tuple[str, str]:
    """(outcome, reason) of a request that reached an engine: served, or failed and why."""
    if error is not None:
        return "failed", error.value
    if status >= 400:
        return "failed", f"upstream_{status}"
    return "served", ""
