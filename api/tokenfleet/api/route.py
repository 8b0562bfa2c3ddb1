"""ModelRoute: one public model name, routed to served models by ordered rules, weights and cost.

A client sends ``"model": "chat-auto"``; the route picks which served model (a ModelDeployment's
name or alias, or a ModelAdapter's) answers, from facts the gateway already has before it admits
the request: the tenant, its cache group, headers, the estimated prompt length, the requested
``max_tokens``, whether tools are offered, and optionally a cheap classifier's score. The answer
always names the model that served it (the response's ``model`` and a header): a route never
changes the model silently. Semantics (first match wins, weights, the cost ceiling) are in
``docs/routes.md``; the decision itself is ``tokenfleet.gateway.policy.model_routes``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from tokenfleet.api.base import (
    DNS_LABEL,
    SHARED_WITH_DESCRIPTION,
    Condition,
    Model,
    SharedNamespace,
    cel,
    conditions_field,
    observed_generation_field,
    refuse_first,
    validations,
)
from tokenfleet.api.deployment import MODEL_NAME

TenantName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
GroupName = Annotated[str, Field(min_length=1, max_length=63)]
#: An HTTP header name (RFC 9110 token characters that real clients send).
HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]*$"

#: CEL: target models are unique within one list (a weight says how often, not a repeat).
_UNIQUE_MODELS = "self.all(t, self.exists_one(u, u.model == t.model))"
_UNIQUE_MODELS_MESSAGE = "list each target model once; give it a larger weight to send it more"
_SOME_WEIGHT = "self.exists(t, t.weight > 0)"
_SOME_WEIGHT_MESSAGE = "at least one target needs a weight above 0, or nothing could be chosen"


class ClassifierRef(Model):
    """Where the route's classifier weights live: a key of a ConfigMap in the same namespace."""

    config_map: str = Field(
        pattern=DNS_LABEL,
        max_length=253,
        description="ConfigMap holding the weights (a JSON document written by `tokenfleet "
        "route train-classifier`).",
    )
    key: str = Field(
        default="weights.json",
        pattern=r"^[-._a-zA-Z0-9]+$",
        max_length=253,
        description="Key within the ConfigMap's data.",
    )


class Target(Model):
    """One served model a rule may send a request to."""

    model: str = Field(
        pattern=MODEL_NAME,
        max_length=128,
        description="Served model name (a ModelDeployment's name or alias, or a ModelAdapter's "
        "servedName) in this namespace.",
    )
    weight: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Share of the rule's requests this target gets, relative to the others' "
        "weights; 0 keeps it listed but sends it nothing.",
    )


class Match(Model):
    """What a request must show for its rule to apply. Every condition set must hold (AND); a
    list matches when any of its entries does (OR); an unset condition matches every request."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.minPromptTokens) || !has(self.maxPromptTokens) || "
                "self.minPromptTokens <= self.maxPromptTokens",
                "match: minPromptTokens must be at most maxPromptTokens, or no request matches",
            ),
            cel(
                "!has(self.classifierAbove) || !has(self.classifierBelow) || "
                "self.classifierAbove < self.classifierBelow",
                "match: classifierAbove must be below classifierBelow, or no score matches",
            ),
            cel(
                f"self.headers.all(h, h.matches('{HEADER_NAME}'))",
                "match.headers: keys must be HTTP header names (letters, digits and dashes)",
            ),
        )
    )

    tenants: list[TenantName] = Field(
        default_factory=list,
        max_length=256,
        description="Tenants (by name, same namespace as the route) this rule applies to.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    tenant_groups: list[GroupName] = Field(
        default_factory=list,
        max_length=64,
        description="Tenant groups this rule applies to: a tenant's group is its "
        "spec.cacheIsolation.group (mode SharedGroup), the one group a Tenant names.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="Request headers and their exact values (names are case-insensitive, "
        'values are not), e.g. {"X-Task": "summarize"}.',
    )
    min_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The prompt's estimated length is at least this many tokens (the gateway's "
        "admission estimate: about 4 characters a token plus a few per message).",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The prompt's estimated length is at most this many tokens.",
    )
    max_requested_tokens: int | None = Field(
        default=None,
        ge=1,
        description="The request's max_tokens (or the gateway's default when unset) is at most "
        "this.",
    )
    tools: bool | None = Field(
        default=None,
        description="true: the request offers tools (a non-empty tools list); false: it offers "
        "none; unset: either.",
    )
    classifier_above: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The classifier's score (the probability that the prompt is hard) is above "
        "this. Needs spec.classifier; without a score (weights missing) the rule does not match.",
    )
    classifier_below: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The classifier's score is below this. Needs spec.classifier.",
    )

    def is_empty(self) -> bool:
        """No condition at all: the match would take every request."""
        return self == Match()

    def uses_classifier(self) -> bool:
        return self.classifier_above is not None or self.classifier_below is not None


_EMPTY_MATCH = (
    "size(self.match.tenants) == 0 && size(self.match.tenantGroups) == 0 && "
    "size(self.match.headers) == 0 && !has(self.match.minPromptTokens) && "
    "!has(self.match.maxPromptTokens) && !has(self.match.maxRequestedTokens) && "
    "!has(self.match.tools) && !has(self.match.classifierAbove) && "
    "!has(self.match.classifierBelow)"
)


class Rule(Model):
    """One rule: when a request matches, one of its targets serves it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"!({_EMPTY_MATCH}) || has(self.maxCostPerMillionTokens)",
                "rules: a rule without match conditions (or a cost ceiling) takes every request; "
                "put its targets in defaultTargets instead",
            )
        )
    )

    name: str = Field(
        pattern=DNS_LABEL,
        max_length=63,
        description="Names the rule in the X-TokenFleet-Route header and in metrics.",
    )
    match: Match = Field(default_factory=Match, description="What a request must show.")
    targets: list[Target] = Field(
        min_length=1,
        max_length=16,
        description="Served models this rule chooses among, by weight.",
        json_schema_extra=validations(
            cel(_UNIQUE_MODELS, f"rules[].targets: {_UNIQUE_MODELS_MESSAGE}"),
            cel(_SOME_WEIGHT, f"rules[].targets: {_SOME_WEIGHT_MESSAGE}"),
        ),
    )
    max_cost_per_million_tokens: float | None = Field(
        default=None,
        ge=0,
        description="Cost ceiling, in spec.currency: only targets whose price for this request "
        "(its pool's per-million input and output prices, blended by the request's estimated "
        "prompt tokens and max_tokens) is at most this; targets without a price, or priced in "
        "another currency, are dropped. If none is left the rule does not match.",
    )


#: A remote's base URL, as OpenAI SDKs take it (``…/v1``): http(s), a host, an optional path.
BASE_URL = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"
#: Why a request spills to the route's remotes (docs/routes.md, "Spill").
SpillTrigger = Literal["Unavailable", "Overloaded"]
_ALL_TRIGGERS: tuple[SpillTrigger, ...] = ("Unavailable", "Overloaded")


class SecretKeyRef(Model):
    """A key of a Secret mounted into the gateway (never read through the API: see
    ``gateway.remoteKeySecrets`` in the chart and docs/routes.md)."""

    name: str = Field(pattern=DNS_LABEL, max_length=253, description="The Secret's name.")
    key: str = Field(
        default="api-key",
        pattern=r"^[-._a-zA-Z0-9]+$",
        max_length=253,
        description="Key within the Secret's data: the bearer token sent to the remote.",
    )


class SpendBudget(Model):
    """What each tenant may spend on one remote per period, in spec.currency."""

    amount: float = Field(gt=0, description="Per tenant and period, in spec.currency.")
    period: Literal["Daily", "Monthly"] = Field(
        default="Daily", description="Resets at 00:00 UTC (day or month)."
    )


class RemotePrice(Model):
    """What the remote charges, in spec.currency: it prices the spend budget."""

    input_per_million_tokens: float = Field(
        default=0.0, ge=0, description="Per million prompt tokens."
    )
    output_per_million_tokens: float = Field(
        default=0.0, ge=0, description="Per million completion tokens."
    )


class Remote(Model):
    """Somewhere outside this cluster's pools that can answer the route's requests when the
    local targets cannot: another TokenFleet gateway (another region or cluster) or any
    OpenAI-compatible provider."""

    name: str = Field(
        pattern=DNS_LABEL,
        max_length=63,
        description="Names the remote in the X-TokenFleet-Target header, metrics and usage.",
    )
    kind: Literal["Gateway", "OpenAI"] = Field(
        description="Gateway: another TokenFleet gateway (its X-TokenFleet-Model header names "
        "what served); OpenAI: any OpenAI-compatible provider.",
    )
    base_url: str = Field(
        pattern=BASE_URL,
        max_length=2048,
        description="Base URL as OpenAI SDKs take it, e.g. https://gw.eu-west.example.com/v1; "
        "the request's path (/chat/completions, /completions) is appended.",
    )
    model: str | None = Field(
        default=None,
        pattern=MODEL_NAME,
        max_length=128,
        description="Model name sent to the remote. Default: the route's public name (a "
        "Gateway remote serving the same route). Required for an OpenAI remote.",
    )
    api_key_secret: SecretKeyRef = Field(description="The bearer token the remote expects.")
    timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Longest a spilled request may take there (the request's deadline, if "
        "sooner, wins).",
    )
    max_concurrency: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Requests this gateway process sends there at once; beyond it the remote is "
        "skipped (the next one, or the local refusal, answers).",
    )
    price: RemotePrice = Field(default_factory=RemotePrice, description="Its price per token.")
    budget: SpendBudget | None = Field(
        default=None,
        description="Per-tenant spend limit on this remote; once spent the remote is skipped "
        "for that tenant. Unset: no limit (set one for a paid provider).",
    )


class ModelRouteSpec(Model):
    """Desired routing of one public model name."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.rules.all(r, self.rules.exists_one(s, s.name == r.name))",
                "rules: rule names must be unique (they name the rule in headers and metrics)",
            ),
            cel(
                "has(self.classifier) || self.rules.all(r, !has(r.match.classifierAbove) && "
                "!has(r.match.classifierBelow))",
                "rules: classifierAbove and classifierBelow need spec.classifier (the weights' "
                "ConfigMap)",
            ),
            cel(
                "self.remotes.all(r, self.remotes.exists_one(s, s.name == r.name))",
                "remotes: remote names must be unique (they name the remote in headers, metrics "
                "and usage)",
            ),
            cel(
                "self.remotes.all(r, r.kind != 'OpenAI' || has(r.model))",
                "remotes: an OpenAI remote needs model (the provider's name for the model to use)",
            ),
            cel(
                "self.defaultTargets.all(t, t.model != self.name) && "
                "self.rules.all(r, r.targets.all(t, t.model != self.name))",
                "targets must name served models, not the route's own name",
            ),
        )
    )

    name: str = Field(
        pattern=MODEL_NAME,
        max_length=128,
        description="The public model name clients send (the request's model); it must not be "
        "a served model's name too.",
    )
    rules: list[Rule] = Field(
        default_factory=list,
        max_length=32,
        description="Rules in order: the first that matches chooses the target.",
    )
    default_targets: list[Target] = Field(
        min_length=1,
        max_length=16,
        description="Where a request that matches no rule goes, by weight.",
        json_schema_extra=validations(
            cel(_UNIQUE_MODELS, f"defaultTargets: {_UNIQUE_MODELS_MESSAGE}"),
            cel(_SOME_WEIGHT, f"defaultTargets: {_SOME_WEIGHT_MESSAGE}"),
        ),
    )
    classifier: ClassifierRef | None = Field(
        default=None,
        description="A cheap classifier scoring each prompt (the probability it is hard), for "
        "rules with classifierAbove or classifierBelow.",
    )
    currency: str = Field(
        default="USD",
        pattern=r"^[A-Z]{3}$",
        description="ISO 4217 code of the rules' cost ceilings (the pools' spec.cost.currency) "
        "and of the remotes' prices and budgets.",
    )
    remotes: list[Remote] = Field(
        default_factory=list,
        max_length=8,
        description="Where requests spill, in order, when the chosen local target cannot take "
        "them (spillOn): each remote is tried once, within the tenant's budget there.",
    )
    spill_on: list[SpillTrigger] = Field(
        default_factory=lambda: list(_ALL_TRIGGERS),
        max_length=2,
        description="Unavailable: the target (and its fallback model) has no ready replica, "
        "or every replica tried failed before answering (a lost zone or region); Overloaded: "
        "the local queue shed or refused it (queue full, shed, deadline unmeetable, queue "
        "timeout). Only with remotes.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    shared_with: list[SharedNamespace] = Field(
        default_factory=list,
        max_length=64,
        description=SHARED_WITH_DESCRIPTION,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> ModelRouteSpec:
        """The CRD's CEL rules, so that parsing outside the API server refuses the same specs."""
        names = [r.name for r in self.rules]
        problems = [
            *(p for r in self.rules for p in _rule_problems(r, classifier=self.classifier)),
            (len(set(names)) != len(names), "rules: rule names must be unique"),
            *_targets_problems("defaultTargets", self.default_targets, self.name),
            *_remotes_problems(self.remotes),
            *(
                p
                for r in self.rules
                for p in _targets_problems("rules[].targets", r.targets, self.name)
            ),
        ]
        refuse_first(problems)
        return self


def _rule_problems(rule: Rule, *, classifier: ClassifierRef | None) -> list[tuple[bool, str]]:
    m = rule.match
    return [
        (
            m.is_empty() and rule.max_cost_per_million_tokens is None,
            "rules: a rule without match conditions (or a cost ceiling) takes every request; "
            "put its targets in defaultTargets instead",
        ),
        (
            m.min_prompt_tokens is not None
            and m.max_prompt_tokens is not None
            and m.min_prompt_tokens > m.max_prompt_tokens,
            "match: minPromptTokens must be at most maxPromptTokens",
        ),
        (
            m.classifier_above is not None
            and m.classifier_below is not None
            and m.classifier_above >= m.classifier_below,
            "match: classifierAbove must be below classifierBelow",
        ),
        (
            any(re.fullmatch(HEADER_NAME, h) is None for h in m.headers),
            "match.headers: keys must be HTTP header names",
        ),
        (
            m.uses_classifier() and classifier is None,
            "rules: classifierAbove and classifierBelow need spec.classifier",
        ),
    ]


def _targets_problems(where: str, targets: list[Target], route: str) -> list[tuple[bool, str]]:
    models = [t.model for t in targets]
    return [
        (len(set(models)) != len(models), f"{where}: {_UNIQUE_MODELS_MESSAGE}"),
        (all(t.weight == 0 for t in targets), f"{where}: {_SOME_WEIGHT_MESSAGE}"),
        (route in models, "targets must name served models, not the route's own name"),
    ]


def _remotes_problems(remotes: list[Remote]) -> list[tuple[bool, str]]:
    names = [r.name for r in remotes]
    return [
        (len(set(names)) != len(names), "remotes: remote names must be unique"),
        (
            any(r.kind == "OpenAI" and r.model is None for r in remotes),
            "remotes: an OpenAI remote needs model",
        ),
    ]


#: Reasons of the Ready condition: every target model and the classifier's weights exist.
READY_REASONS = (
    "TargetsFound",
    "TargetNotFound",
    "NameConflict",
    "ClassifierNotFound",
    "ClassifierInvalid",
)


class ModelRouteStatus(Model):
    """Observed state of the route, written by the operator. Ready is True when every target
    names a served model of the namespace and the classifier's weights load (reason
    TargetsFound); else False with TargetNotFound, NameConflict (spec.name is also a served
    model's name), ClassifierNotFound or ClassifierInvalid. A route with remotes also has
    RemotesReady: True (KeysFound) when every remote's key Secret and key exist in the
    gateway's namespace and the key is bound to a URL, else False (KeySecretNotFound,
    KeyMissing, KeyUnbound)."""

    observed_generation: int | None = observed_generation_field()
    conditions: list[Condition] = conditions_field()


class ModelRoute(Model):
    """A public model name routed to served models by ordered rules, weights and cost."""

    spec: ModelRouteSpec = Field(description="Desired routing.")
    status: ModelRouteStatus | None = Field(default=None, description="Observed state.")
