"""Steps 1-3, intake: who asks (the API key → a Tenant), for what (the body, parsed once; a
ModelRoute's public name directed to the served model its rules choose: :mod:`..model_routing`),
where it may run (model, pool by context bucket, class) and by when (the deadline): the
:class:`~tokenfleet.gateway.targets.Admitted` request, built once, or the refusal."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import Counter

from tokenfleet.gateway import model_routing
from tokenfleet.gateway.catalog import Tenant
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.intake import Bodies, authenticate
from tokenfleet.gateway.live import Live
from tokenfleet.gateway.policy import bodies, deadlines, usage
from tokenfleet.gateway.policy.rejections import Reason, Rejected
from tokenfleet.gateway.policy.salt import cache_salt
from tokenfleet.gateway.stages import context, events
from tokenfleet.gateway.targets import Admitted, place, spare_for

#: A revision pin from a tenant not granted it (Tenant.spec.revisionPinning).
PIN_REFUSED = Rejected(
    reason=Reason.REVISION_PIN_NOT_ALLOWED,
    message="this tenant may not pin a revision (X-TokenFleet-Revision); its Tenant needs "
    "spec.revisionPinning: true",
)


class Intake:
    """Authentication, validation, direction and placement, with what they read."""

    def __init__(
        self,
        *,
        live: Live,
        settings: Settings,
        draw: Callable[[], float],
        route_decisions: Counter,
    ) -> None:
        """``draw``: the routing random source (a route's weighted choice); ``settings``: the
        body's limits and the salt's secret."""
        self._live, self._settings = live, settings
        self._bodies = Bodies(settings)
        self._draw, self._route_decisions = draw, route_decisions

    async def admit(self, request: web.Request, passage: context.Passage) -> Admitted | Rejected:
        """Steps 1-3: who asks, for which model and pool, in which class, by when."""
        catalog, trace = self._live.catalog, passage.trace
        tenant = authenticate(catalog, request.headers.get("Authorization"))  # 1 authenticate
        if isinstance(tenant, Rejected):
            return tenant
        if passage.identity.pinned is not None and not tenant.revision_pinning:
            return refused(trace, PIN_REFUSED, tenant=tenant)  # a pin skews a canary's analysis
        parsed = await self._bodies.parse(  # 2 validate (its cost held until release)
            request, passage.identity.kind, tenant=tenant.key, holder=passage
        )
        if isinstance(parsed, Rejected):
            return refused(trace, parsed, tenant=tenant)
        directed = self._direct(request, tenant, parsed, trace)  # a route → the model it picks
        if isinstance(directed, Rejected):
            return refused(trace, directed, tenant=tenant)
        parsed = directed.parsed if directed else parsed
        primary = place(catalog, tenant, parsed, granted=directed is not None)
        if isinstance(primary, Rejected):
            return refused(trace, primary, tenant=tenant, model=parsed.model)
        trace.add(events.Placed(tenant.key, parsed.model, primary.pool.key, primary.cls))
        due = deadlines.deadline(  # 3 assign: the class is the pool's, the deadline its default
            now=passage.identity.started,
            header=request.headers.get(deadlines.HEADER),
            default_seconds=primary.pool.classes[primary.cls].default_deadline,
        )
        if isinstance(due, Rejected):
            return due
        return Admitted(
            tenant=tenant,
            parsed=parsed,
            primary=primary,
            fallback=spare_for(catalog, primary, tenant=tenant, prompt_tokens=parsed.prompt_tokens),
            due=due,
            max_tokens=usage.max_tokens(
                parsed.max_tokens,
                cap=tenant.max_tokens_cap,
                context=primary.model.context_tokens,
                prompt_tokens=parsed.prompt_tokens,
                sequences=parsed.sequences,
            ),
            route=directed.entry if directed else None,
            salt=self._salt(tenant, parsed),
        )

    def release(self, passage: context.Passage) -> None:
        """The request has ended: its body's memory is no longer held."""
        self._bodies.release(passage)

    @property
    def bodies_in_flight(self) -> int:
        """Estimated bytes the bodies of requests under way hold."""
        return self._bodies.in_flight

    def _direct(
        self, request: web.Request, tenant: Tenant, parsed: bodies.Parsed, trace: events.Trace
    ) -> model_routing.Directed | Rejected | None:
        """Step 2's route: the target's request, said in the response's headers and counted."""
        catalog = self._live.catalog
        directed = model_routing.direct(
            catalog, tenant, parsed, headers=request.headers, draw=self._draw
        )
        if directed is None or isinstance(directed, Rejected):
            return directed
        trace.add(events.Directed(directed.header))
        self._route_decisions.labels(
            directed.entry.namespace,
            directed.entry.name,
            directed.decision.reason,
            directed.decision.model,
        ).inc()
        return model_routing.unserved(catalog, directed, namespace=tenant.namespace) or directed

    def _salt(self, tenant: Tenant, parsed: bodies.Parsed) -> str:
        """The tenant's cache salt (a salt the client sent only splits it further)."""
        asked = parsed.body.get("cache_salt")
        return cache_salt(
            secret=self._settings.salt_secret,
            tenant=tenant.key,
            group=tenant.cache_group,
            caller=asked if isinstance(asked, str) else "",
        )


def refused(
    trace: events.Trace, rejected: Rejected, *, tenant: Tenant, model: str = ""
) -> Rejected:
    """A refusal before placement: the trace still says who asked (and for which model)."""
    trace.add(events.Authenticated(tenant.key))
    if model:
        trace.add(events.Asked(model))
    return rejected
