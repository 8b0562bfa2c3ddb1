"""A Tenant's status, decided from values (pure).

Keys are counted from the labelled key Secrets' *metadata*: the operator never sees a key hash.
A Secret's ``metadata.managedFields`` names every data entry some field manager set
(``f:data`` → ``f:<entry>``), so keys written by ``kubectl create secret``, GitOps or
sealed-secrets count exactly like those of ``tokenfleet tenant create-key``. Without that list
(an older loop, a failed read), the annotation `tokenfleet tenant create-key` keeps on the
Tenant is the fallback. Usage this period, its cost and the budget state come from the gateway's
usage counters in Prometheus (:func:`usage_of`), which the operator already reads for scaling,
priced per pool as the gateway prices them (:func:`pool_rates`); the last-used time from the
gateways' last-served gauge (:func:`latest`). The operator needs no Redis client and no grant
beyond those it has; the gateway's Redis counters stay what enforces a budget.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from tokenfleet.accounting import budget, cost
from tokenfleet.api import labels
from tokenfleet.api.base import rfc3339
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.api.tenant import Budget, TenantStatus, UsageStatus
from tokenfleet.operator.plan.reporting import Event, changed_to, condition


def _old_status(raw: Mapping[str, Any] | None) -> TenantStatus | None:
    """Status as the previous pass wrote it; unreadable status starts over."""
    try:
        return TenantStatus.model_validate(dict(raw)) if raw else None
    except pydantic.ValidationError:
        return None


def data_entries(secret_meta: Mapping[str, Any]) -> frozenset[str]:
    """Names of a Secret's data entries, from its managedFields (metadata only)."""
    names: set[str] = set()
    for managed in secret_meta.get("managedFields") or []:
        fields = (managed.get("fieldsV1") or {}).get("f:data") or {}
        names.update(k[2:] for k in fields if k.startswith("f:"))
    return frozenset(names)


def key_index(secrets: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], frozenset[str]]:
    """(namespace, name) → data entry names, for every labelled key Secret listed."""
    return {(m.get("namespace", ""), m.get("name", "")): data_entries(m) for m in secrets}


def _key_count(
    body: Mapping[str, Any], key_secrets: Mapping[tuple[str, str], frozenset[str]] | None
) -> int:
    meta = body["metadata"]
    if key_secrets is not None:
        ref = ((body.get("spec") or {}).get("apiKeySecretRef") or {}).get("name", "")
        return len(key_secrets.get((meta.get("namespace", ""), ref), frozenset()))
    text = (meta.get("annotations") or {}).get(labels.API_KEY_COUNT, "0")
    return int(text) if text.isdigit() else 0


def _budget_of(body: Mapping[str, Any]) -> Budget | None:
    raw = (body.get("spec") or {}).get("budget")
    try:
        return Budget.model_validate(raw) if raw else None
    except pydantic.ValidationError:
        return None


def period_of(body: Mapping[str, Any], now: datetime.datetime) -> budget.Period:
    """The tenant's current budget period (Monthly without a budget)."""
    spec_budget = _budget_of(body)
    return budget.period_of(spec_budget.period if spec_budget else "Monthly", now)


#: Pool (namespace/name) → UsageStatus field → the tenant's growth there this period.
ByPool = Mapping[str, Mapping[str, int]]


def totals(by_pool: ByPool) -> dict[str, int]:
    """The tenant's counters summed over its pools."""
    out: dict[str, int] = {}
    for counters in by_pool.values():
        for field, value in counters.items():
            out[field] = out.get(field, 0) + value
    return out


def pool_rates(pools: Iterable[Mapping[str, Any]]) -> dict[str, cost.Rate | None]:
    """Pool (namespace/name) → its price per million tokens
    (:func:`tokenfleet.accounting.cost.rate_of`, the gateway's); a pool whose spec does not parse
    is unpriced."""
    out: dict[str, cost.Rate | None] = {}
    for body in pools:
        meta = body["metadata"]
        try:
            spec = InferencePoolSpec.model_validate(body.get("spec") or {})
        except pydantic.ValidationError:
            continue
        out[f"{meta['namespace']}/{meta['name']}"] = cost.rate_of(spec)
    return out


def usage_of(
    *,
    body: Mapping[str, Any],
    counters: Mapping[str, int] | None,
    period: budget.Period,
    by_pool: ByPool | None = None,
    rates: Mapping[str, cost.Rate | None] | None = None,
) -> tuple[UsageStatus | None, int | None]:
    """This period's usage and the budget's used units, from the tenant's counter growth
    (:meth:`PrometheusSignals.tenant_usage`; None: unreadable, both left out).

    With the growth ``by_pool`` and the pools' ``rates``, the usage carries its cost and a
    currency budget its used micro-units, priced as the gateway prices them
    (:func:`tokenfleet.accounting.budget.charge` per pool); without them, a currency budget's used
    units are unknown: None."""
    if counters is None:
        return None, None
    use = UsageStatus(
        period_start=rfc3339(period.start),
        requests=counters.get("requests", 0),
        prompt_tokens=counters.get("prompt_tokens", 0),
        completion_tokens=counters.get("completion_tokens", 0),
    )
    spec_budget = _budget_of(body)
    if by_pool is None or rates is None:
        tokens_budget = spec_budget is not None and spec_budget.tokens is not None
        return use, use.prompt_tokens + use.completion_tokens if tokens_budget else None
    tokens = {
        pool: (c.get("prompt_tokens", 0), c.get("completion_tokens", 0))
        for pool, c in by_pool.items()
    }
    spent = cost.priced(tokens, rates)
    use = use.model_copy(
        update={"cost": ", ".join(cost.money(v, c) for c, v in sorted(spent.items()))}
    )
    if spec_budget is None:
        return use, None
    used = sum(
        budget.charge(spec_budget, prompt_tokens=p, completion_tokens=c, rate=rates.get(pool))
        for pool, (p, c) in tokens.items()
    )
    return use, used


def latest(old: str | None, seen: datetime.datetime | None) -> str | None:
    """``lastUsed``: the later of what status said and what Prometheus saw, so it never moves
    back when the lookback window no longer holds the last sample."""
    before = _parsed_time(old)
    if seen is None or (before is not None and before >= seen):
        return old if before is not None else None
    return rfc3339(seen)


def _parsed_time(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def plan_tenant(
    *,
    body: Mapping[str, Any],
    now: datetime.datetime,
    key_secrets: Mapping[tuple[str, str], frozenset[str]] | None = None,
    usage: UsageStatus | None = None,
    budget_used: int | None = None,
    last_used: datetime.datetime | None = None,
) -> tuple[TenantStatus, list[Event]]:
    """New status and the events its changes deserve.

    ``key_secrets`` is :func:`key_index` of the labelled Secrets (None: not read, use the
    annotation); ``usage`` and ``budget_used`` (in the budget's units) are this period's, from
    the ledger (None: unknown, left out).
    """
    meta = body["metadata"]
    old = _old_status(body.get("status"))
    old_conditions = old.conditions if old else []
    keys = _key_count(body, key_secrets)
    if keys:
        verdict = (True, "KeysPresent", f"{keys} API key(s); callers may use the allowed models")
    else:
        verdict = (
            False,
            "NoKeys",
            f"no API keys yet: run `tokenfleet tenant create-key "
            f"{meta['name']} -n {meta['namespace']}`",
        )
    ready = condition(
        old_conditions,
        type="Ready",
        status=verdict[0],
        reason=verdict[1],
        message=verdict[2],
        now=now,
        generation=meta.get("generation"),
    )
    spec_budget = _budget_of(body)
    budget_state = (
        budget.state(budget=spec_budget, used=budget_used, now=now)
        if spec_budget is not None and budget_used is not None
        else None
    )
    conditions = [ready]
    if budget_state is not None and spec_budget is not None:
        spent = budget_state.state == "Exhausted"
        conditions.append(
            condition(
                old_conditions,
                type="BudgetExceeded",
                status=spent,
                reason="BudgetSpent" if spent else "WithinBudget",
                message=f"{budget_state.used_percent}% of the {spec_budget.period.lower()} "
                f"budget used; action {spec_budget.action}; resets {budget_state.resets_at}",
                now=now,
                generation=meta.get("generation"),
            )
        )
    status = TenantStatus(
        observed_generation=meta.get("generation"),
        key_count=keys,
        usage=usage,
        budget=budget_state,
        last_used=latest(old.last_used if old else None, last_used),
        conditions=conditions,
    )
    events = []
    if changed_to(old_conditions, status.conditions, "Ready", "True"):
        events.append(Event(type="Normal", reason="KeysPresent", message=verdict[2]))
    if changed_to(old_conditions, status.conditions, "BudgetExceeded", "True"):
        events.append(Event(type="Warning", reason="BudgetSpent", message=conditions[-1].message))
    return status, events


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """What one pass read for every Tenant (:mod:`tokenfleet.operator.tenant_inputs`)."""

    key_secrets: Mapping[tuple[str, str], frozenset[str]] | None  # None: unreadable
    usage: Mapping[datetime.datetime, Mapping[str, ByPool]]  # period start → tenant → by pool
    last_served: Mapping[str, datetime.datetime]  # tenant → when a gateway last served it
    rates: Mapping[str, cost.Rate | None]  # pool → its price per million tokens


def plan_from(
    *, body: Mapping[str, Any], inputs: Inputs, now: datetime.datetime
) -> tuple[TenantStatus, list[Event]]:
    """One Tenant's new status and events from what the pass read: :func:`usage_of` for its
    period (None when Prometheus did not answer for it), then :func:`plan_tenant`."""
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    period = period_of(body, now)
    counters = inputs.usage.get(period.start)
    by_pool = None if counters is None else counters.get(key, {})
    use, used = usage_of(
        body=body,
        counters=None if by_pool is None else totals(by_pool),
        period=period,
        by_pool=by_pool,
        rates=inputs.rates,
    )
    return plan_tenant(
        body=body,
        now=now,
        key_secrets=inputs.key_secrets,
        usage=use,
        budget_used=used,
        last_used=inputs.last_served.get(key),
    )
