"""The ModelRoute API: its pydantic model refuses what its CEL rules refuse, with the same words.

Matrix: every ModelRoute case of the shared invalid table (support.objects; the API server's
side is tests/integration/test_api_server.py) against the model's validator, whose message must
carry the expected text; the base route parses with its defaults; a cost-ceiling-only rule is a
match of its own and is accepted; kubectl's columns and short name.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from support.objects import BASE, INVALID, merged
from tokenfleet.api import crd
from tokenfleet.api.route import ModelRouteSpec

ROUTE_CASES = [case for case in INVALID if case.values[0] == "ModelRoute"]


def test_the_table_has_route_cases() -> None:
    assert len(ROUTE_CASES) >= 8


@pytest.mark.parametrize(("kind", "spec", "message"), ROUTE_CASES)
def test_invalid_route_is_refused_with_the_cel_message(kind: str, spec: Any, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ModelRouteSpec.model_validate(spec)
    assert message in str(refused.value)


def test_base_route_parses_with_defaults() -> None:
    route = ModelRouteSpec.model_validate(BASE["ModelRoute"])
    assert route.currency == "USD" and route.classifier is None
    assert [t.weight for t in route.default_targets] == [1]
    assert route.rules[0].match.tools is False and route.rules[0].match.tenants == []


def test_a_cost_ceiling_alone_is_a_rule() -> None:
    """'The cheapest target under the ceiling, else the default': no match conditions needed."""
    spec = merged(
        BASE["ModelRoute"],
        {
            "rules": [
                {
                    "name": "cheap",
                    "targets": [{"model": "demo-small"}],
                    "maxCostPerMillionTokens": 0.5,
                }
            ]
        },
    )
    assert ModelRouteSpec.model_validate(spec).rules[0].max_cost_per_million_tokens == 0.5


def test_kubectl_shows_name_default_targets_and_ready() -> None:
    kind = next(k for k in crd.KINDS if k.kind == "ModelRoute")
    assert kind.short_names[0] == "tfroute"
    names = [c.name for c in kind.columns]
    assert names == ["Model", "Default", "Targets", "Ready", "Remotes", "RemotesReady", "Age"]
    wide = {c.name for c in kind.columns if c.priority == 1}  # -o wide
    assert wide == {"Targets", "Remotes", "RemotesReady"}
