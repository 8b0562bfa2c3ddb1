"""A Tenant's status, decided from values (pure).

The operator may not read Secrets, so the number of keys comes from the annotation that
`tokenfleet tenant create-key` keeps on the Tenant.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pydantic

from tokenfleet.api import labels
from tokenfleet.api.tenant import TenantStatus
from tokenfleet.operator.plan.reporting import Event, changed_to, condition


def _old_status(raw: Mapping[str, Any] | None) -> TenantStatus | None:
    """Status as the previous pass wrote it; unreadable status starts over."""
    try:
        return TenantStatus.model_validate(dict(raw)) if raw else None
    except pydantic.ValidationError:
        return None


def plan_tenant(
    *, body: Mapping[str, Any], now: datetime.datetime
) -> tuple[TenantStatus, list[Event]]:
    """New status and the events its changes deserve."""
    meta = body["metadata"]
    old = _old_status(body.get("status"))
    old_conditions = old.conditions if old else []
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
    ready = condition(
        old_conditions,
        type="Ready",
        status=verdict[0],
        reason=verdict[1],
        message=verdict[2],
        now=now,
        generation=meta.get("generation"),
    )
    status = TenantStatus(
        observed_generation=meta.get("generation"), key_count=keys, conditions=[ready]
    )
    events = []
    if changed_to(old_conditions, status.conditions, "Ready", "True"):
        events.append(Event(type="Normal", reason="KeysPresent", message=verdict[2]))
    return status, events
