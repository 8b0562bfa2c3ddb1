"""A request sent to a ModelRoute's public name, directed to the served model its rules choose
(step 2, before placement): the facts, the decision, and the request as one for the target.

The route resolves the public name to a concrete served model early, so everything after it
(placement, quotas, queues, streaming, cancellation, usage, metrics by model) is the existing
path for the target. Authorization (:func:`permits`): a tenant must be allowed the route's
public name; a route of the tenant's own namespace then grants every target it chooses (it is
written where the tenant's Tenant is, by that namespace's admin), while a route found in another
namespace grants nothing — its author has no say over this tenant, so each target it chooses
must be one the tenant's ``allowedModels`` names (issue 35, finding 4). An adapter target
checks the adapter's own tenants list either way. The
classifier scores the latest user turn only when the route has rules that read a score and
weights loaded for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from tokenfleet.accounting import cost
from tokenfleet.gateway.catalog import Catalog, Tenant
from tokenfleet.gateway.policy import bodies, model_routes
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.route_catalog import RouteEntry


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Directed:
    """A routed request: the body as one for the target, and what chose it."""

    parsed: bodies.Parsed  # its model is the target's served name
    entry: RouteEntry
    decision: model_routes.Decision

    @property
    def header(self) -> str:
        """The X-TokenFleet-Route value."""
        return self.decision.header(self.entry.name)


def prices(catalog: Catalog, entry: RouteEntry, *, namespace: str) -> dict[str, cost.Rate]:
    """Each target's price: the rate of its first priced pool (targets without one: absent)."""
    out = {}
    for name in entry.route.models:
        model = catalog.model(name, namespace)
        rates = [catalog.pools[p].rate for p in model.pools if p in catalog.pools] if model else []
        rate = next((r for r in rates if r is not None), None)
        if rate is not None:
            out[name] = rate
    return out


def facts(
    catalog: Catalog,
    entry: RouteEntry,
    *,
    tenant: Tenant,
    parsed: bodies.Parsed,
    headers: Mapping[str, str],
) -> model_routes.Facts:
    """What the route's rules read about this request (``headers`` look up case-insensitively,
    as aiohttp's do)."""
    scorer = entry.classifier if entry.scores else None
    # a route's rules name tenants and groups of its own namespace: a caller from another
    # namespace is matched by its qualified name, which no rule's bare name equals
    own = tenant.namespace == entry.namespace
    group = tenant.cache_group
    if own and tenant.namespace and group.startswith(tenant.namespace + "/"):
        group = group.partition("/")[2]
    return model_routes.Facts(
        tenant=tenant.name if own else tenant.key,
        group=group,
        headers=headers,
        prompt_tokens=parsed.prompt_tokens,
        max_tokens=parsed.max_tokens,
        tools=model_routes.offers_tools(parsed.body),
        score=scorer.score(model_routes.latest_user_text(parsed.body)) if scorer else None,
        prices=prices(catalog, entry, namespace=tenant.namespace) if entry.needs_prices else {},
    )


def direct(
    catalog: Catalog,
    tenant: Tenant,
    parsed: bodies.Parsed,
    *,
    headers: Mapping[str, str],
    draw: Callable[[], float],
) -> Directed | Rejected | None:
    """The request for the target its route chooses; None when ``parsed.model`` is no route
    (a served model's name wins over a route's); Rejected when the tenant may not use the
    route. ``draw`` (uniform in [0, 1)) is called only for a route, so requests by a model's
    own name leave a seeded random source as they found it."""
    entry = catalog.route(parsed.model, tenant.namespace)
    if entry is None:
        return None
    if not tenant.may_use(entry.name):
        return Rejected(
            reason=Reason.MODEL_NOT_ALLOWED,
            param="model",
            message=f"model '{entry.name}' is not available to you",
        )
    seen = facts(catalog, entry, tenant=tenant, parsed=parsed, headers=headers)
    decision = model_routes.choose(entry.route, facts=seen, draw=draw())
    directed = Directed(
        parsed=dataclasses.replace(parsed, model=decision.model), entry=entry, decision=decision
    )
    if not permits(catalog, entry, tenant=tenant, target=decision.model):
        return Rejected(
            reason=Reason.ROUTE_TARGET_NOT_ALLOWED,
            param="model",
            message=f"route '{entry.name}' chose '{decision.model}' ({directed.header}), which "
            "you may not call: a route of another namespace serves only the models your "
            "Tenant's allowedModels lists",
        )
    return directed


def permits(catalog: Catalog, entry: RouteEntry, *, tenant: Tenant, target: str) -> bool:
    """Whether the route may serve ``target`` to the tenant: always from a route of the
    tenant's own namespace (the route is that namespace's grant), else only a model the tenant
    may call by name. A target that is no model is left to the adapter's own tenants list, or
    to :func:`unserved`."""
    if entry.namespace == tenant.namespace:
        return True
    model = catalog.model(target, tenant.namespace)
    return model is None or tenant.may_use(target, model)


def unserved(catalog: Catalog, directed: Directed, *, namespace: str) -> Rejected | None:
    """Rejected when the target the route chose is no served model or adapter: the route's
    owner must act, so the caller is told which route and rule chose it, and not to retry."""
    target, entry = directed.decision.model, directed.entry
    if catalog.model(target, namespace) is not None or catalog.adapter(target, namespace):
        return None
    return Rejected(
        reason=Reason.ROUTE_TARGET_NOT_FOUND,
        param="model",
        message=f"route '{entry.name}' chose '{target}' ({directed.header}), which no "
        "ModelDeployment or ModelAdapter serves: the route's owner must fix its targets "
        f"(kubectl describe modelroute {entry.resource})",
    )
