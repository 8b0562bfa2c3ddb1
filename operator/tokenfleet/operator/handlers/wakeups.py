"""Watch events only prompt a sooner reconcile pass; they decide nothing themselves."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import kopf

from tokenfleet.api.base import API_GROUP, API_VERSION
from tokenfleet.operator.handlers.indexes import WORKERS
from tokenfleet.operator.loop import Reconciler


def _ready(status: kopf.Status) -> bool:
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def intent(body: Mapping[str, Any]) -> str:
    """What a pass must react to in one of our objects: its spec (the generation counts spec
    changes), labels, annotations and deletion, not its status. The operator writes status
    on every pass (a Tenant's usage changes with every request), so waking on status would
    make its own writes prompt pass after pass while traffic flows."""
    meta = body.get("metadata") or {}
    return json.dumps(
        [
            meta.get("generation"),
            meta.get("labels") or {},
            meta.get("annotations") or {},
            meta.get("deletionTimestamp"),
        ],
        sort_keys=True,
    )


@kopf.on.event(API_GROUP, API_VERSION, "inferencepools")
@kopf.on.event(API_GROUP, API_VERSION, "modeldeployments")
@kopf.on.event(API_GROUP, API_VERSION, "tenants")
@kopf.on.event(API_GROUP, API_VERSION, "modeladapters")
@kopf.on.event(API_GROUP, API_VERSION, "modelroutes")
def on_tokenfleet_object(
    *, memo: Any, uid: str, body: kopf.Body, type: str | None, **_: Any
) -> None:
    """Wake on a new, deleted or changed object; not on a status update (the timer covers
    status others write)."""
    reconciler: Reconciler = memo.reconciler
    reconciler.indexes_ready.set()  # kopf calls handlers only once its indexes are filled
    if type == "DELETED":
        reconciler.seen_intent.pop(uid, None)
        reconciler.wake.set()
        return
    seen = intent(body)
    if reconciler.seen_intent.get(uid) != seen:
        reconciler.seen_intent[uid] = seen
        reconciler.wake.set()


@kopf.on.event("nodes")
@kopf.on.event("pods", labels=WORKERS)
def on_readiness(*, memo: Any, uid: str, status: kopf.Status, type: str, **_: Any) -> None:
    """Wake when a node or worker pod changes readiness (not on every heartbeat)."""
    reconciler: Reconciler = memo.reconciler
    ready = None if type == "DELETED" else _ready(status)
    if reconciler.seen_ready.get(uid, "unseen") != ready:
        reconciler.seen_ready[uid] = ready
        reconciler.wake.set()
