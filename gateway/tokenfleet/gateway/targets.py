"""Where a request may run (step 2 past the body): the model the tenant means and may use (or
the LoRA adapter, run on its base model's replicas), its pool by context bucket (pools dedicated
to the tenant's class first), the tenant's class in that pool, and the model's fallback."""

from __future__ import annotations

import dataclasses

from tokenfleet.gateway.adapter_catalog import Adapter
from tokenfleet.gateway.catalog import Catalog, Model, Pool, Tenant
from tokenfleet.gateway.policy import adapter_access, admission, bodies, routing
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.route_catalog import RouteEntry


def resolve(
    catalog: Catalog, tenant: Tenant, name: str, *, granted: bool = False
) -> Model | Rejected:
    """The model ``name`` means to the tenant, if the tenant may use it (or a ModelRoute the
    tenant may use chose it: ``granted``); an adapter's name means its base model served under
    the adapter's name (:func:`adapter_model`), whose own tenants list still applies."""
    model = catalog.model(name, tenant.namespace)
    if model is not None and (granted or tenant.may_use(name, model)):
        return model
    adapter = catalog.adapter(name, tenant.namespace) if model is None else None
    if adapter is not None:
        return adapter_model(catalog, tenant, adapter)
    if model is None and tenant.namespace:
        # another namespace's model of this name is not this tenant's unless it is shared
        # with its namespace (issue 35, finding 4): the same answer whether or not one exists
        return Rejected(
            reason=Reason.MODEL_NOT_FOUND,
            param="model",
            message=f"model '{name}' does not exist: no ModelDeployment, ModelAdapter or "
            f"ModelRoute of that name is served to namespace '{tenant.namespace}' (another "
            "namespace's serves it only if its spec.sharedWith lists this namespace)",
        )
    known = model is not None or name in catalog.endpoints.models()
    reason = Reason.MODEL_NOT_ALLOWED if known else Reason.MODEL_NOT_FOUND
    verb = "is not available to you" if known else "does not exist"
    return Rejected(reason=reason, param="model", message=f"model '{name}' {verb}")


def adapter_model(catalog: Catalog, tenant: Tenant, adapter: Adapter) -> Model | Rejected:
    """The adapter as a model, if the tenant may use it now: its base's pools, revisions and
    limits under the adapter's name (so the body, usage and metrics say the adapter), with no
    fallback and no response cache (neither knows the adapter)."""
    refused = adapter_access.authorize(
        adapter_access.Request(
            name=adapter.name,
            resource=adapter.resource,
            namespace=adapter.namespace,
            tenants=adapter.tenants,
            offer=adapter.offer,
            reason=adapter.reason,
            tenant_namespace=tenant.namespace,
            tenant_name=tenant.name,
        )
    )
    if refused is not None:
        return refused
    base = catalog.model(adapter.base_model, adapter.namespace)
    if base is None:
        return Rejected(
            reason=Reason.NO_ENDPOINTS,
            retry_after=5.0,
            message=f"adapter '{adapter.name}': its base '{adapter.base_model}' is not served",
        )
    return dataclasses.replace(
        base,
        name=adapter.name,
        names=frozenset({adapter.name}),
        fallback=None,
        response_cache=None,
        adapter=adapter,
    )


def pick_pool(catalog: Catalog, model: Model, prompt_tokens: int, cls: str = "") -> Pool | None:
    """The model's pool for a prompt of this size and a tenant of class ``cls``."""
    options = [catalog.pools[p].option() for p in model.pools if p in catalog.pools]
    key = routing.choose_pool(options, prompt_tokens=prompt_tokens, cls=cls)
    return catalog.pools[key] if key is not None else None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Where a request may run: a model, its pool, and the tenant's class in that pool."""

    model: Model
    pool: Pool
    cls: str


def target(
    catalog: Catalog, model: Model, *, tenant: Tenant, prompt_tokens: int, dedicated: str
) -> Target | None:
    """The model's pool for the prompt (pools ``dedicated`` to a class first), None if none."""
    pool = pick_pool(catalog, model, prompt_tokens, dedicated)
    if pool is None:
        return None
    return Target(
        model=model, pool=pool, cls=admission.class_for(tenant.priority_class, pool.classes)
    )


def place(
    catalog: Catalog, tenant: Tenant, parsed: bodies.Parsed, *, granted: bool = False
) -> Target | Rejected:
    """Step 2 past the body: the model the tenant may use (``granted``: a route chose it), its
    pool for this prompt (pools dedicated to the tenant's class first), and the pool's and the
    tenant's limits."""
    model = resolve(catalog, tenant, parsed.model, granted=granted)
    if isinstance(model, Rejected):
        return model
    primary = target(
        catalog,
        model,
        tenant=tenant,
        prompt_tokens=parsed.prompt_tokens,
        dedicated=tenant.priority_class,
    )
    if primary is None:
        return Rejected(
            reason=Reason.NO_ENDPOINTS,
            retry_after=5.0,
            message=f"model '{parsed.model}' has no pool configured",
        )
    limit = bodies.check_limits(
        parsed, max_input_tokens=primary.pool.max_input_tokens, max_tokens_cap=tenant.max_tokens_cap
    )
    return limit if limit is not None else primary


def spare_for(
    catalog: Catalog, primary: Target, *, tenant: Tenant, prompt_tokens: int
) -> Target | None:
    """Where the model's fallback would run the request (any of its pools, by context bucket);
    None when there is none, or when the tenant may not call it: a fallback is another model,
    and a tenant gets only the models its Tenant allows (issue 35, finding 4)."""
    model = primary.model
    spare = catalog.model(model.fallback, model.namespace) if model.fallback else None
    if spare is None or not tenant.may_use(spare.name, spare):
        return None
    return target(catalog, spare, tenant=tenant, prompt_tokens=prompt_tokens, dedicated="")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """A request past steps 1-3 (authenticated, validated, placed, its class and deadline
    assigned), built once: everything the later steps read."""

    tenant: Tenant
    parsed: bodies.Parsed
    primary: Target
    fallback: Target | None
    due: float  # monotonic seconds
    max_tokens: int  # per sequence, within the tenant's cap (a degraded class may lower it)
    route: RouteEntry | None = None  # the ModelRoute that directed it, if one did
    salt: str = ""  # the tenant's cache salt (policy.salt), sent to every engine and remote

    @property
    def output_tokens(self) -> int:
        """The most its engine may generate: ``max_tokens`` for every sequence."""
        return self.max_tokens * self.parsed.sequences
