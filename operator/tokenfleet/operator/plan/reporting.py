"""Status building blocks (pure): conditions that keep their transition time, and events.

Conditions are :class:`tokenfleet.api.base.Condition` values; the loop turns a whole status
into its wire form once, when it writes it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from typing import Literal

from tokenfleet.api.base import Condition, rfc3339


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A Kubernetes Event the shell should post about the object."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def condition(
    old: Iterable[Condition],
    *,
    type: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime.datetime,
    generation: int | None,
) -> Condition:
    """A condition; its lastTransitionTime moves only when its status changes."""
    text: Literal["True", "False"] = "True" if status else "False"
    previous = find(old, type)
    since = previous.last_transition_time if previous and previous.status == text else None
    return Condition(
        type=type,
        status=text,
        reason=reason,
        message=message,
        last_transition_time=since or rfc3339(now),
        observed_generation=generation,
    )


def find(conditions: Iterable[Condition], kind: str) -> Condition | None:
    """The condition of type ``kind``, if there is one."""
    return next((c for c in conditions if c.type == kind), None)


def changed_to(
    old: Iterable[Condition], new: Iterable[Condition], kind: str, status: str
) -> Condition | None:
    """The new condition ``kind`` if it just became ``status`` or changed reason while so."""
    before, after = find(old, kind), find(new, kind)
    if after is None or after.status != status:
        return None
    if before is not None and before.status == status and before.reason == after.reason:
        return None
    return after


def names(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    listed = list(items)
    if len(listed) <= 1:
        return "".join(listed)
    return ", ".join(listed[:-1]) + " and " + listed[-1]
