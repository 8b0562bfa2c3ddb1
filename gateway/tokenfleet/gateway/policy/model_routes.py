"""Which served model answers a request sent to a ModelRoute's public name (pure).

A route is compiled once, when its ModelRoute changes (:func:`compile_route`), and consulted per
request (:func:`choose`) with the facts the gateway holds before admission::

    rules, in order ──▶ the first whose match holds ──▶ its targets under the cost ceiling
         │                                                 ├─ some left: one by weight (draw)
         │                                                 └─ none left: the rule does not match
         └─ no rule matched ──▶ defaultTargets, one by weight (draw)

A match holds when every condition it sets holds (a list holds when any entry does). The
classifier's score is a fact like the others: without one (no weights loaded) a rule that asks
for it does not match, so a lost ConfigMap degrades to the rules after it, never to an error.
The weighted pick takes a ``draw`` in [0, 1) from the caller, so the decision is a function of
its inputs and a test names the target it expects.

The choice always says what it did (:attr:`Decision.reason`): the gateway puts it in the
``X-TokenFleet-Route`` header and in metrics, beside the served model it already reports.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from tokenfleet.accounting.cost import Rate
from tokenfleet.api.route import Match, ModelRouteSpec, Rule, Target

#: Response header: the route and the rule (or "default") that chose the served model.
HEADER = "X-TokenFleet-Route"
DEFAULT = "default"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Conditions:
    """A rule's match, ready to test: header names lower-cased, lists as sets."""

    tenants: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    headers: tuple[tuple[str, str], ...] = ()
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    max_requested_tokens: int | None = None
    tools: bool | None = None
    score_above: float | None = None
    score_below: float | None = None

    @classmethod
    def of(cls, match: Match) -> Conditions:
        return cls(
            tenants=frozenset(match.tenants),
            groups=frozenset(match.tenant_groups),
            headers=tuple(sorted((k.lower(), v) for k, v in match.headers.items())),
            min_prompt_tokens=match.min_prompt_tokens,
            max_prompt_tokens=match.max_prompt_tokens,
            max_requested_tokens=match.max_requested_tokens,
            tools=match.tools,
            score_above=match.classifier_above,
            score_below=match.classifier_below,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Weighted:
    """One target with its weight."""

    model: str
    weight: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompiledRule:
    """A rule ready to test."""

    name: str
    conditions: Conditions
    targets: tuple[Weighted, ...]
    max_cost_per_million: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """A ModelRoute compiled for per-request decisions."""

    name: str
    rules: tuple[CompiledRule, ...]
    default: tuple[Weighted, ...]
    currency: str = "USD"

    @property
    def uses_classifier(self) -> bool:
        """Whether any rule reads the score: the gateway scores the prompt only then."""
        return any(
            r.conditions.score_above is not None or r.conditions.score_below is not None
            for r in self.rules
        )

    @property
    def models(self) -> frozenset[str]:
        """Every served model the route may choose (for the Ready condition and the catalog)."""
        return frozenset(t.model for r in self.rules for t in r.targets) | frozenset(
            t.model for t in self.default
        )


def _choices(targets: Sequence[Target]) -> tuple[Weighted, ...]:
    return tuple(Weighted(model=t.model, weight=t.weight) for t in targets)


def _rule(rule: Rule) -> CompiledRule:
    return CompiledRule(
        name=rule.name,
        conditions=Conditions.of(rule.match),
        targets=_choices(rule.targets),
        max_cost_per_million=rule.max_cost_per_million_tokens,
    )


def compile_route(spec: ModelRouteSpec) -> Route:
    """The route as :func:`choose` reads it; the spec is valid (the API server checked it)."""
    return Route(
        name=spec.name,
        rules=tuple(_rule(r) for r in spec.rules),
        default=_choices(spec.default_targets),
        currency=spec.currency,
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What the gateway knows about a request before admission."""

    tenant: str
    #: The tenant's cacheIsolation.group; "" when it is isolated.
    group: str = ""
    #: Request headers, names lower-cased (values as sent).
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The admission estimate (tokenfleet.gateway.policy.bodies.Parsed.prompt_tokens).
    prompt_tokens: int = 0
    #: The request's max_tokens, or the gateway's default when it gave none.
    max_tokens: int = 0
    tools: bool = False
    #: The classifier's P(hard), or None when the route has no classifier or no weights loaded.
    score: float | None = None
    #: Served model → its pool's per-token price; a model missing here has no price.
    prices: Mapping[str, Rate] = dataclasses.field(default_factory=dict)


class Why(enum.StrEnum):
    RULE = "rule"
    DEFAULT = "default"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The served model for this request and which rule chose it."""

    model: str
    why: Why
    rule: str = ""  # the matching rule's name; "" for the default

    @property
    def reason(self) -> str:
        """The rule's name, or "default": what the header and the metrics say."""
        return self.rule or DEFAULT

    def header(self, route: str) -> str:
        """The X-TokenFleet-Route value: ``<route>/<rule or default>``."""
        return f"{route}/{self.reason}"


def holds(conditions: Conditions, facts: Facts) -> bool:
    """Whether a request with ``facts`` shows every condition that is set."""
    c, f = conditions, facts
    if c.tenants and f.tenant not in c.tenants:
        return False
    if c.groups and f.group not in c.groups:
        return False
    if any(f.headers.get(name) != value for name, value in c.headers):
        return False
    if c.min_prompt_tokens is not None and f.prompt_tokens < c.min_prompt_tokens:
        return False
    if c.max_prompt_tokens is not None and f.prompt_tokens > c.max_prompt_tokens:
        return False
    if c.max_requested_tokens is not None and f.max_tokens > c.max_requested_tokens:
        return False
    if c.tools is not None and f.tools != c.tools:
        return False
    if c.score_above is not None or c.score_below is not None:
        if f.score is None:
            return False
        if c.score_above is not None and not f.score > c.score_above:
            return False
        if c.score_below is not None and not f.score < c.score_below:
            return False
    return True


def price_per_million(rate: Rate, *, prompt_tokens: int, max_tokens: int) -> float:
    """The request's price per million tokens on a target: input and output prices blended by
    its own mix (estimated prompt tokens, and max_tokens as the most it may generate)."""
    total = prompt_tokens + max_tokens
    if total <= 0:
        return max(rate.input_per_million, rate.output_per_million)
    spent = prompt_tokens * rate.input_per_million + max_tokens * rate.output_per_million
    return spent / total


def affordable(
    targets: tuple[Weighted, ...], *, ceiling: float | None, currency: str, facts: Facts
) -> tuple[Weighted, ...]:
    """The targets whose price for this request is at most ``ceiling``; all without a ceiling.

    A target without a price, or priced in another currency, cannot be shown to be under the
    ceiling: it is dropped."""
    if ceiling is None:
        return targets
    kept = []
    for target in targets:
        rate = facts.prices.get(target.model)
        if rate is None or rate.currency != currency:
            continue
        price = price_per_million(
            rate, prompt_tokens=facts.prompt_tokens, max_tokens=facts.max_tokens
        )
        if price <= ceiling:
            kept.append(target)
    return tuple(kept)


def pick(targets: tuple[Weighted, ...], *, draw: float) -> str | None:
    """The target ``draw`` (in [0, 1)) falls on, each owning a share of [0, 1) as large as its
    weight's share of the total, in list order; None when every weight is 0."""
    total = sum(t.weight for t in targets)
    if total <= 0:
        return None
    point, reached = draw * total, 0
    for target in targets:
        reached += target.weight
        if target.weight and point < reached:
            return target.model
    return next(t.model for t in reversed(targets) if t.weight)  # draw at (or past) 1.0


def choose(route: Route, *, facts: Facts, draw: float) -> Decision:
    """The served model for a request: the first rule that matches (and keeps a target under
    its cost ceiling) picks by weight; when none does, the default targets do."""
    for rule in route.rules:
        if not holds(rule.conditions, facts):
            continue
        kept = affordable(
            rule.targets, ceiling=rule.max_cost_per_million, currency=route.currency, facts=facts
        )
        model = pick(kept, draw=draw)
        if model is not None:
            return Decision(model=model, why=Why.RULE, rule=rule.name)
    model = pick(route.default, draw=draw)
    if model is None:  # the API refuses an all-zero default; a hand-built route may not
        raise ValueError(f"route {route.name}: every default target has weight 0")
    return Decision(model=model, why=Why.DEFAULT)


def offers_tools(body: Mapping[str, Any]) -> bool:
    """Whether an OpenAI request body offers tools: a non-empty ``tools`` (or the older
    ``functions``) list."""
    return any(isinstance(body.get(k), list) and body[k] for k in ("tools", "functions"))


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content array joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def latest_user_text(body: Mapping[str, Any]) -> str:
    """What the classifier scores: the latest user turn of a chat (or Responses) request, else
    the prompt of a completion (its first string); "" when there is none.

    The latest turn, not the whole conversation: it is what is being asked now, and a long
    history would otherwise make every follow-up look like the first question."""
    turns = body.get("messages")
    if not isinstance(turns, list):
        turns = body.get("input")
    if isinstance(turns, str):
        return turns
    if isinstance(turns, list):
        for turn in reversed(turns):
            if isinstance(turn, Mapping) and turn.get("role", "user") == "user":
                return _text(turn.get("content"))
        return ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = next((p for p in prompt if isinstance(p, str)), "")
    return prompt if isinstance(prompt, str) else ""
