"""A Tenant's status, decided from values (pure).

The operator may not read Secrets, so the number of keys comes from the annotation that
`tokenfleet tenant create-key` keeps on the Tenant.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from tokenfleet.api import labels
from tokenfleet.operator.plan.reporting import Event, changed_to, condition


def plan_tenant(
    *, body: Mapping[str, Any], now: datetime.datetime
) -> tuple[dict[str, Any], list[Event]]:
    """New status and the events its changes deserve."""
    meta = body["metadata"]
    old = body.get("status") or {}
    text = (meta.get("annotations") or {}).get(labels.API_KEY_COUNT, "0")
    keys = int(text) if text.isdigit() else 0
    if keys:
        verdict = (True, "KeysPresent", f"{keys} API key(s); callers may use the allowed models")
    else:
        verdict = (
            False,
            "NoKeys",
            f"no API keys yet: run `tokenfleet tenant create-key "
            f"{meta['name']} -n {meta['namespace']}`",
        )
    conditions = [
        condition(
            old.get("conditions", []) or [],
            type="Ready",
            status=verdict[0],
            reason=verdict[1],
            message=verdict[2],
            now=now,
            generation=meta.get("generation"),
        )
    ]
    status = {
        "observedGeneration": meta.get("generation"),
        "keyCount": keys,
        "conditions": conditions,
    }
    events = []
    if changed_to(old.get("conditions", []) or [], conditions, "Ready", "True"):
        events.append(Event(type="Normal", reason="KeysPresent", message=verdict[2]))
    return status, events
