"""One object's part of a pass, guarded: an object being deleted is skipped (garbage collection
takes its children), and a failure is logged and retried next pass — one broken object never
stops the fleet's reconciliation."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from tokenfleet.operator import k8s

log = logging.getLogger("tokenfleet.operator")


async def guarded(body: dict[str, Any], work: Coroutine[Any, Any, None]) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        work.close()  # being deleted: garbage collection takes its children
        return
    try:
        await work
    except Exception as exc:  # one broken object must not stop the fleet's reconciliation
        if k8s.namespace_gone(exc):
            return
        log.exception(
            "reconciling %s %s/%s failed; retrying next pass",
            body["kind"],
            meta["namespace"],
            meta["name"],
        )
