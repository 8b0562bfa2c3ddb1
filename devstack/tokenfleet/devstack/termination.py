"""Graceful deletion of a simulated worker pod, the way a kubelet does it.

When a worker pod gets its deletionTimestamp (the API server sets it to the request time plus
the pod's grace period), the node agent hands its simulator here: run the container's preStop
(the worker image's drain — ``python3 -m tokenfleet.worker.drain`` — is run in-process against
the simulator's metrics, a ``sleep`` preStop is slept), then SIGTERM, SIGKILL at the grace
deadline, and last delete the pod object with grace 0 (a kubelet's "containers are gone").
Without this, a scaled-in or rolled-back pod cut its streams at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from typing import Any

from tokenfleet.devstack import processes
from tokenfleet.kubeapi import ApiError, KubeApi, Obj
from tokenfleet.worker import drain

log = logging.getLogger("tokenfleet.devstack.termination")

DRAIN_MODULE = "tokenfleet.worker.drain"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PreStop:
    """The engine container's preStop, as the node agent can honour it."""

    drain_seconds: float | None = None  # the drain hook's --max-seconds
    sleep_seconds: float = 0.0


def pre_stop(pod: Obj) -> PreStop:
    """What the pod's engine container asks for before SIGTERM (pure)."""
    for container in pod.get("spec", {}).get("containers", []):
        hook = (container.get("lifecycle") or {}).get("preStop") or {}
        command = [str(c) for c in (hook.get("exec") or {}).get("command", [])]
        if DRAIN_MODULE in command:
            bound = (
                command[command.index("--max-seconds") + 1] if "--max-seconds" in command else 600
            )
            return PreStop(drain_seconds=float(bound))
        if "sleep" in hook:
            return PreStop(sleep_seconds=float(hook["sleep"].get("seconds", 0)))
    return PreStop()


def remaining_grace(pod: Obj, now: datetime.datetime) -> float:
    """Seconds until the grace deadline (the deletionTimestamp), at least 0 (pure)."""
    stamp = pod.get("metadata", {}).get("deletionTimestamp")
    if not stamp:
        return 0.0
    deadline = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return max(0.0, (deadline - now).total_seconds())


async def delete_now(api: KubeApi, pod: Obj) -> None:
    """Remove the pod object (grace 0, this uid only): its containers are gone."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    body: dict[str, Any] = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    try:
        await api.call("DELETE", path, body=body)
    except ApiError as exc:
        if exc.status not in (404, 409):  # gone already, or a new pod of the same name
            raise


async def terminate(
    *, api: KubeApi, pod: Obj, child: processes.Child, server: asyncio.Server, url: str
) -> None:
    """preStop, SIGTERM, SIGKILL at the deadline, delete; logs how long each part took."""
    started = time.monotonic()
    grace = remaining_grace(pod, datetime.datetime.now(datetime.UTC))
    hook = pre_stop(pod)
    how = "none"
    if hook.drain_seconds is not None:
        done = await asyncio.to_thread(
            drain.drain,
            read=drain.reader(f"{url}/metrics"),
            clock=time.monotonic,
            sleep=time.sleep,
            max_seconds=min(hook.drain_seconds, grace),
            interval=0.2,
        )
        how = f"drain {done.reason}"
    elif hook.sleep_seconds:
        await asyncio.sleep(min(hook.sleep_seconds, grace))
        how = f"sleep {hook.sleep_seconds:g} s"
    drained = time.monotonic() - started
    left = max(0.0, grace - drained)
    await asyncio.to_thread(processes.stop, [child], grace_seconds=left)
    server.close()
    await delete_now(api, pod)
    meta = pod["metadata"]
    log.info(
        "terminated %s/%s: preStop (%s) %.1f s, then stopped in %.1f s (grace %.0f s)",
        meta["namespace"],
        meta["name"],
        how,
        drained,
        time.monotonic() - started - drained,
        grace,
    )


class Terminations:
    """The node agent's pods being deleted gracefully: one task each, children kept so that a
    node agent stopping mid-drain still stops them."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._children: dict[str, processes.Child] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._tasks

    def start(
        self, pod: Obj, *, child: processes.Child | None, server: asyncio.Server | None, url: str
    ) -> None:
        """Terminate gracefully; a pod without a running engine is only deleted."""
        uid = pod["metadata"]["uid"]
        if child is None or server is None:
            work = delete_now(self._api, pod)
        else:
            self._children[uid] = child
            work = terminate(api=self._api, pod=pod, child=child, server=server, url=url)
        task = asyncio.create_task(work)
        self._tasks[uid] = task
        task.add_done_callback(lambda t: self._done(uid, t))

    def _done(self, uid: str, task: asyncio.Task[None]) -> None:
        self._tasks.pop(uid, None)
        self._children.pop(uid, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("graceful deletion of pod %s failed: %r", uid, task.exception())

    def close(self) -> list[processes.Child]:
        """Cancel every termination; the children still to stop."""
        for task in self._tasks.values():
            task.cancel()
        return list(self._children.values())
