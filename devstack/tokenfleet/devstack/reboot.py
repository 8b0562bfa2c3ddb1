"""A restart of the local stack is a reboot of its simulated nodes: the pods of the earlier run
are gone (their simulators died with the stack) and must leave the API before kwok starts.

kwok hands out pod IPs from the addresses it has handed out since it started. A pod of an
earlier run that it sees keeps an address kwok does not know it has (so kwok gives it to a new
pod), and deleting such a pod later makes kwok free that address while a new pod holds it: two
Running pods with one IP (issue #21). So the stack deletes them, waits until they are gone, and
only then starts kwok.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from tokenfleet.kubeapi import ApiError, KubeApi

log = logging.getLogger("tokenfleet.devstack")

TIMEOUT_SECONDS = 30.0  # pods without finalizers are gone at once; this bounds the others


def _path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


async def delete_earlier_pods(api: KubeApi, *, nodes: set[str]) -> list[str]:
    """Delete every pod on ``nodes`` (as a node reboot would; their controllers recreate them,
    Pending, with no IP yet) and wait until they are gone. Returns the pods still present after
    :data:`TIMEOUT_SECONDS` (finalizers someone else owns), which are logged as a warning."""
    listed = await api.call("GET", "/api/v1/pods")
    earlier = {
        p["metadata"]["uid"]: p
        for p in listed.get("items", [])
        if p.get("spec", {}).get("nodeName") in nodes
    }
    for pod in earlier.values():
        with contextlib.suppress(ApiError):
            await api.call("DELETE", _path(pod), body={"gracePeriodSeconds": 0})
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while earlier and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        listed = await api.call("GET", "/api/v1/pods")
        present = {p["metadata"]["uid"] for p in listed.get("items", [])}
        earlier = {uid: p for uid, p in earlier.items() if uid in present}
    left = [_path(p) for p in earlier.values()]
    if left:
        log.warning(
            "pods of an earlier run still present after %.0f s (their addresses may be handed "
            "out again): %s",
            TIMEOUT_SECONDS,
            ", ".join(left),
        )
    return left
