"""Whether a LoRA adapter is offered, and to whom (pure): the gateway's half of docs/adapters.md.

An adapter is **offered** only when the operator's verdict is about the adapter as it is now:
``status.verified`` true, for the current generation (``observedGeneration == generation``) and
for the digest the spec pins (``status.digest == spec.artifact.digest``). A spec edited after
the verdict is **pending** again until the operator looks; a verdict of false with a reason is
**refused**.

A request for an adapter is then, in this order:

1. a tenant not named in the adapter's ``spec.tenants`` (same namespace) → 403, whatever the
   tenant's ``allowedModels`` say: ``"*"`` grants models, never another team's adapter, and a
   tenant that may not use it learns nothing about its verdict;
2. pending → 503 with Retry-After (verification takes seconds to minutes);
3. refused → 503 without Retry-After, naming the verdict and where to read it (a client retry
   cannot help: the adapter's owner must fix the artifact or its signature);
4. offered → served.
"""

from __future__ import annotations

import dataclasses
import enum

from tokenfleet.gateway.policy.rejections import Reason, Rejected

#: Retry-After of a pending adapter (seconds): the operator verifies a new artifact in about
#: this long (a fetch and a digest walk); a client asking sooner only asks again.
PENDING_RETRY_SECONDS = 10.0


class Offer(enum.StrEnum):
    """What the operator's verdict lets the gateway do with an adapter."""

    OFFERED = "offered"
    PENDING = "pending"
    REFUSED = "refused"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """An adapter's metadata and status, as far as the offer reads them."""

    generation: int | None
    observed_generation: int | None
    spec_digest: str
    status_digest: str = ""
    verified: bool = False
    reason: str = ""


def offer(verdict: Verdict) -> Offer:
    """Offered only for a verified verdict on this generation and this digest; a verdict that
    names a reason and is not verified (for this generation) is a refusal; else pending."""
    current = (
        verdict.observed_generation is not None
        and verdict.observed_generation == verdict.generation
        and verdict.status_digest == verdict.spec_digest
    )
    if not current:
        return Offer.PENDING
    if verdict.verified:
        return Offer.OFFERED
    return Offer.REFUSED if verdict.reason else Offer.PENDING


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Who asks for which adapter."""

    name: str  # the adapter's served name, as the request's model
    resource: str  # the ModelAdapter's metadata.name (what kubectl describe takes)
    namespace: str  # the ModelAdapter's
    tenants: frozenset[str]  # spec.tenants
    offer: Offer
    reason: str  # the verdict's reason (refused)
    tenant_namespace: str
    tenant_name: str  # the Tenant's metadata.name


def authorize(request: Request) -> Rejected | None:
    """None when the tenant may use the adapter now; else the refusal (the table above)."""
    name = request.name
    allowed = request.tenant_namespace == request.namespace and (
        request.tenant_name in request.tenants
    )
    if not allowed:
        return Rejected(
            reason=Reason.MODEL_NOT_ALLOWED,
            param="model",
            message=f"model '{name}' is not available to you",
        )
    if request.offer is Offer.PENDING:
        return Rejected(
            reason=Reason.ADAPTER_PENDING,
            retry_after=PENDING_RETRY_SECONDS,
            param="model",
            message=f"adapter '{name}' is not verified yet (its signature is being checked); "
            "try again shortly",
        )
    if request.offer is Offer.REFUSED:
        scope = f" -n {request.namespace}" if request.namespace else ""
        return Rejected(
            reason=Reason.ADAPTER_REFUSED,
            param="model",
            message=f"adapter '{name}' failed verification ({request.reason or 'unknown'}); "
            f"see `kubectl describe modeladapter {request.resource}{scope}`",
        )
    return None
