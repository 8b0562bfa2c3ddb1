"""What the node agent writes about a pod: its readiness and, when it cannot start the pod's
engine, a Warning Event, as a kubelet would (pure: values in, API bodies out)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

#: The Ready reason of a worker pod whose address the agent cannot listen on.
CANNOT_LISTEN = "CannotListen"


def readiness_patch(pod: Obj, *, ready: bool, reason: str, now: str, message: str = "") -> Obj:
    """The status patch that sets ContainersReady and Ready (and each container's ``ready``)."""
    status = "True" if ready else "False"
    extra = {"message": message} if message else {}
    return {
        "conditions": [
            {"type": t, "status": status, "reason": reason, "lastTransitionTime": now, **extra}
            for t in ("ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {**c, "ready": ready} for c in pod.get("status", {}).get("containerStatuses", [])
        ],
    }


#: The worker pod's verify init container (tokenfleet.operator.plan.verify_step); its
#: termination message is the verdict the operator reads.
VERIFY_CONTAINER = "verify"
#: The worker entrypoint's exit code for a refused artifact (tokenfleet.worker.entrypoint).
EXIT_UNVERIFIED = 3


def verify_step_patch(pod: Obj, *, message: str, verified: bool, now: str) -> Obj | None:
    """The status a kubelet leaves once the pod's verify init container has run: its verdict
    as the termination message, exit 0 on a pass (and the pod Initialized), else exit 3. None
    for a pod without that init container (made by hand: it has nowhere to record one)."""
    init = pod.get("spec", {}).get("initContainers", []) or []
    if not any(c.get("name") == VERIFY_CONTAINER for c in init):
        return None
    terminated = {
        "exitCode": 0 if verified else EXIT_UNVERIFIED,
        "reason": "Completed" if verified else "Error",
        "message": message,
        "startedAt": now,
        "finishedAt": now,
    }
    existing = {s.get("name"): s for s in pod.get("status", {}).get("initContainerStatuses", [])}
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": terminated},
        }
        if c.get("name") == VERIFY_CONTAINER
        else existing.get(c["name"], {"name": c["name"], "image": c.get("image", "")})
        for c in init
    ]
    initialized = {
        "type": "Initialized",
        "status": "True" if verified else "False",
        "lastTransitionTime": now,
        **({} if verified else {"reason": "ContainersNotInitialized"}),
    }
    return {"initContainerStatuses": statuses, "conditions": [initialized]}


def warning_event(pod: Obj, *, reason: str, message: str, now: str, source: str) -> Obj:
    """A core/v1 Warning Event about ``pod`` (what `kubectl describe pod` shows)."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": "Warning",
        "reason": reason,
        "message": message,
        "source": {"component": source, "host": pod.get("spec", {}).get("nodeName", "")},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def cannot_listen_message(address: str, error: str) -> str:
    """Why the pod's engine cannot start: its address is taken (by another pod or process)."""
    return (
        f"cannot listen on {address}: {error}; another pod or process holds this address, "
        "the engine is retried with back-off"
    )
