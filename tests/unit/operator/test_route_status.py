"""A ModelRoute's status: the Ready condition's reason for every case, in order, and its events.

Matrix: targets all served (models, aliases, adapters) → TargetsFound; a target missing →
TargetNotFound naming it; the route's name a model's or an adapter's → NameConflict (before a
missing target); the classifier's ConfigMap missing, unlabelled, without the key →
ClassifierNotFound; weights that do not parse → ClassifierInvalid; events only on a change of
Ready or of its reason, with observedGeneration and the transition time kept while unchanged.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.operator.plan import route_status
from tokenfleet.operator.plan.route_status import Found, Served

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)
WEIGHTS = '{"format":"tokenfleet.io/hashed-ngram-logistic","version":1,"bias":0,"weights":{}}'
LABELLED = {labels.ROUTE_CLASSIFIER: "true"}
SERVED = route_status.served_in(
    [
        {"spec": {"model": {"name": "small", "aliases": ["tiny"]}}},
        {"spec": {"model": {"name": "large"}}},
    ],
    [{"spec": {"servedName": "acme-lora"}}],
)


def spec(name: str = "chat-auto", *targets: str, classifier: bool = False) -> ModelRouteSpec:
    rule = {"name": "short", "match": {"maxPromptTokens": 499}, "targets": [{"model": "tiny"}]}
    if classifier:
        rule["match"] = {"classifierAbove": 0.8}
    return ModelRouteSpec.model_validate(
        {
            "name": name,
            "rules": [rule],
            "defaultTargets": [{"model": t} for t in (targets or ("large",))],
            **({"classifier": {"configMap": "cm"}} if classifier else {}),
        }
    )


@pytest.mark.parametrize(
    ("route", "found", "ready", "reason", "says"),
    [
        pytest.param(spec(), None, True, "TargetsFound", "large, tiny", id="served"),
        pytest.param(spec("r", "acme-lora"), None, True, "TargetsFound", "acme-lora", id="adapter"),
        pytest.param(spec("r", "gone"), None, False, "TargetNotFound", "gone", id="missing"),
        pytest.param(
            spec("small", "gone"), None, False, "NameConflict", "served model", id="model-name"
        ),
        pytest.param(
            spec("acme-lora"), None, False, "NameConflict", "ModelAdapter", id="adapter-name"
        ),
        pytest.param(
            spec(classifier=True),
            Found(data={"weights.json": WEIGHTS}, labels=LABELLED),
            True,
            "TargetsFound",
            "",
            id="classifier-loads",
        ),
        pytest.param(
            spec(classifier=True),
            Found(),
            False,
            "ClassifierNotFound",
            "does not exist",
            id="cm-missing",
        ),
        pytest.param(
            spec(classifier=True),
            Found(data={"weights.json": WEIGHTS}),
            False,
            "ClassifierNotFound",
            "lacks the label",
            id="unlabelled",
        ),
        pytest.param(
            spec(classifier=True),
            Found(data={}, labels=LABELLED),
            False,
            "ClassifierNotFound",
            "no key",
            id="no-key",
        ),
        pytest.param(
            spec(classifier=True),
            Found(data={"weights.json": "{}"}, labels=LABELLED),
            False,
            "ClassifierInvalid",
            "format must be",
            id="invalid",
        ),
    ],
)
def test_ready_says_why(
    route: ModelRouteSpec, found: Found | None, ready: bool, reason: str, says: str
) -> None:
    status, _ = route_status.plan(
        spec=route, generation=3, old=None, served=SERVED, found=found, now=NOW
    )
    (cond,) = status.conditions
    assert (cond.status == "True", cond.reason) == (ready, reason) and says in cond.message
    assert status.observed_generation == 3 and cond.observed_generation == 3


def test_events_only_on_change() -> None:
    broken, events = route_status.plan(
        spec=spec("r", "gone"), generation=1, old=None, served=SERVED, found=None, now=NOW
    )
    assert [(e.type, e.reason) for e in events] == [("Warning", "TargetNotFound")]
    again, events = route_status.plan(
        spec=spec("r", "gone"), generation=1, old=broken, served=SERVED, found=None, now=LATER
    )
    assert (
        events == []
        and again.conditions[0].last_transition_time == broken.conditions[0].last_transition_time
    )
    fixed, events = route_status.plan(
        spec=spec("r"), generation=2, old=again, served=SERVED, found=None, now=LATER
    )
    assert [(e.type, e.reason) for e in events] == [("Normal", "TargetsFound")]
    assert fixed.conditions[0].last_transition_time != broken.conditions[0].last_transition_time


def test_served_names_are_read_leniently() -> None:
    odd: list[dict[str, Any]] = [{"spec": None}, {"spec": {"model": {"aliases": None}}}]
    assert route_status.served_in(odd, [{}]) == Served()
