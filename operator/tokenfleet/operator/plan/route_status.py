"""A ModelRoute's status (pure): whether every target is served, the classifier loads and the
remotes' keys exist.

Ready is decided in this order, the first failing check giving its reason::

    spec.name is a served model's or an adapter's name ─▶ NameConflict (the gateway serves the
                                                          model; the route is never used)
    a target names nothing served in the namespace     ─▶ TargetNotFound
    spec.classifier's ConfigMap or key is missing       ─▶ ClassifierNotFound
        (or it lacks the label the gateways watch)
    its weights do not parse                            ─▶ ClassifierInvalid
    otherwise                                           ─▶ TargetsFound

A classifier problem does not stop the gateway serving the route (its score rules do not
match), but it is not the route its author wrote, so Ready is False until it is fixed.

RemotesReady, only on a route with ``spec.remotes`` (absent otherwise: nothing to be ready),
says whether each remote's key can reach the gateway. Keys live in Secrets of the gateway's
namespace that the chart mounts into its pods (``gateway.remoteKeySecrets``); the gateway never
reads Secrets through the API, so the operator checks what it can see, per remote in order::

    its apiKeySecret does not exist there       ─▶ KeySecretNotFound
    the Secret lacks the key (or it is empty)   ─▶ KeyMissing
    the Secret binds the key to no URL          ─▶ KeyUnbound (no base-url key)
    every remote's key found                    ─▶ KeysFound

Whether the chart mounts the Secret the operator cannot see: the gateway reports a remote
whose key is not mounted. RemotesReady does not change Ready: the local targets still serve,
and a remote without its key is skipped.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tokenfleet.api import classifier_weights, labels
from tokenfleet.api.route import ModelRouteSpec, ModelRouteStatus, Remote
from tokenfleet.operator.plan.reporting import Event, changed_to, condition, names


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """The classifier's ConfigMap as read: None fields when it does not exist."""

    data: Mapping[str, str] | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


#: Reasons of the RemotesReady condition (present only on routes with remotes).
REMOTES_READY_REASONS = ("KeysFound", "KeySecretNotFound", "KeyMissing", "KeyUnbound")
#: The Secret's key naming the URL its token may be sent to (tokenfleet.gateway.remotes).
BASE_URL_KEY = "base-url"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeySecrets:
    """The remotes' key Secrets as read in the gateway's namespace: Secret name → the names of
    its non-empty keys, None (or absent) when the Secret does not exist. Never their values."""

    namespace: str
    keys: Mapping[str, frozenset[str] | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """What the route's namespace serves: model names and aliases, adapters' served names."""

    models: frozenset[str] = frozenset()
    adapters: frozenset[str] = frozenset()

    @property
    def names(self) -> frozenset[str]:
        return self.models | self.adapters


def served_in(
    deployments: Iterable[Mapping[str, Any]], adapters: Iterable[Mapping[str, Any]]
) -> Served:
    """The names one namespace's ModelDeployments and ModelAdapters serve, read leniently."""
    models: set[str] = set()
    for body in deployments:
        model = (body.get("spec") or {}).get("model") or {}
        models.update([model.get("name", ""), *(model.get("aliases") or [])])
    served = {str((body.get("spec") or {}).get("servedName", "")) for body in adapters}
    return Served(models=frozenset(models - {""}), adapters=frozenset(served - {""}))


def _classifier(spec: ModelRouteSpec, found: Found | None) -> tuple[str, str] | None:
    """(reason, message) when the classifier's weights do not load; None when they do."""
    ref = spec.classifier
    if ref is None:
        return None
    if found is None or found.data is None:
        return "ClassifierNotFound", f"ConfigMap {ref.config_map!r} does not exist"
    if found.labels.get(labels.ROUTE_CLASSIFIER) != "true":
        return (
            "ClassifierNotFound",
            f"ConfigMap {ref.config_map!r} lacks the label {labels.ROUTE_CLASSIFIER}=true, so "
            "the gateways do not read it (tokenfleet route train-classifier writes it)",
        )
    text = found.data.get(ref.key)
    if text is None:
        return "ClassifierNotFound", f"ConfigMap {ref.config_map!r} has no key {ref.key!r}"
    try:
        classifier_weights.parse(text)
    except ValueError as exc:
        return "ClassifierInvalid", f"ConfigMap {ref.config_map!r} key {ref.key!r}: {exc}"
    return None


def readiness(spec: ModelRouteSpec, served: Served, found: Found | None) -> tuple[bool, str, str]:
    """(ready, reason, message) of the Ready condition."""
    if spec.name in served.names:
        kind = "a served model's" if spec.name in served.models else "a ModelAdapter's"
        return (
            False,
            "NameConflict",
            f"spec.name {spec.name!r} is {kind} name: the gateway serves that instead; rename "
            "the route",
        )
    targets = {t.model for t in spec.default_targets} | {
        t.model for r in spec.rules for t in r.targets
    }
    missing = sorted(targets - served.names)
    if missing:
        return (
            False,
            "TargetNotFound",
            f"no ModelDeployment or ModelAdapter in this namespace serves {', '.join(missing)}: "
            "requests routed there get 503 route_target_not_found",
        )
    problem = _classifier(spec, found)
    if problem is not None:
        reason, message = problem
        return False, reason, f"{message}; rules with classifierAbove/Below never match"
    return True, "TargetsFound", f"routes to {', '.join(sorted(targets))}"


def _key_problem(remote: Remote, secrets: KeySecrets) -> tuple[str, str] | None:
    """(reason, message) when the remote's key is not where the gateway's mount would read it."""
    ref = remote.api_key_secret
    where = f"Secret {secrets.namespace}/{ref.name}"
    listed = f"list {ref.name} in the chart's gateway.remoteKeySecrets"
    keys = secrets.keys.get(ref.name)
    if keys is None:
        return (
            "KeySecretNotFound",
            f"remote {remote.name}: {where} does not exist: create it with the remote's bearer "
            f"token under key {ref.key!r} and {listed}",
        )
    if ref.key not in keys:
        return (
            "KeyMissing",
            f"remote {remote.name}: {where} has no key {ref.key!r} (or it is empty): put the "
            f"remote's bearer token there ({listed} too, if it is not yet)",
        )
    if BASE_URL_KEY not in keys:
        return (
            "KeyUnbound",
            f"remote {remote.name}: {where} has no key {BASE_URL_KEY!r}: the gateway sends a "
            f"token only to the base URL its Secret names, so add {BASE_URL_KEY}="
            f"{remote.base_url}",
        )
    return None


def remotes_readiness(spec: ModelRouteSpec, secrets: KeySecrets) -> tuple[bool, str, str] | None:
    """(ready, reason, message) of the RemotesReady condition; None when the route has no
    remotes. The reason is the first failing remote's; the message names every one."""
    if not spec.remotes:
        return None
    problems = [p for r in spec.remotes if (p := _key_problem(r, secrets)) is not None]
    if problems:
        text = "; ".join(message for _, message in problems)
        return False, problems[0][0], f"{text}. Until then requests do not spill there"
    found = names(
        f"{r.name} ({r.api_key_secret.name}/{r.api_key_secret.key})" for r in spec.remotes
    )
    return (
        True,
        "KeysFound",
        f"key Secrets found in {secrets.namespace} for {found}; the gateway reads them where "
        "the chart's gateway.remoteKeySecrets mounts them",
    )


def plan(
    *,
    spec: ModelRouteSpec,
    generation: int | None,
    old: ModelRouteStatus | None,
    served: Served,
    found: Found | None,
    secrets: KeySecrets,
    now: datetime.datetime,
) -> tuple[ModelRouteStatus, list[Event]]:
    """The status to write and the events to post (one when Ready or RemotesReady changes, or
    its reason)."""
    old_conditions: Sequence[Any] = old.conditions if old else ()
    decided = {"Ready": readiness(spec, served, found)}
    remotes = remotes_readiness(spec, secrets)
    if remotes is not None:
        decided["RemotesReady"] = remotes
    conditions = [
        condition(
            old_conditions,
            type=kind,
            status=ready,
            reason=reason,
            message=message,
            now=now,
            generation=generation,
        )
        for kind, (ready, reason, message) in decided.items()
    ]
    status = ModelRouteStatus(observed_generation=generation, conditions=conditions)
    events = []
    for kind in decided:
        broke = changed_to(old_conditions, conditions, kind, "False")
        if broke is not None:
            events.append(Event(type="Warning", reason=broke.reason, message=broke.message))
        healed = changed_to(old_conditions, conditions, kind, "True")
        if healed is not None:
            events.append(Event(type="Normal", reason=healed.reason, message=healed.message))
    return status, events
