"""Tenant: who may call — API key hashes, allowed models, priority class, token quotas."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from tokenfleet.api.base import (
    DNS_LABEL,
    Condition,
    Model,
    cel,
    conditions_field,
    observed_generation_field,
    validations,
)


class ApiKeySecretRef(Model):
    """The Secret that holds this tenant's API key hashes (never the keys)."""

    name: str = Field(
        pattern=DNS_LABEL,
        max_length=253,
        description="Secret in the same namespace; each data entry is one key's "
        "sha256:<hex> hash. `tokenfleet tenant create-key` writes it.",
    )


class Quotas(Model):
    """Token-aware limits, shared by every gateway replica. Unset means unlimited."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.tokensPerMinute) || !has(self.tokensPerDay) || "
                "self.tokensPerDay >= self.tokensPerMinute",
                "quotas.tokensPerDay must be at least quotas.tokensPerMinute",
            )
        )
    )

    requests_per_minute: int | None = Field(default=None, ge=1, description="Requests per minute.")
    tokens_per_minute: int | None = Field(
        default=None, ge=1, description="Input plus output tokens per minute."
    )
    tokens_per_day: int | None = Field(
        default=None, ge=1, description="Input plus output tokens per UTC day."
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, description="Requests in flight at once."
    )


class CacheIsolation(Model):
    """Whose prefix-cache entries this tenant may hit. The gateway sets vLLM's cache_salt."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(self.mode == 'SharedGroup') == (size(self.group) > 0)",
                "cacheIsolation: group must be set when mode is SharedGroup, and only then",
            )
        )
    )

    mode: Literal["Isolated", "SharedGroup"] = Field(
        default="Isolated",
        description="Isolated: a salt of its own. SharedGroup: the salt of the named group.",
    )
    group: str = Field(
        default="", max_length=63, description="Group whose tenants share cache entries."
    )


BudgetAction = Literal["Reject", "Downgrade", "Notify"]


class Budget(Model):
    """A spending limit per period and what happens once it is spent."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.tokens) != has(self.amount)",
                "budget: set exactly one of tokens and amount",
            ),
            cel(
                "(self.action == 'Downgrade') == (size(self.downgradeTo) > 0)",
                "budget: downgradeTo must name a model when action is Downgrade, and only then",
            ),
        )
    )

    period: Literal["Monthly", "Daily"] = Field(
        default="Monthly", description="Budget period; it resets at 00:00 UTC (day or month)."
    )
    tokens: int | None = Field(
        default=None, ge=1, description="Limit in input plus output tokens per period."
    )
    amount: float | None = Field(
        default=None,
        gt=0,
        description="Limit in currency units per period, priced from the pools' spec.cost.",
    )
    currency: str = Field(
        default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code of amount."
    )
    action: BudgetAction = Field(
        default="Reject",
        description="Once spent — Reject: 429 with the reset time; Downgrade: serve "
        "downgradeTo instead (X-TokenFleet-Downgraded header); Notify: serve, set the "
        "BudgetExceeded condition and emit an event.",
    )
    downgrade_to: str = Field(
        default="", max_length=253, description="Served model name used once spent (Downgrade)."
    )


class TenantSpec(Model):
    """Desired access."""

    api_key_secret_ref: ApiKeySecretRef = Field(description="Secret with key hashes.")
    allowed_models: list[str] = Field(
        min_length=1,
        max_length=64,
        description='Served model names this tenant may call; "*" allows all.',
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    priority_class: str = Field(
        default="interactive",
        pattern=DNS_LABEL,
        max_length=63,
        description="Admission class of this tenant's requests (a class of the pool).",
    )
    quotas: Quotas = Field(default_factory=Quotas, description="Token-aware limits.")
    cache_isolation: CacheIsolation = Field(
        default_factory=CacheIsolation, description="Prefix-cache sharing policy."
    )
    revision_pinning: bool = Field(
        default=False,
        description="May send X-TokenFleet-Revision to pin a request to one revision (tests, "
        "operators' tools). A pinned request bypasses the canary weights and counts in that "
        "revision's analysis, so it is refused (403) for tenants not granted it.",
    )
    max_tokens_cap: int | None = Field(
        default=None, ge=1, description="Largest max_tokens a request may ask for."
    )
    share: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Weight of this tenant among the tenants of its priority class: under "
        "contention each gets token work in proportion to its share.",
    )
    budget: Budget | None = Field(default=None, description="Spending limit per period.")

    @model_validator(mode="after")
    def _mirror_cel(self) -> TenantSpec:
        """The CRD's CEL rules, so that parsing outside the API server rejects the same specs."""
        q, c = self.quotas, self.cache_isolation
        per_day, per_minute = q.tokens_per_day, q.tokens_per_minute
        if per_day is not None and per_minute is not None and per_day < per_minute:
            raise ValueError("quotas.tokensPerDay must be at least quotas.tokensPerMinute")
        if (c.mode == "SharedGroup") != bool(c.group):
            raise ValueError("cacheIsolation: group must be set when mode is SharedGroup")
        b = self.budget
        if b is not None and (b.tokens is None) == (b.amount is None):
            raise ValueError("budget: set exactly one of tokens and amount")
        if b is not None and (b.action == "Downgrade") != bool(b.downgrade_to):
            raise ValueError("budget: downgradeTo must name a model when action is Downgrade")
        return self


class UsageStatus(Model):
    """What the tenant used in the current budget period (from the usage ledger)."""

    period_start: str = Field(description="RFC 3339 start of the period (UTC).")
    requests: int = Field(default=0, ge=0, description="Requests settled this period.")
    prompt_tokens: int = Field(default=0, ge=0, description="Prompt tokens this period.")
    completion_tokens: int = Field(default=0, ge=0, description="Completion tokens this period.")
    cost: str = Field(
        default="",
        description="Cost this period at the serving pools' per-token prices (spec.cost) as "
        "decimal text with currency, e.g. 12.40 USD; empty when no pool it used is priced.",
    )


class BudgetStatus(Model):
    """Where the tenant stands against spec.budget."""

    state: Literal["WithinBudget", "Exhausted"] = Field(description="Spent or not.")
    used_percent: int = Field(default=0, ge=0, description="Share of the limit used, percent.")
    resets_at: str = Field(description="RFC 3339 time the period ends.")
    limit: str = Field(default="", description="The period's limit, e.g. 50.00 USD or 1000 tokens.")
    spent: str = Field(default="", description="Spent this period, in the limit's unit.")
    remaining: str = Field(default="", description="Left this period (0 once spent).")


class TenantStatus(Model):
    """Observed state of the tenant."""

    observed_generation: int | None = observed_generation_field()
    key_count: int = Field(
        default=0,
        description="API key hashes in the labelled key Secrets (counted from their metadata).",
    )
    usage: UsageStatus | None = Field(default=None, description="Usage this period.")
    budget: BudgetStatus | None = Field(default=None, description="Budget state.")
    last_used: str | None = Field(
        default=None,
        description="RFC 3339 time the tenant was last served (the gateways' last-served gauge "
        "as Prometheus holds it; never moves back).",
    )
    conditions: list[Condition] = conditions_field()


class Tenant(Model):
    """A caller of the platform."""

    spec: TenantSpec = Field(description="Desired access.")
    status: TenantStatus | None = Field(default=None, description="Observed state.")
