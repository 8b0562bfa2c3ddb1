"""The ModelRoute rule table: which served model a request to a public name goes to, and why.

Matrix: every match kind (tenant, tenant group, header, prompt length bounds, requested
max_tokens, tools, classifier above/below, a missing score) matching and not matching; rule order
(first match wins); weights, deterministic with the draw (edges included, weight 0 never picked);
the cost ceiling (kept, dropped, unpriced, other currency, none left: the next rule); defaults;
and the chat-auto example of examples/09-model-routes/route.yaml, end to end from its YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.accounting.cost import Rate
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.gateway.policy import model_routes
from tokenfleet.gateway.policy.model_routes import Decision, Facts, Why

REPO = Path(__file__).resolve().parents[3]
SMALL, LARGE = "demo-small", "demo-large"


def route(*rules: dict[str, Any], **spec: Any) -> model_routes.Route:
    """A route named chat-auto whose default is LARGE, with these rules (targets SMALL unless
    given), compiled from a validated spec."""
    full = [{"targets": [{"model": SMALL}], **r} for r in rules]
    return model_routes.compile_route(
        ModelRouteSpec.model_validate(
            {"name": "chat-auto", "rules": full, "defaultTargets": [{"model": LARGE}], **spec}
        )
    )


def facts(**given: Any) -> Facts:
    """A plain request: tenant acme, 100 prompt tokens, max_tokens 256, no tools, no score."""
    return Facts(**{"tenant": "acme", "prompt_tokens": 100, "max_tokens": 256, **given})


CLASSIFIER = {"classifier": {"configMap": "weights"}}


@pytest.mark.parametrize(
    ("match", "given", "matched"),
    [
        pytest.param({"tenants": ["acme", "beta"]}, {}, True, id="tenant-listed"),
        pytest.param({"tenants": ["beta"]}, {}, False, id="tenant-not-listed"),
        pytest.param({"tenantGroups": ["research"]}, {"group": "research"}, True, id="group"),
        pytest.param({"tenantGroups": ["research"]}, {}, False, id="isolated-tenant-no-group"),
        pytest.param(
            {"headers": {"X-Task": "summarize"}},
            {"headers": {"x-task": "summarize"}},
            True,
            id="header-name-any-case",
        ),
        pytest.param(
            {"headers": {"X-Task": "summarize"}},
            {"headers": {"x-task": "Summarize"}},
            False,
            id="header-value-exact",
        ),
        pytest.param({"headers": {"X-Task": "a"}}, {}, False, id="header-absent"),
        pytest.param(
            {"headers": {"X-Task": "a", "X-Team": "b"}},
            {"headers": {"x-task": "a"}},
            False,
            id="headers-all-needed",
        ),
        pytest.param({"maxPromptTokens": 100}, {}, True, id="max-prompt-inclusive"),
        pytest.param({"maxPromptTokens": 99}, {}, False, id="max-prompt-exceeded"),
        pytest.param({"minPromptTokens": 100}, {}, True, id="min-prompt-inclusive"),
        pytest.param({"minPromptTokens": 101}, {}, False, id="min-prompt-short"),
        pytest.param(
            {"minPromptTokens": 50, "maxPromptTokens": 150}, {}, True, id="prompt-in-band"
        ),
        pytest.param({"maxRequestedTokens": 256}, {}, True, id="max-tokens-inclusive"),
        pytest.param({"maxRequestedTokens": 255}, {}, False, id="max-tokens-exceeded"),
        pytest.param({"tools": True}, {"tools": True}, True, id="tools-wanted-offered"),
        pytest.param({"tools": True}, {}, False, id="tools-wanted-absent"),
        pytest.param({"tools": False}, {}, True, id="no-tools-wanted-absent"),
        pytest.param({"tools": False}, {"tools": True}, False, id="no-tools-wanted-offered"),
        pytest.param({"tenants": ["acme"], "tools": True}, {}, False, id="all-conditions-needed"),
    ],
)
def test_each_match_kind(match: dict[str, Any], given: dict[str, Any], matched: bool) -> None:
    got = model_routes.choose(route({"name": "r", "match": match}), facts=facts(**given), draw=0)
    assert got == (
        Decision(model=SMALL, why=Why.RULE, rule="r")
        if matched
        else Decision(model=LARGE, why=Why.DEFAULT)
    )


@pytest.mark.parametrize(
    ("match", "score", "matched"),
    [
        pytest.param({"classifierAbove": 0.8}, 0.9, True, id="above"),
        pytest.param({"classifierAbove": 0.8}, 0.8, False, id="above-is-strict"),
        pytest.param({"classifierBelow": 0.3}, 0.1, True, id="below"),
        pytest.param({"classifierBelow": 0.3}, 0.3, False, id="below-is-strict"),
        pytest.param({"classifierAbove": 0.3, "classifierBelow": 0.7}, 0.5, True, id="band"),
        pytest.param({"classifierAbove": 0.3, "classifierBelow": 0.7}, 0.9, False, id="off-band"),
        pytest.param({"classifierBelow": 0.3}, None, False, id="no-score-no-match"),
    ],
)
def test_classifier_score(match: dict[str, Any], score: float | None, matched: bool) -> None:
    r = route({"name": "r", "match": match}, **CLASSIFIER)
    got = model_routes.choose(r, facts=facts(score=score), draw=0)
    assert got.model == (SMALL if matched else LARGE)


def test_the_first_matching_rule_wins() -> None:
    r = route(
        {"name": "tenant", "match": {"tenants": ["acme"]}, "targets": [{"model": "a"}]},
        {"name": "short", "match": {"maxPromptTokens": 1000}, "targets": [{"model": "b"}]},
    )
    assert model_routes.choose(r, facts=facts(), draw=0).rule == "tenant"
    assert model_routes.choose(r, facts=facts(tenant="beta"), draw=0).rule == "short"
    long = facts(tenant="beta", prompt_tokens=5000)
    assert model_routes.choose(r, facts=long, draw=0) == Decision(model=LARGE, why=Why.DEFAULT)


WEIGHTED = [{"model": "a", "weight": 1}, {"model": "b", "weight": 0}, {"model": "c", "weight": 3}]


@pytest.mark.parametrize(
    ("draw", "model"),
    [
        pytest.param(0.0, "a", id="start-first-share"),
        pytest.param(0.2499, "a", id="end-first-share"),
        pytest.param(0.25, "c", id="weight-zero-skipped"),
        pytest.param(0.9999, "c", id="end-last-share"),
        pytest.param(1.0, "c", id="draw-at-one-lands-on-last"),
    ],
)
def test_weights_share_the_draw(draw: float, model: str) -> None:
    r = route({"name": "w", "match": {"tools": False}, "targets": WEIGHTED})
    assert model_routes.choose(r, facts=facts(), draw=draw).model == model


def test_default_targets_are_weighted_too() -> None:
    r = model_routes.compile_route(
        ModelRouteSpec.model_validate({"name": "chat-auto", "defaultTargets": WEIGHTED})
    )
    picks = [model_routes.choose(r, facts=facts(), draw=i / 100).model for i in range(100)]
    assert (picks.count("a"), picks.count("b"), picks.count("c")) == (25, 0, 75)
    assert model_routes.choose(r, facts=facts(), draw=0).reason == "default"


USD = Rate(input_per_million=0.2, output_per_million=0.6)  # 100 in + 256 out: 0.487 / M
DEAR = Rate(input_per_million=2.0, output_per_million=6.0)  # 4.87 / M
EUR = Rate(input_per_million=0.2, output_per_million=0.6, currency="EUR")
AT_USD = model_routes.price_per_million(USD, prompt_tokens=100, max_tokens=256)


@pytest.mark.parametrize(
    ("prices", "ceiling", "picked"),
    [
        pytest.param({"a": USD, "b": DEAR}, 1.0, "a", id="dear-target-dropped"),
        pytest.param({"a": DEAR, "b": USD}, 1.0, "b", id="only-cheap-left"),
        pytest.param({"a": USD, "b": USD}, AT_USD, "a", id="price-at-ceiling-kept"),
        pytest.param({"a": USD, "b": USD}, 0.48, LARGE, id="none-left-rule-skipped"),
        pytest.param({"b": USD}, 1.0, "b", id="unpriced-dropped"),
        pytest.param({"a": EUR, "b": USD}, 1.0, "b", id="other-currency-dropped"),
        pytest.param({}, 1.0, LARGE, id="nothing-priced-rule-skipped"),
        pytest.param({}, None, "a", id="no-ceiling-prices-ignored"),
    ],
)
def test_cost_ceiling(prices: dict[str, Rate], ceiling: float | None, picked: str) -> None:
    rule: dict[str, Any] = {
        "name": "cheap",
        "match": {"tools": False},
        "targets": [{"model": "a"}, {"model": "b"}],
    }
    if ceiling is not None:
        rule["maxCostPerMillionTokens"] = ceiling
    got = model_routes.choose(route(rule), facts=facts(prices=prices), draw=0)
    assert got.model == picked


def test_blended_price_follows_the_request_mix() -> None:
    price = model_routes.price_per_million
    assert price(USD, prompt_tokens=1000, max_tokens=0) == pytest.approx(0.2)
    assert price(USD, prompt_tokens=0, max_tokens=1000) == pytest.approx(0.6)
    assert price(USD, prompt_tokens=100, max_tokens=256) == pytest.approx(0.4876, abs=1e-4)


def test_a_ceiling_alone_routes_to_the_cheapest_else_the_default() -> None:
    r = route({"name": "budget", "maxCostPerMillionTokens": 1.0})
    cheap, dear = facts(prices={SMALL: USD}), facts(prices={SMALL: DEAR})
    assert model_routes.choose(r, facts=cheap, draw=0).model == SMALL
    assert model_routes.choose(r, facts=dear, draw=0).model == LARGE


def _example() -> model_routes.Route:
    text = (REPO / "examples/09-model-routes/route.yaml").read_text()
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "ModelRoute")
    return model_routes.compile_route(ModelRouteSpec.model_validate(doc["spec"]))


@pytest.mark.parametrize(
    ("given", "model", "reason"),
    [
        pytest.param(
            {"prompt_tokens": 120, "score": 0.1},
            "chat-small",
            "short-without-tools",
            id="short-easy",
        ),
        pytest.param(
            {"prompt_tokens": 499, "score": 0.1},
            "chat-small",
            "short-without-tools",
            id="just-under-500",
        ),
        pytest.param(
            {"prompt_tokens": 500, "score": 0.1}, "chat-large", "default", id="500-is-long"
        ),
        pytest.param(
            {"prompt_tokens": 120, "tools": True, "score": 0.1},
            "chat-large",
            "default",
            id="short-with-tools",
        ),
        pytest.param(
            {"prompt_tokens": 120, "score": 0.95}, "chat-large", "hard-prompts", id="short-but-hard"
        ),
        pytest.param(
            {"prompt_tokens": 120}, "chat-small", "short-without-tools", id="no-score-rules-alone"
        ),
    ],
)
def test_chat_auto_example(given: dict[str, Any], model: str, reason: str) -> None:
    r = _example()
    got = model_routes.choose(r, facts=facts(**given), draw=0.5)
    assert (got.model, got.reason, got.header(r.name)) == (model, reason, f"chat-auto/{reason}")
    assert r.uses_classifier and r.models == {"chat-small", "chat-large"}


@pytest.mark.parametrize(
    ("body", "offered"),
    [
        pytest.param({}, False, id="none"),
        pytest.param({"tools": []}, False, id="empty-list"),
        pytest.param({"tools": [{"type": "function"}]}, True, id="tools"),
        pytest.param({"functions": [{"name": "f"}]}, True, id="legacy-functions"),
        pytest.param({"tools": "yes"}, False, id="not-a-list"),
    ],
)
def test_offers_tools(body: dict[str, Any], offered: bool) -> None:
    assert model_routes.offers_tools(body) is offered
