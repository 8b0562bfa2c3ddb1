"""Which workers a scale-in removes first (pure): the least loaded.

A ReplicaSet that scales down deletes the pods with the lowest
``controller.kubernetes.io/pod-deletion-cost`` first. The operator sets it from each worker's
in-flight generations (``vllm:num_requests_running``), so a scale-in drains the workers that
have the least to finish: shorter drains, fewer streams held open by leaving pods. A worker
without a reading gets the highest cost seen (never removed ahead of one known to be idle on
a guess); costs are whole numbers, as the annotation requires.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: The annotation the ReplicaSet controller reads (an int32 as a string).
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: Cost per in-flight request; whole requests are what the annotation can tell apart.
PER_REQUEST = 1


def costs(pods: Sequence[str], running: Mapping[str, float]) -> dict[str, int]:
    """Pod name → deletion cost from its running requests (unknown: the highest known)."""
    known = [round(running[p] * PER_REQUEST) for p in pods if p in running]
    ceiling = max(known, default=0)
    return {p: round(running[p] * PER_REQUEST) if p in running else ceiling for p in pods}


def changed(current: Mapping[str, str], wanted: Mapping[str, int]) -> dict[str, str]:
    """Only the annotations that differ from what the pods carry (each is one API call)."""
    return {pod: str(cost) for pod, cost in wanted.items() if current.get(pod) != str(cost)}
