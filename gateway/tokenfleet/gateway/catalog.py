"""What one gateway serves, as one immutable value: models, adapters, pools, tenants, endpoints.

Built from Kubernetes objects (the gateway's watches) or from a static YAML file, then swapped
whole; request handlers read it without locks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tokenfleet.accounting import cost
from tokenfleet.api import labels
from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus, ResponseCache
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.api.tenant import Budget, TenantSpec
from tokenfleet.gateway import adapter_catalog, route_catalog
from tokenfleet.gateway.adapter_catalog import Adapter, Loader
from tokenfleet.gateway.policy import adapter_access, quotas
from tokenfleet.gateway.policy.admission import ClassPolicy
from tokenfleet.gateway.policy.routing import Endpoint, PoolOption, Snapshot
from tokenfleet.gateway.policy.routing import Policy as RoutingPolicy
from tokenfleet.gateway.route_catalog import RouteEntry

DEFAULT_CONCURRENCY = 256  # vLLM's default --max-num-seqs


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """A pool as admission needs it."""

    key: str  # namespace/name
    classes: Mapping[str, ClassPolicy]
    max_input_tokens: int
    routing: RoutingPolicy = dataclasses.field(default_factory=RoutingPolicy)
    dedicated_to: frozenset[str] = frozenset()  # traffic classes the pool is for ("" → all)
    rate: cost.Rate | None = None  # price per million tokens (currency budgets); None: unpriced

    def option(self) -> PoolOption:
        return PoolOption(
            key=self.key, max_input_tokens=self.max_input_tokens, classes=self.dedicated_to
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """A served name and where it runs."""

    name: str  # the canonical served name
    pools: tuple[str, ...]
    namespace: str = ""  # of its ModelDeployment ("" in static mode)
    names: frozenset[str] = frozenset()  # every served name: the canonical one and aliases
    fallback: str | None = None
    max_concurrency: int = DEFAULT_CONCURRENCY
    context_tokens: int | None = None  # the engine's context window (max_model_len), if set
    revision_weights: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Traffic percent per revision, as the operator publishes it (empty: any revision)."""
    response_cache: ResponseCache | None = None
    """The deployment's response cache, when it enabled one."""
    adapter: Adapter | None = None
    """Set when this is a LoRA adapter served on its base model's replicas under its own name
    (targets.adapter_model): routing then places it (adapter_slots) and loads it first."""
    shared_with: frozenset[str] = frozenset()
    """The other namespaces its deployment's ``spec.sharedWith`` serves it to ("*": all)."""

    def served_to(self, namespace: str) -> bool:
        """Whether a caller in ``namespace`` may be served this model (its own namespace's, or
        shared with that namespace; in static mode, with no namespaces, every caller)."""
        return (
            not self.namespace
            or namespace == self.namespace
            or "*" in self.shared_with
            or namespace in self.shared_with
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    """A caller."""

    key: str  # namespace/name
    allowed_models: frozenset[str]
    priority_class: str
    limits: quotas.Limits
    cache_group: str = ""
    max_tokens_cap: int | None = None
    revision_pinning: bool = False  # may send X-TokenFleet-Revision
    share: int = 1  # weight among the tenants of its class (fair queuing)
    budget: Budget | None = None

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0] if "/" in self.key else ""

    @property
    def name(self) -> str:
        """Its metadata.name (what a ModelAdapter's tenants list)."""
        return self.key.partition("/")[2] if "/" in self.key else self.key

    def may_use(self, name: str, model: Model | None = None) -> bool:
        """Whether the tenant may call ``name``; an alias is allowed when its model is."""
        allowed = self.allowed_models
        return "*" in allowed or name in allowed or (model is not None and model.name in allowed)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """Everything a request is checked against."""

    models: Mapping[str, Model] = dataclasses.field(default_factory=dict)  # by every served name
    """Cluster-wide: a served name claimed in several namespaces is the first by namespace/name.
    What a caller without a namespace (static mode) is served; a namespaced caller is served
    only its own namespace's models and those shared with it (:meth:`model`)."""
    local: Mapping[tuple[str, str], Model] = dataclasses.field(default_factory=dict)
    """By (namespace, served name): a tenant's own namespace answers first."""
    shared: Mapping[str, tuple[Model, ...]] = dataclasses.field(default_factory=dict)
    """By served name, the models whose ``spec.sharedWith`` serves them to other namespaces,
    in namespace/name order."""
    claimed: frozenset[tuple[str, str]] = frozenset()
    """(namespace, served name) of every ModelDeployment, also those whose spec does not parse:
    a namespace's broken model is unavailable to its tenants, never another team's instead."""
    pools: Mapping[str, Pool] = dataclasses.field(default_factory=dict)
    tenants_by_key_hash: Mapping[str, Tenant] = dataclasses.field(default_factory=dict)
    endpoints: Snapshot = dataclasses.field(default_factory=Snapshot)
    adapters: Mapping[tuple[str, str], Adapter] = dataclasses.field(default_factory=dict)
    """LoRA adapters by (namespace, served name); their names are also on the served names of
    their base's endpoints that can load them (adapter_catalog.attached)."""
    loaders: Mapping[str, Loader] = dataclasses.field(default_factory=dict)
    """Endpoint URL → its worker's adapter-loader."""
    shadowed: frozenset[str] = frozenset()
    """Adapters (namespace/name) left out because a model serves their name."""
    routes: Mapping[tuple[str, str], RouteEntry] = dataclasses.field(default_factory=dict)
    """ModelRoutes by (namespace, public name); none whose name a model or adapter serves."""
    shadowed_routes: frozenset[str] = frozenset()
    """ModelRoutes (namespace/name) left out because a model or an adapter has their name."""

    def with_endpoints(self, endpoints: Snapshot) -> Catalog:
        return dataclasses.replace(self, endpoints=endpoints)

    def answerable(self) -> bool:
        """Whether a request can get more than a 404 here: a ready endpoint, a model to hold
        for while its pool starts from zero (the cold-start hold) or to fall back from, or a
        route that spills to another region. Readiness needs this, not a ready endpoint: with
        every local pool lost or at zero the gateway must stay in its Service to hold and spill
        (issue 35, finding 7)."""
        return bool(self.endpoints.endpoints or self.models) or any(
            r.remotes for r in self.routes.values()
        )

    def adapter(self, name: str, namespace: str = "") -> Adapter | None:
        """The adapter ``name`` means to a caller in ``namespace``: its own namespace's, else
        the first by namespace/name (which the caller may then not use: 403, not 404)."""
        own = self.adapters.get((namespace, name))
        if own is not None or not self.adapters:
            return own
        return next((a for (_, n), a in sorted(self.adapters.items()) if n == name), None)

    def route(self, name: str, namespace: str = "") -> RouteEntry | None:
        """The route ``name`` means to a caller in ``namespace``: its own namespace's (none
        is kept whose namespace serves that name: :func:`with_routes`), else — when no model
        or adapter has the name — the first by namespace/name of those whose ``sharedWith``
        serves it to ``namespace``: another namespace cannot claim a name and so receive this
        namespace's prompts (issue 35, finding 4). A caller without a namespace (static mode,
        the cluster-wide view) gets the first by namespace/name."""
        if not self.routes:
            return None
        own = self.routes.get((namespace, name))
        if own is not None:
            return own
        if self.model(name, namespace) is not None or self.adapter(name, namespace) is not None:
            return None
        return next(
            (
                r
                for (_, n), r in sorted(self.routes.items())
                if n == name and (not namespace or r.served_to(namespace))
            ),
            None,
        )

    def serves(self, name: str) -> bool:
        """Whether a model (by any served name), an adapter or a route of any namespace has
        the name ``name``."""
        return (
            name in self.models
            or any(n == name for _, n in self.adapters)
            or any(n == name for _, n in self.routes)
        )

    def model(self, name: str, namespace: str = "") -> Model | None:
        """What ``name`` means to a caller in ``namespace``: its own namespace's model, so a
        team's model is never shadowed by another team's of the same name; else the first by
        namespace/name that another namespace shares with it (``spec.sharedWith``), never one
        it does not: a namespace that claims a name first does not receive another's prompts
        (issue 35, finding 4). A caller without a namespace (static mode, the cluster-wide
        view) gets the first by namespace/name."""
        if (namespace, name) in self.claimed:
            return self.local.get((namespace, name))
        if not namespace:
            return self.models.get(name)
        shared = next((m for m in self.shared.get(name, ()) if m.served_to(namespace)), None)
        if shared is not None:
            return shared
        # a model of no namespace (static configuration) is served to every caller: there are
        # no namespaces to keep apart, even when the configured tenants' names carry one
        static = self.models.get(name)
        return static if static is not None and not static.namespace else None

    def adapters_for(self, tenant: Tenant) -> list[str]:
        """The served names of the offered adapters that name ``tenant``."""
        return sorted(
            a.name
            for (ns, _), a in self.adapters.items()
            if ns == tenant.namespace
            and tenant.name in a.tenants
            and a.offer is adapter_access.Offer.OFFERED
        )

    def routes_for(self, tenant: Tenant) -> list[str]:
        """The public names of the routes the tenant may use, as its namespace resolves them."""
        names = {n for _, n in self.routes}
        return sorted(
            n for n in names if self.route(n, tenant.namespace) is not None and tenant.may_use(n)
        )

    def visible(self, namespace: str = "") -> dict[str, Model]:
        """Every served name as a caller in ``namespace`` resolves it."""
        if not namespace:
            out = {n: m for n, m in self.models.items() if (namespace, n) not in self.claimed}
        else:
            names = {*self.shared, *(n for n, m in self.models.items() if not m.namespace)}
            out = {
                n: m
                for n in names
                if (namespace, n) not in self.claimed
                and (m := self.model(n, namespace)) is not None
            }
        out.update({n: m for (ns, n), m in self.local.items() if ns == namespace})
        return out


def pool_of(key: str, spec: InferencePoolSpec) -> Pool:
    targets = spec.ttft_targets_ms()
    return Pool(
        key=key,
        classes={
            c.name: ClassPolicy.of(c, ttft_target_ms=targets[c.name])
            for c in spec.admission.classes
        },
        max_input_tokens=spec.max_input_tokens,
        routing=RoutingPolicy.of(spec.routing),
        dedicated_to=frozenset(spec.routing.classes),
        rate=cost.rate_of(spec),
    )


def models_of(
    namespace: str, spec: ModelDeploymentSpec, status: ModelDeploymentStatus | None = None
) -> dict[str, Model]:
    names = frozenset((spec.model.name, *spec.model.aliases))
    model = Model(
        name=spec.model.name,
        pools=tuple(f"{namespace}/{p}" for p in spec.pools),
        namespace=namespace,
        names=names,
        fallback=spec.fallback.model if spec.fallback else None,
        max_concurrency=spec.engine.max_num_seqs or DEFAULT_CONCURRENCY,
        context_tokens=spec.engine.max_model_len,
        revision_weights={r.name: r.weight for r in status.revisions} if status else {},
        response_cache=spec.response_cache if spec.response_cache.enabled else None,
        shared_with=frozenset(spec.shared_with),
    )
    return dict.fromkeys(names, model)


def tenant_of(key: str, spec: TenantSpec) -> Tenant:
    q = spec.quotas
    return Tenant(
        key=key,
        allowed_models=frozenset(spec.allowed_models),
        priority_class=spec.priority_class,
        share=spec.share,
        budget=spec.budget,
        limits=quotas.Limits(
            requests_per_minute=q.requests_per_minute,
            tokens_per_minute=q.tokens_per_minute,
            tokens_per_day=q.tokens_per_day,
            max_concurrent=q.max_concurrent,
        ),
        cache_group=_group_of(key, spec),
        max_tokens_cap=spec.max_tokens_cap,
        revision_pinning=spec.revision_pinning,
    )


def _group_of(key: str, spec: TenantSpec) -> str:
    """The tenant's cache group, scoped to its namespace: a Tenant of another namespace that
    names the same group joins a different one (its prefix and response caches stay apart).
    A static configuration's tenants have no namespace: their groups are the file's."""
    iso = spec.cache_isolation
    if iso.mode != "SharedGroup" or not iso.group:
        return ""
    namespace = key.partition("/")[0] if "/" in key else ""
    return f"{namespace}/{iso.group}" if namespace else iso.group


def key_hashes(secret: Mapping[str, Any]) -> list[str]:
    """The sha256:<hex> values of a key Secret (data is base64; stringData is not stored)."""
    import base64

    out = []
    for value in (secret.get("data") or {}).values():
        text = base64.b64decode(value).decode(errors="replace").strip()
        if text.startswith("sha256:") and len(text) == 71:
            out.append(text)
    return out


def endpoints_of(
    pods: Iterable[Mapping[str, Any]], resolve: Callable[[str, str], Model | None]
) -> Snapshot:
    """Ready, not terminating worker pods → endpoints (pods are watched, not EndpointSlices);
    a pod serves its served name as its namespace resolves it (``Catalog.model``)."""
    found = []
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        pod_labels = meta.get("labels", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        if not ready or meta.get("deletionTimestamp") or not status.get("podIP"):
            continue
        served = pod_labels.get(labels.MODEL, "")
        model = resolve(served, meta.get("namespace", ""))
        names = (model.names or frozenset({served})) if model else frozenset({served})
        port = next(
            (
                p["containerPort"]
                for c in pod.get("spec", {}).get("containers", [])
                for p in c.get("ports", [])
                if p.get("name") == "http"
            ),
            8000,
        )
        found.append(
            Endpoint(
                url=f"http://{status['podIP']}:{port}",
                pool=f"{meta.get('namespace')}/{pod_labels.get(labels.POOL, '')}",
                models=names,
                revision=pod_labels.get(labels.REVISION, ""),
                zone=pod_labels.get(labels.ZONE, ""),
                max_concurrency=model.max_concurrency if model else DEFAULT_CONCURRENCY,
            )
        )
    return Snapshot(tuple(sorted(found, key=lambda e: e.url)))


def _status_of(raw: Mapping[str, Any]) -> ModelDeploymentStatus | None:
    """The operator's published status; unparseable (kopf's own keys, say) → no weights."""
    try:
        return ModelDeploymentStatus.model_validate({k: raw[k] for k in ("revisions",) if k in raw})
    except ValueError:
        return None


def _served_names(obj: Mapping[str, Any]) -> list[str]:
    """The names a ModelDeployment claims, read leniently (its spec may not parse)."""
    model = (obj.get("spec") or {}).get("model") or {}
    if not isinstance(model, Mapping):
        return []
    aliases = model.get("aliases") or []
    names = [model.get("name"), *(aliases if isinstance(aliases, list) else [])]
    return [n for n in names if isinstance(n, str) and n]


def from_objects(
    *,
    pools: Iterable[Mapping[str, Any]],
    models: Iterable[Mapping[str, Any]],
    tenants: Iterable[Mapping[str, Any]],
    secrets: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    adapters: Iterable[Mapping[str, Any]] = (),
    routes: Iterable[Mapping[str, Any]] = (),
    configmaps: Iterable[Mapping[str, Any]] = (),
) -> Catalog:
    """The catalog from watched objects; an object that does not parse is left out, not fatal."""

    def key(obj: Mapping[str, Any]) -> str:
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    pool_map = {}
    for obj in sorted(pools, key=key):
        try:
            pool_map[key(obj)] = pool_of(
                key(obj), InferencePoolSpec.model_validate(obj.get("spec", {}))
            )
        except ValueError:
            continue
    model_map: dict[str, Model] = {}
    local: dict[tuple[str, str], Model] = {}
    claimed: set[tuple[str, str]] = set()
    shared: dict[str, list[Model]] = {}
    deployments: dict[tuple[str, str], ModelDeploymentSpec] = {}
    # a served name claimed twice: the first by namespace/name wins, cluster-wide and within a
    # namespace; callers in a namespace that claims it get their own (Catalog.model)
    for obj in sorted(models, key=key):
        claimed.update((obj["metadata"]["namespace"], n) for n in _served_names(obj))
        try:
            spec = ModelDeploymentSpec.model_validate(obj.get("spec", {}))
        except ValueError:
            continue
        deployments[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = spec
        found = models_of(obj["metadata"]["namespace"], spec, _status_of(obj.get("status") or {}))
        for name, model in found.items():
            model_map.setdefault(name, model)
            if local.setdefault((model.namespace, name), model) is model and model.shared_with:
                shared.setdefault(name, []).append(model)
    secret_map = {key(s): key_hashes(s) for s in secrets}
    by_hash: dict[str, Tenant] = {}
    for obj in sorted(tenants, key=key):
        try:
            tenant_spec = TenantSpec.model_validate(obj.get("spec", {}))
        except ValueError:
            continue
        tenant = tenant_of(key(obj), tenant_spec)
        for h in secret_map.get(
            f"{obj['metadata']['namespace']}/{tenant_spec.api_key_secret_ref.name}", []
        ):
            by_hash.setdefault(h, tenant)
    catalog = Catalog(
        models=model_map,
        local=local,
        shared={n: tuple(ms) for n, ms in shared.items()},
        claimed=frozenset(claimed),
        pools=pool_map,
        tenants_by_key_hash=by_hash,
    )
    served = with_adapters(
        catalog.with_endpoints(endpoints_of(pods, catalog.model)),
        adapters=list(adapters_of(adapters, deployments)),
        loaders=adapter_catalog.loaders_of(pods),
    )
    entries = route_catalog.routes_of(routes, config_maps=route_catalog.config_maps_of(configmaps))
    return with_routes(served, routes=entries.values())


#: uid → (what its entry was derived from, the entry): a rebuild re-derives only adapters whose
#: object (resourceVersion) or base changed — thousands of adapters, most untouched per event.
_ADAPTER_MEMO: dict[str, tuple[tuple[Any, ...], Adapter | None]] = {}


def adapters_of(
    objects: Iterable[Mapping[str, Any]], deployments: Mapping[tuple[str, str], ModelDeploymentSpec]
) -> Iterable[Adapter]:
    """Watched ModelAdapters whose spec parses and whose base serves LoRA; others are left out
    (their name is then unknown: 404, like a model whose spec does not parse)."""
    live = set()
    prints: dict[tuple[str, str], str] = {}  # a base's fingerprint, once per rebuild
    for obj in objects:
        meta = obj["metadata"]
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        where = (meta["namespace"], (obj.get("spec") or {}).get("base", ""))
        base = deployments.get(where)
        if base is not None and where not in prints:
            knobs = (base.engine.lora, base.adapters)
            prints[where] = base.model.name + "".join(
                k.model_dump_json() if k else "" for k in knobs
            )
        status = obj.get("status") or {}
        basis = (
            version,
            meta.get("generation"),
            *(status.get(f) for f in ("observedGeneration", "verified", "digest", "reason")),
            prints.get(where),
        )
        memo = _ADAPTER_MEMO.get(uid) if uid and version else None
        if memo is not None and memo[0] == basis:
            entry = memo[1]
        else:
            entry = _adapter_entry(obj, base)
            if uid and version:
                _ADAPTER_MEMO[uid] = (basis, entry)
        if uid:
            live.add(uid)
        if entry is not None:
            yield entry
    for gone in _ADAPTER_MEMO.keys() - live:
        del _ADAPTER_MEMO[gone]


def _adapter_entry(obj: Mapping[str, Any], base: ModelDeploymentSpec | None) -> Adapter | None:
    meta = obj["metadata"]
    try:
        spec = ModelAdapterSpec.model_validate(obj.get("spec", {}))
    except ValueError:
        return None
    if base is None or base.engine.lora is None:
        return None
    verdict = adapter_catalog.verdict_of(obj, spec)
    return adapter_catalog.adapter_of(
        namespace=meta["namespace"],
        resource=meta["name"],
        spec=spec,
        base_model=base.model.name,
        lora=base.engine.lora,
        policy=base.adapters,
        offer=adapter_access.offer(verdict),
        reason=verdict.reason,
    )


def with_adapters(
    catalog: Catalog, *, adapters: Iterable[Adapter], loaders: Mapping[str, Loader]
) -> Catalog:
    """The catalog serving ``adapters`` (a model's name wins over an adapter's) on the
    endpoints with ``loaders``."""
    kept, shadowed = adapter_catalog.split(adapters, model=catalog.model)
    return dataclasses.replace(
        catalog,
        adapters=kept,
        loaders=loaders,
        shadowed=shadowed,
        endpoints=adapter_catalog.attached(
            catalog.endpoints, adapters=kept.values(), loaders=loaders
        ),
    )


def with_routes(catalog: Catalog, *, routes: Iterable[RouteEntry]) -> Catalog:
    """The catalog serving ``routes``, except those whose public name a model or an adapter
    has in their own namespace (the served model wins; the operator reports NameConflict). A
    model of that name in another namespace does not shadow the route for its namespace."""
    kept: dict[tuple[str, str], RouteEntry] = {}
    shadowed = set()
    for r in sorted(routes, key=lambda r: r.key):
        where = (r.namespace, r.name)
        static_model = not r.namespace and r.name in catalog.models  # static mode: no namespaces
        if where in catalog.claimed or where in catalog.adapters or static_model:
            shadowed.add(r.key)
            continue
        kept.setdefault((r.namespace, r.name), r)
    return dataclasses.replace(catalog, routes=kept, shadowed_routes=frozenset(shadowed))
