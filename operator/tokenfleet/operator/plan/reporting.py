"""Status building blocks (pure): conditions that keep their transition time, and events."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Literal

Status = dict[str, Any]


def timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A Kubernetes Event the shell should post about the object."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def condition(
    old: Iterable[Mapping[str, Any]],
    *,
    type: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime.datetime,
    generation: int | None,
) -> dict[str, Any]:
    """A condition; its lastTransitionTime moves only when its status changes."""
    text = "True" if status else "False"
    previous = next((c for c in old if c.get("type") == type), None)
    since = (
        previous.get("lastTransitionTime") if previous and previous.get("status") == text else None
    )
    return {
        "type": type,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or timestamp(now),
        "observedGeneration": generation,
    }


def find(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    return next((c for c in conditions if c.get("type") == kind), {})


def changed_to(
    old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]], kind: str, status: str
) -> Mapping[str, Any] | None:
    """The new condition ``kind`` if it just became ``status`` or changed reason while so."""
    before, after = find(old, kind), find(new, kind)
    if after.get("status") != status:
        return None
    if before.get("status") == status and before.get("reason") == after.get("reason"):
        return None
    return after


def names(items: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    listed = list(items)
    if len(listed) <= 1:
        return "".join(listed)
    return ", ".join(listed[:-1]) + " and " + listed[-1]
