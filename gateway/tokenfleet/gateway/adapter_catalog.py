"""The adapters part of the catalog: ModelAdapters resolved to their base model, and the worker
endpoints that can load them (docs/adapters.md).

An adapter entry carries what a request for it is checked against (its tenants, the operator's
verdict as an :class:`~tokenfleet.gateway.policy.adapter_access.Offer`) and what loading it
needs (the artifact, the base's slots per replica, ``spill_above`` and the load timeout). An
offered adapter's served name is added to the served names of the base's endpoints that have an
adapter-loader, so the routing snapshot groups them like a model's: readiness, the cold-start
hold, revisions and pools work for an adapter exactly as for its base. Built once per catalog,
no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tokenfleet.api.adapter import AdapterArtifact, ModelAdapterSpec
from tokenfleet.api.deployment import AdapterPolicy, LoraLimits
from tokenfleet.gateway.policy import adapter_access
from tokenfleet.gateway.policy import adapters as placement
from tokenfleet.gateway.policy.routing import Endpoint, Snapshot

#: The worker pod's container port of the adapter-loader sidecar (docs/adapters.md).
LOADER_PORT_NAME = "adapters"
LOADER_PORT = 8002


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Adapter:
    """A ModelAdapter as the gateway serves it."""

    name: str  # the served name: what requests put in "model", and the engine's LoRA name
    namespace: str  # of the ModelAdapter ("" in static mode)
    resource: str  # its metadata.name
    base_model: str  # the base ModelDeployment's served model name
    tenants: frozenset[str]
    artifact: AdapterArtifact
    offer: adapter_access.Offer
    reason: str = ""  # the operator's verdict reason
    slots: int = 1
    """Adapters one replica holds at once: the base's max_cpu_loras, else max_loras."""
    policy: placement.Policy = dataclasses.field(default_factory=placement.Policy)
    load_timeout_seconds: float = 30.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.resource}" if self.namespace else self.resource


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Loader:
    """A worker's adapter-loader sidecar."""

    url: str  # http://podIP:8002
    pod: str  # the worker pod's name (the loaded gauge's label)


def slots_of(lora: LoraLimits) -> int:
    """Adapters a replica holds: vLLM keeps max_cpu_loras in memory and swaps max_loras of
    them onto the GPU per batch, so the CPU cache is what a load fills."""
    return lora.max_cpu_loras or lora.max_loras


def adapter_of(
    *,
    namespace: str,
    resource: str,
    spec: ModelAdapterSpec,
    base_model: str,
    lora: LoraLimits,
    policy: AdapterPolicy | None,
    offer: adapter_access.Offer,
    reason: str = "",
) -> Adapter:
    knobs = policy or AdapterPolicy()
    return Adapter(
        name=spec.served_name,
        namespace=namespace,
        resource=resource,
        base_model=base_model,
        tenants=frozenset(spec.tenants),
        artifact=spec.artifact,
        offer=offer,
        reason=reason,
        slots=slots_of(lora),
        policy=placement.Policy(
            spill_above=knobs.spill_above, affinity=knobs.placement == "Affinity"
        ),
        load_timeout_seconds=knobs.load_timeout_seconds,
    )


def verdict_of(obj: Mapping[str, Any], spec: ModelAdapterSpec) -> adapter_access.Verdict:
    """The operator's verdict as the offer reads it (a status that does not parse: none)."""
    status = obj.get("status")
    raw: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    generation = obj.get("metadata", {}).get("generation")

    observed = raw.get("observedGeneration")
    verified = raw.get("verified")
    digest = raw.get("digest")
    reason = raw.get("reason")
    return adapter_access.Verdict(
        generation=generation if isinstance(generation, int) else None,
        observed_generation=observed if isinstance(observed, int) else None,
        spec_digest=spec.artifact.digest,
        status_digest=digest if isinstance(digest, str) else "",
        verified=verified is True,
        reason=reason if isinstance(reason, str) else "",
    )


def loaders_of(pods: Iterable[Mapping[str, Any]]) -> dict[str, Loader]:
    """Endpoint URL → its pod's adapter-loader, for ready worker pods that run one."""
    found = {}
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        ip = status.get("podIP")
        ports = {
            p.get("name"): p.get("containerPort")
            for c in pod.get("spec", {}).get("containers", [])
            for p in c.get("ports", [])
        }
        if not ip or LOADER_PORT_NAME not in ports:
            continue
        http = ports.get("http") or 8000
        found[f"http://{ip}:{http}"] = Loader(
            url=f"http://{ip}:{ports[LOADER_PORT_NAME] or LOADER_PORT}", pod=meta.get("name", ip)
        )
    return found


def namespace_of(endpoint: Endpoint) -> str:
    """An endpoint's namespace, from its pool's key ("" in static mode)."""
    return endpoint.namespace


def attached(
    snapshot: Snapshot, *, adapters: Iterable[Adapter], loaders: Mapping[str, Loader]
) -> Snapshot:
    """The snapshot with each offered adapter's name added to its base's endpoints that have
    a loader (same namespace): they are the adapter's candidates."""
    by_base: dict[tuple[str, str], set[str]] = {}
    for a in adapters:
        if a.offer is adapter_access.Offer.OFFERED:
            by_base.setdefault((a.namespace, a.base_model), set()).add(a.name)
    if not by_base:
        return snapshot
    out = []
    for e in snapshot.endpoints:
        extra: set[str] = set()
        if e.url in loaders:
            ns = namespace_of(e)
            for model in e.models:
                extra |= by_base.get((ns, model), set())
        out.append(dataclasses.replace(e, models=e.models | extra) if extra else e)
    return Snapshot(tuple(out))


def split(
    adapters: Iterable[Adapter], *, model: Callable[[str, str], object | None]
) -> tuple[dict[tuple[str, str], Adapter], frozenset[str]]:
    """(namespace, served name) → adapter, first by key; and the keys of adapters whose served
    name a model already has in their namespace (the model wins)."""
    kept: dict[tuple[str, str], Adapter] = {}
    shadowed = set()
    for a in sorted(adapters, key=lambda a: a.key):
        if model(a.name, a.namespace) is not None:
            shadowed.add(a.key)
            continue
        kept.setdefault((a.namespace, a.name), a)
    return kept, frozenset(shadowed)
