"""Spill: when a ModelRoute's request goes to one of the route's remotes, and what it sends there
(pure; the shell is :mod:`tokenfleet.gateway.spill`, the semantics docs/routes.md "Spill").

A request spills only after the local side refused it for a reason the route's ``spillOn``
names — never for the tenant's own limits (quota, concurrency, budget) or a bad request, which
no other region would answer differently:

- **Unavailable** — the target (and its fallback model) has no ready replica, or every replica
  tried failed before answering: a lost zone, pool or region;
- **Overloaded** — the local queue refused it: full, shed, its deadline unmeetable, or it
  waited past the class's age limit.

Remotes are tried in the route's order, each once; one that failed lately is skipped while it
is ejected (:mod:`tokenfleet.gateway.remotes`), so a lost region costs one failed try, not one
per request. The first try is not a retry when nothing
was sent locally (no replica, shed): it is the request's first attempt, so a lost pool spills
every request, not only the retry budget's share. A try after a local attempt failed upstream,
and every further remote, is a retry and takes the retry budget, which is what bounds
amplification when everything is failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenfleet.accounting import cost
from tokenfleet.api.route import Remote
from tokenfleet.gateway.policy.rejections import Reason

#: The local refusals that may spill, by the spillOn trigger that covers them.
TRIGGERS: Mapping[Reason, str] = {
    Reason.NO_ENDPOINTS: "Unavailable",
    Reason.UPSTREAM_ERROR: "Unavailable",
    Reason.UPSTREAM_TIMEOUT: "Unavailable",
    Reason.QUEUE_FULL: "Overloaded",
    Reason.SHED: "Overloaded",
    Reason.DEADLINE_UNMEETABLE: "Overloaded",
    Reason.QUEUE_TIMEOUT: "Overloaded",
}

#: What a try at a remote ended as (the spills counter's outcome).
SERVED, FAILED = "served", "failed"
SKIPPED_BUDGET, SKIPPED_KEY, SKIPPED_BUSY, SKIPPED_RETRIES, SKIPPED_EJECTED = (
    "budget",
    "no_key",
    "busy",
    "retry_budget",
    "ejected",
)

#: vLLM's extension: a provider may refuse an unknown field, and another gateway salts itself.
_ENGINE_ONLY = ("cache_salt",)


def trigger(reason: Reason, *, spill_on: tuple[str, ...]) -> str | None:
    """The spillOn trigger a local refusal falls under, if the route spills on it."""
    found = TRIGGERS.get(reason)
    return found if found is not None and found in spill_on else None


def takes_retry(*, tried_remotes: int, sent_locally: bool) -> bool:
    """Whether the next try at a remote is a retry (module docstring)."""
    return tried_remotes > 0 or sent_locally


def rate(remote: Remote, currency: str) -> cost.Rate:
    return cost.Rate(
        input_per_million=remote.price.input_per_million_tokens,
        output_per_million=remote.price.output_per_million_tokens,
        currency=currency,
    )


def estimate(
    remote: Remote, *, currency: str, prompt_tokens: int, max_tokens: int, sequences: int = 1
) -> int:
    """The most a request may cost there, in micro-units: what its spend budget holds first
    (``max_tokens`` for each of its sequences: bodies.Parsed.sequences)."""
    return cost.micro(
        prompt_tokens=prompt_tokens,
        completion_tokens=max_tokens * max(1, sequences),
        rate=rate(remote, currency),
    )


def remote_body(
    engine_body: Mapping[str, Any], *, remote: Remote, route_name: str, salt: str
) -> dict[str, Any]:
    """The body sent to a remote: the engine's (``max_tokens`` as reserved, a usage report
    asked for on streams), with the remote's model name. A provider gets no vLLM extension.
    Another TokenFleet gateway gets this tenant's cache salt as ``cache_salt``: it mixes a
    caller's salt into its own per-tenant one, so tenants spilled through one remote tenant
    still never share prefix-cache blocks there."""
    body = {k: v for k, v in engine_body.items() if k not in _ENGINE_ONLY}
    body["model"] = remote.model or route_name
    if remote.kind == "Gateway":
        body["cache_salt"] = salt
    return body


def url(remote: Remote, path: str) -> str:
    """The remote's URL for a request path (``/v1/chat/completions``): the base URL names the
    API root, as OpenAI SDKs take it, so the path's ``/v1`` is not repeated."""
    base = remote.base_url.rstrip("/")
    rest = path.removeprefix("/v1") if base.endswith("/v1") else path
    return base + rest
