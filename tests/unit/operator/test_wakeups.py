"""Watch events wake a reconcile pass for what someone changed, not for the operator's own
status writes (which, under traffic, would otherwise prompt pass after pass)."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from tokenfleet.operator.handlers import wakeups


def tenant(generation: int = 1, requests: int = 0, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "t", "uid": "u1", "generation": generation, **meta},
        "spec": {"allowedModels": ["*"]},
        "status": {"usage": {"requests": requests}},
    }


def reconciler() -> Any:
    return types.SimpleNamespace(
        wake=asyncio.Event(), indexes_ready=asyncio.Event(), seen_intent={}
    )


def event(r: Any, body: dict[str, Any], kind: str | None = None) -> bool:
    """Deliver one event; whether it woke the loop."""
    r.wake.clear()
    wakeups.on_tokenfleet_object(
        memo=types.SimpleNamespace(reconciler=r), uid="u1", body=body, type=kind
    )
    return r.wake.is_set()


def test_a_status_update_does_not_wake_but_a_spec_or_annotation_change_does() -> None:
    r = reconciler()
    assert event(r, tenant(), None)  # the first sight of an object (kopf's initial listing)
    assert r.indexes_ready.is_set()
    assert not event(r, tenant(requests=5), "MODIFIED")  # the operator's own status write
    assert event(r, tenant(generation=2, requests=5), "MODIFIED")  # spec changed
    assert not event(r, tenant(generation=2, requests=9), "MODIFIED")
    assert event(r, tenant(generation=2, annotations={"a": "b"}), "MODIFIED")
    assert event(r, tenant(generation=2, annotations={"a": "b"}, deletionTimestamp="x"), None)
    assert event(r, tenant(generation=2), "DELETED")
    assert r.seen_intent == {}
    assert event(r, tenant(generation=2), "ADDED")  # re-created with the same uid: seen anew


def test_intent_ignores_status_and_bookkeeping_fields() -> None:
    a = tenant(requests=1, resourceVersion="10", managedFields=[{"manager": "x"}])
    b = tenant(requests=2, resourceVersion="11", managedFields=[{"manager": "y"}])
    assert wakeups.intent(a) == wakeups.intent(b)
    assert wakeups.intent(a) != wakeups.intent(tenant(labels={"team": "x"}))
