"""A ModelAdapter's status (pure): its verdict, whether it can be served, and where it is.

The operator verifies each adapter once per artifact digest and trust; the gateways ask a
worker to load only adapters this status calls verified for the current generation, and the
worker verifies again before its engine sees the files (docs/adapters.md).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from tokenfleet.api.adapter import ModelAdapterSpec, ModelAdapterStatus
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.operator.plan.reporting import Event, changed_to, condition

#: status.loadedOn lists at most this many pods (the count is exact).
MAX_LISTED_PODS = 64
#: Where an adapter is loaded and how much it served change with traffic: they are written at
#: most this often per adapter, so thousands of busy adapters do not each patch their status
#: (and wake every gateway's watch) on every reconcile pass. Verdicts and readiness go at once.
TRAFFIC_REFRESH_SECONDS = 30.0
_TRAFFIC_FIELDS = ("loaded_on", "loaded_replicas", "active_on", "requests_served")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What the operator's verification concluded (tokenfleet.signing's verdict, flattened)."""

    digest: str  # the spec digest it was run for
    reason: str  # tokenfleet.signing.verdict.Reason's value
    message: str = ""
    signer: str = ""

    @property
    def verified(self) -> bool:
        return self.reason == "Verified"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """What the gateways report of one adapter: the pods it is loaded on, requests served."""

    pods: tuple[str, ...] = ()
    requests: int = 0
    active: tuple[str, ...] = ()  # pods whose engine runs or queues its requests now


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Base:
    """The base ModelDeployment as the adapter needs it; None fields: it does not exist."""

    spec: ModelDeploymentSpec | None
    served_names: frozenset[str] = frozenset()  # every model name served in the namespace


def base_of(name: str, deployments: Iterable[Mapping[str, Any]]) -> Base:
    """The adapter's base by name among one namespace's ModelDeployments, with the names
    they serve (an adapter may not take one)."""
    spec: ModelDeploymentSpec | None = None
    names: set[str] = set()
    for body in deployments:
        raw = body.get("spec") or {}
        model = raw.get("model") or {}
        names.update([model.get("name", ""), *model.get("aliases", [])])
        if body.get("metadata", {}).get("name") == name:
            try:
                spec = ModelDeploymentSpec.model_validate(raw)
            except pydantic.ValidationError:
                spec = None
    return Base(spec=spec, served_names=frozenset(names - {""}))


def _readiness(
    spec: ModelAdapterSpec, base: Base, verdict: Verdict | None
) -> tuple[bool, str, str]:
    """(ready, reason, message) of the Ready condition."""
    if base.spec is None:
        return (
            False,
            "BaseNotFound",
            f"ModelDeployment {spec.base!r} does not exist (or is invalid)",
        )
    if base.spec.adapters is None or base.spec.engine.lora is None:
        return (
            False,
            "BaseServesNoAdapters",
            f"ModelDeployment {spec.base!r} needs spec.engine.lora and spec.adapters to serve "
            "adapters",
        )
    if spec.served_name in base.served_names:
        return (
            False,
            "NameConflict",
            f"servedName {spec.served_name!r} is a served model's name: choose another",
        )
    if verdict is None:
        return False, "Verifying", "the adapter's signature is being checked"
    if not verdict.verified:
        return False, verdict.reason, f"the adapter is refused: {verdict.message}"
    return True, "Verified", f"served to {len(spec.tenants)} tenant(s) on {spec.base!r}'s workers"


def plan(
    *,
    spec: ModelAdapterSpec,
    generation: int | None,
    old: ModelAdapterStatus | None,
    base: Base,
    verdict: Verdict | None,
    placement: Placement | None,
    now: datetime.datetime,
) -> tuple[ModelAdapterStatus, list[Event]]:
    """The status to write and the events to post. ``placement`` None: the gateways' report is
    unreadable (Prometheus down), so the last one stands rather than zeros."""
    old_conditions: Sequence[Any] = old.conditions if old else ()
    current = verdict if verdict is not None and verdict.digest == spec.artifact.digest else None
    ready, reason, message = _readiness(spec, base, current)
    conditions = [
        condition(
            old_conditions,
            type="Verified",
            status=current is not None and current.verified,
            reason=current.reason if current else "Verifying",
            message=(current.message or f"signed by {current.signer}") if current else "",
            now=now,
            generation=generation,
        ),
        condition(
            old_conditions,
            type="Ready",
            status=ready,
            reason=reason,
            message=message,
            now=now,
            generation=generation,
        ),
    ]
    if placement is None:
        pods = tuple(old.loaded_on) if old else ()
        active = tuple(old.active_on) if old else ()
        loaded, requests = (old.loaded_replicas, old.requests_served) if old else (0, 0)
    else:
        pods, loaded, requests = (
            tuple(sorted(placement.pods)),
            len(placement.pods),
            placement.requests,
        )
        active = tuple(sorted(placement.active))
    status = ModelAdapterStatus(
        observed_generation=generation,
        digest=current.digest if current else "",
        verified=current is not None and current.verified,
        reason=current.reason if current else "",
        signer=current.signer if current and current.verified else "",
        loaded_replicas=loaded,
        loaded_on=list(pods[:MAX_LISTED_PODS]),
        active_on=list(active[:MAX_LISTED_PODS]),
        requests_served=requests,
        conditions=conditions,
    )
    events = []
    refused = changed_to(old_conditions, conditions, "Verified", "False")
    if refused is not None and current is not None:
        events.append(Event(type="Warning", reason=current.reason, message=refused.message))
    if changed_to(old_conditions, conditions, "Verified", "True") is not None and current:
        events.append(
            Event(type="Normal", reason="Verified", message=f"signed by {current.signer}")
        )
    not_ready = changed_to(old_conditions, conditions, "Ready", "False")
    if not_ready is not None and not_ready.reason in (
        "BaseNotFound",
        "BaseServesNoAdapters",
        "NameConflict",
    ):
        events.append(Event(type="Warning", reason=not_ready.reason, message=not_ready.message))
    return status, events


def throttled(
    new: ModelAdapterStatus, old: ModelAdapterStatus | None, *, since_write: float | None
) -> ModelAdapterStatus:
    """``new`` with ``old``'s traffic figures while the last write is younger than
    TRAFFIC_REFRESH_SECONDS (``since_write`` None: never written by this operator)."""
    if old is None or since_write is None or since_write >= TRAFFIC_REFRESH_SECONDS:
        return new
    return new.model_copy(update={f: getattr(old, f) for f in _TRAFFIC_FIELDS})
