"""A ModelDeployment's status, decided from values (pure).

A pool runs one model: when several ModelDeployments list the same pool, the oldest claim
(creation time, then name) wins and the others are told so, without retry storms.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.operator import desired, observed, reporting
from tokenfleet.operator.reporting import Event, condition


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A ModelDeployment's claim on a pool; sorts oldest first."""

    created: str
    name: str

    def key(self) -> tuple[str, str]:
        return (self.created, self.name)


def winner(claims: Sequence[Claim]) -> Claim | None:
    return min(claims, key=Claim.key) if claims else None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelInputs:
    """Everything a ModelDeployment's status depends on."""

    namespace: str
    name: str
    generation: int | None
    spec: ModelDeploymentSpec
    status: Mapping[str, Any]
    existing_pools: frozenset[str]
    pool_owner: Mapping[str, str]  # pool → name of the ModelDeployment that won it
    pods: Sequence[observed.WorkerPod]  # worker pods of this model's pools
    now: datetime.datetime


def _availability(inputs: ModelInputs, ready: int) -> tuple[str, bool, str, str]:
    """(phase, available, reason, message) of a ModelDeployment."""
    spec = inputs.spec
    missing = [p for p in spec.pools if p not in inputs.existing_pools]
    taken = {
        p: inputs.pool_owner[p]
        for p in spec.pools
        if p in inputs.pool_owner and inputs.pool_owner[p] != inputs.name
    }
    if missing:
        return (
            "Pending",
            False,
            "PoolNotFound",
            f"InferencePool {reporting.names(missing)} does not "
            f"exist in namespace {inputs.namespace}; create it or fix spec.pools",
        )
    if len(taken) == len(spec.pools):
        owners = reporting.names(sorted(f"{p} (by {m})" for p, m in taken.items()))
        return (
            "Pending",
            False,
            "PoolClaimed",
            f"every pool is already running another model: "
            f"{owners}; a pool runs one model, so point spec.pools at a free pool",
        )
    if ready > 0:
        return ("Available", True, "ReplicasReady", f"{ready} replicas ready")
    return ("Progressing", False, "ReplicasStarting", "no replica is ready yet")


def plan_model(inputs: ModelInputs) -> tuple[dict[str, Any], list[Event]]:
    """New status and the events its changes deserve."""
    spec, now, gen = inputs.spec, inputs.now, inputs.generation
    revision = desired.revision_of(spec)
    ready = sum(1 for p in inputs.pods if p.revision == revision and p.ready and not p.terminating)
    phase, available, reason, message = _availability(inputs, ready)
    old_conditions = inputs.status.get("conditions", []) or []
    conditions = [
        condition(
            old_conditions,
            type="Available",
            status=available,
            reason=reason,
            message=message,
            now=now,
            generation=gen,
        ),
        condition(
            old_conditions,
            type="Progressing",
            status=phase == "Progressing",
            reason="ReplicasStarting" if phase == "Progressing" else phase,
            message=message,
            now=now,
            generation=gen,
        ),
        condition(
            old_conditions,
            type="Verified",
            status=False,
            reason="NotChecked",
            message="artifact signatures are not verified yet by this operator version",
            now=now,
            generation=gen,
        ),
    ]
    status = {
        "observedGeneration": gen,
        "phase": phase,
        "stableRevision": revision,
        "canaryRevision": "",
        "canaryStep": 0,
        "revisions": [
            {
                "name": revision,
                "digest": spec.artifact.digest,
                "verified": False,
                "signer": "",
                "readyReplicas": ready,
                "weight": 100,
            }
        ],
        "conditions": conditions,
    }
    events = []
    problem = reporting.changed_to(old_conditions, conditions, "Available", "False")
    if problem and problem["reason"] in ("PoolNotFound", "PoolClaimed"):
        events.append(
            Event(type="Warning", reason=str(problem["reason"]), message=str(problem["message"]))
        )
    if reporting.changed_to(old_conditions, conditions, "Available", "True"):
        events.append(Event(type="Normal", reason="Available", message=message))
    return status, events
