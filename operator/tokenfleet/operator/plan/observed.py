"""Actual state, from the operator's indexes, as small typed values (pure).

The index functions below turn watched objects into compact records; the reconciler reads the
records, never raw objects, and never polls the API server.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from tokenfleet.api import base, labels
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import verify_step
from tokenfleet.operator.plan.desired import APPLIED_HASH
from tokenfleet.operator.policy import zones
from tokenfleet.signing import verdict


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerPod:
    """A worker pod, as placement and status need it."""

    name: str
    zone: str
    revision: str
    ready: bool
    terminating: bool
    unschedulable_since: datetime.datetime | None
    created: datetime.datetime | None = None
    #: The artifact verdict as written (JSON, tokenfleet.signing.verdict): the verify init
    #: container's termination message (plan.verify_step); "" before any.
    verdict: str = ""
    #: Where its engine answers (http://podIP:port), "" before it has an IP: the golden-set
    #: replay asks the revision's pods directly.
    address: str = ""
    #: Its controller.kubernetes.io/pod-deletion-cost as set ("" when none).
    deletion_cost: str = ""
    #: The trust fingerprint a re-verification restarted it for (tokenfleet.io/trust-
    #: fingerprint, from its template); "" for a pod no such restart made.
    trust: str = ""
    #: Its engine container's image (the container named vllm): only an image of the image
    #: policy counts toward Verified (plan.model_status), verdict or not.
    image: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSet:
    """A worker Deployment the operator made (one per pool, zone and revision)."""

    name: str
    zone: str
    revision: str
    replicas: int
    applied_hash: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """A node: labels, readiness and allocatable resources."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    allocatable: Mapping[str, str]


def _time(text: str | None) -> datetime.datetime | None:
    return base.from_rfc3339(text) if text else None


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def worker_pod(obj: Mapping[str, Any]) -> WorkerPod:
    meta = obj["metadata"]
    scheduled = _condition(obj, "PodScheduled")
    unschedulable = (
        scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    )
    return WorkerPod(
        name=meta["name"],
        zone=meta.get("labels", {}).get(labels.ZONE, ""),
        revision=meta.get("labels", {}).get(labels.REVISION, ""),
        ready=_condition(obj, "Ready").get("status") == "True",
        terminating=bool(meta.get("deletionTimestamp")),
        unschedulable_since=_time(scheduled.get("lastTransitionTime")) if unschedulable else None,
        created=_time(meta.get("creationTimestamp")),
        verdict=_verdict_text(obj),
        address=_address(obj),
        deletion_cost=(meta.get("annotations") or {}).get(
            "controller.kubernetes.io/pod-deletion-cost", ""
        ),
        trust=str((meta.get("annotations") or {}).get(labels.TRUST_FINGERPRINT, "")),
        image=next(
            (
                str(c.get("image", ""))
                for c in obj.get("spec", {}).get("containers", []) or []
                if c.get("name") == "vllm"
            ),
            "",
        ),
    )


def _address(obj: Mapping[str, Any]) -> str:
    """The engine's URL, from the pod IP and the container port named http (vLLM's 8000 if
    none is named: the gateway reads pods the same way)."""
    ip = obj.get("status", {}).get("podIP")
    if not ip:
        return ""
    ports = [
        p.get("containerPort")
        for c in obj.get("spec", {}).get("containers", []) or []
        for p in c.get("ports", []) or []
        if p.get("name") == "http"
    ]
    return f"http://{ip}:{ports[0] if ports else 8000}"


def _verdict_text(obj: Mapping[str, Any]) -> str:
    """The verdict the kubelet recorded: the verify init container's termination message (its
    current run, else the last one: a refusal it is retrying). Pods rendered before the verify
    step had its own container fall back to the engine container's message, read for refusals
    only (a pass never went there); a refusal from an earlier run of a container that is Ready
    now is stale.
    Annotations are not read: anyone who may patch the pod may write them."""
    statuses = obj.get("status", {})
    for status in statuses.get("initContainerStatuses", []) or []:
        if status.get("name") == verify_step.CONTAINER:
            for state in (status.get("state") or {}, status.get("lastState") or {}):
                message = (state.get("terminated") or {}).get("message", "")
                if message.startswith("{"):
                    return str(message)
            return ""
    for status in statuses.get("containerStatuses", []) or []:
        earlier = {} if status.get("ready") else status.get("lastState") or {}
        for state in (status.get("state") or {}, earlier):
            message = str((state.get("terminated") or {}).get("message", ""))
            found = verdict.parse(message) if message.startswith("{") else None
            if found is not None and not found.verified:
                return message
    return ""


def worker_set(obj: Mapping[str, Any]) -> WorkerSet:
    meta = obj["metadata"]
    return WorkerSet(
        name=meta["name"],
        zone=meta.get("labels", {}).get(labels.ZONE, ""),
        revision=meta.get("labels", {}).get(labels.REVISION, ""),
        replicas=int(obj.get("spec", {}).get("replicas") or 0),
        applied_hash=meta.get("annotations", {}).get(APPLIED_HASH, ""),
    )


def node_record(obj: Mapping[str, Any]) -> NodeRecord:
    return NodeRecord(
        name=obj["metadata"]["name"],
        labels=dict(obj["metadata"].get("labels", {})),
        ready=_condition(obj, "Ready").get("status") == "True",
        allocatable=dict(obj.get("status", {}).get("allocatable", {})),
    )


def _quantity(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def offers(node: NodeRecord, pool: InferencePoolSpec) -> bool:
    """Whether a node could host one of the pool's replicas: its labels match, and a GPU pool's
    node has the GPUs (a CPU pool needs none; the scheduler judges cores and memory)."""
    accel = pool.accelerator
    wanted_labels = dict(accel.node_selector)
    if accel.product:
        wanted_labels[labels.GPU_PRODUCT] = accel.product
    gpus = accel.kind == "CPU" or (
        _quantity(node.allocatable.get(accel.resource_name, "0")) >= accel.count
    )
    return (
        all(node.labels.get(k) == v for k, v in wanted_labels.items())
        and gpus
        and pool.zones.topology_key in node.labels
    )


def zone_nodes(nodes: Iterable[NodeRecord], pool: InferencePoolSpec) -> list[zones.Node]:
    key = pool.zones.topology_key
    return [
        zones.Node(
            name=n.name,
            zone=n.labels.get(key, ""),
            ready=n.ready,
            offers_accelerator=offers(n, pool),
        )
        for n in nodes
    ]


def unschedulable_since(pods: Iterable[WorkerPod]) -> dict[str, datetime.datetime]:
    """Zone → when its oldest still-unschedulable worker pod became unschedulable."""
    out: dict[str, datetime.datetime] = {}
    for pod in pods:
        if pod.unschedulable_since is not None and not pod.terminating:
            out[pod.zone] = min(out.get(pod.zone, pod.unschedulable_since), pod.unschedulable_since)
    return out


def ready_by_zone(pods: Iterable[WorkerPod], revision: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in pods:
        if pod.revision == revision and pod.ready and not pod.terminating:
            out[pod.zone] = out.get(pod.zone, 0) + 1
    return out


def replicas_by_zone(sets: Iterable[WorkerSet], revision: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sets:
        if s.revision == revision:
            out[s.zone] = out.get(s.zone, 0) + s.replicas
    return out


def starting(
    pods: Iterable[WorkerPod], revision: str, *, now: datetime.datetime, within: float
) -> int:
    """Pods of ``revision`` not Ready yet but younger than ``within`` seconds (still loading)."""
    return sum(
        1
        for p in pods
        if p.revision == revision
        and not p.ready
        and not p.terminating
        and p.created is not None
        and (now - p.created).total_seconds() < within
    )
