"""When a model's fallback takes a request (pure): the model has no ready replica, or no room.

A model names a fallback (a smaller model, another pool) to serve its callers while it cannot.
The request goes there

- at once, when the model has no ready replica and the fallback has one;
- after trying the model, when the model refused it for lack of room (:data:`NO_ROOM`) and the
  fallback has a ready replica.

A model with no ready replica anywhere, fallback included, holds the request for its own cold
start. A request that started on the model (even one whose upstream failed) stays with it.
"""

from __future__ import annotations

from tokenfleet.gateway.policy.rejections import Reason

#: Admission refusals that mean "no room on this model": its fallback may take the request.
NO_ROOM = frozenset(
    {
        Reason.NO_ENDPOINTS,
        Reason.QUEUE_FULL,
        Reason.QUEUE_TIMEOUT,
        Reason.DEADLINE_UNMEETABLE,
        Reason.SHED,
    }
)
#: Why a request went straight to the fallback (a metric label, like the reasons' values).
NOT_READY = "no_endpoints"


def first(*, model_ready: bool, fallback_ready: bool) -> str | None:
    """Before trying the model: why the fallback takes the request at once, or None."""
    return NOT_READY if fallback_ready and not model_ready else None


def after(refused: Reason, *, fallback_ready: bool) -> str | None:
    """The model refused a request that never started: why the fallback takes it, or None."""
    return refused.value if refused in NO_ROOM and fallback_ready else None
