"""Watch events only prompt a sooner reconcile pass; they decide nothing themselves."""

from __future__ import annotations

from typing import Any

import kopf

from tokenfleet.api.base import API_GROUP, API_VERSION
from tokenfleet.operator.handlers.indexes import WORKERS
from tokenfleet.operator.loop import Reconciler


def _ready(status: kopf.Status) -> bool:
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@kopf.on.event(API_GROUP, API_VERSION, "inferencepools")
@kopf.on.event(API_GROUP, API_VERSION, "modeldeployments")
@kopf.on.event(API_GROUP, API_VERSION, "tenants")
def on_tokenfleet_object(*, memo: Any, **_: Any) -> None:
    reconciler: Reconciler = memo.reconciler
    reconciler.indexes_ready.set()  # kopf calls handlers only once its indexes are filled
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
