"""A ModelRoute's status: the Ready condition's reason for every case, in order, and its events.

Matrix: targets all served (models, aliases, adapters) → TargetsFound; a target missing →
TargetNotFound naming it; the route's name a model's or an adapter's → NameConflict (before a
missing target); the classifier's ConfigMap missing, unlabelled, without the key →
ClassifierNotFound; weights that do not parse → ClassifierInvalid; events only on a change of
Ready or of its reason, with observedGeneration and the transition time kept while unchanged.

RemotesReady: no remotes → no condition; every remote's Secret and key found → KeysFound; a
Secret missing (or never read) → KeySecretNotFound; the key missing or empty → KeyMissing, the
message naming the remote, the namespace/Secret, the key and gateway.remoteKeySecrets, every
failing remote listed and the first one's reason; it leaves Ready alone; its events on change.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.operator.plan import route_status
from tokenfleet.operator.plan.route_status import Found, KeySecrets, Served

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)
WEIGHTS = '{"format":"tokenfleet.io/hashed-ngram-logistic","version":1,"bias":0,"weights":{}}'
LABELLED = {labels.ROUTE_CLASSIFIER: "true"}
GATEWAY_NS = "tokenfleet-system"
NO_SECRETS = KeySecrets(namespace=GATEWAY_NS)
SERVED = route_status.served_in(
    [
        {"spec": {"model": {"name": "small", "aliases": ["tiny"]}}},
        {"spec": {"model": {"name": "large"}}},
    ],
    [{"spec": {"servedName": "acme-lora"}}],
)


def spec(
    name: str = "chat-auto",
    *targets: str,
    classifier: bool = False,
    remotes: tuple[dict[str, Any], ...] = (),
) -> ModelRouteSpec:
    rule = {"name": "short", "match": {"maxPromptTokens": 499}, "targets": [{"model": "tiny"}]}
    if classifier:
        rule["match"] = {"classifierAbove": 0.8}
    return ModelRouteSpec.model_validate(
        {
            "name": name,
            "rules": [rule],
            "defaultTargets": [{"model": t} for t in (targets or ("large",))],
            **({"classifier": {"configMap": "cm"}} if classifier else {}),
            "remotes": list(remotes),
        }
    )


def remote(name: str, secret: str, key: str | None = None) -> dict[str, Any]:
    """A Gateway remote whose key is ``secret``'s ``key`` (the API's default: api-key)."""
    ref = {"name": secret, **({"key": key} if key else {})}
    return {"name": name, "kind": "Gateway", "baseUrl": f"http://{name}/v1", "apiKeySecret": ref}


REGION_B = remote("region-b", "region-b-key")
PROVIDER = {**remote("provider", "provider-key", "token"), "kind": "OpenAI", "model": "big"}
BOTH = KeySecrets(
    namespace=GATEWAY_NS,
    keys={
        "region-b-key": frozenset({"api-key", "base-url"}),
        "provider-key": frozenset({"token", "x", "base-url"}),
    },
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
        spec=route, generation=3, old=None, served=SERVED, found=found, secrets=NO_SECRETS, now=NOW
    )
    (cond,) = status.conditions
    assert (cond.status == "True", cond.reason) == (ready, reason) and says in cond.message
    assert status.observed_generation == 3 and cond.observed_generation == 3


def test_events_only_on_change() -> None:
    broken, events = route_status.plan(
        spec=spec("r", "gone"),
        generation=1,
        old=None,
        served=SERVED,
        found=None,
        secrets=NO_SECRETS,
        now=NOW,
    )
    assert [(e.type, e.reason) for e in events] == [("Warning", "TargetNotFound")]
    again, events = route_status.plan(
        spec=spec("r", "gone"),
        generation=1,
        old=broken,
        served=SERVED,
        found=None,
        secrets=NO_SECRETS,
        now=LATER,
    )
    assert (
        events == []
        and again.conditions[0].last_transition_time == broken.conditions[0].last_transition_time
    )
    fixed, events = route_status.plan(
        spec=spec("r"),
        generation=2,
        old=again,
        served=SERVED,
        found=None,
        secrets=NO_SECRETS,
        now=LATER,
    )
    assert [(e.type, e.reason) for e in events] == [("Normal", "TargetsFound")]
    assert fixed.conditions[0].last_transition_time != broken.conditions[0].last_transition_time


def test_served_names_are_read_leniently() -> None:
    odd: list[dict[str, Any]] = [{"spec": None}, {"spec": {"model": {"aliases": None}}}]
    assert route_status.served_in(odd, [{}]) == Served()


def remotes_ready(route: ModelRouteSpec, secrets: KeySecrets, old: Any = None) -> Any:
    status, events = route_status.plan(
        spec=route, generation=4, old=old, served=SERVED, found=None, secrets=secrets, now=NOW
    )
    found = [c for c in status.conditions if c.type == "RemotesReady"]
    ready = next(c for c in status.conditions if c.type == "Ready")
    return (found[0] if found else None), ready, status, events


@pytest.mark.parametrize(
    ("remotes", "secrets", "ready", "reason", "says"),
    [
        pytest.param(
            (REGION_B, PROVIDER),
            BOTH,
            True,
            "KeysFound",
            [
                "tokenfleet-system",
                "region-b (region-b-key/api-key) and provider (provider-key/token)",
            ],
            id="all-found",
        ),
        pytest.param(
            (REGION_B,),
            NO_SECRETS,
            False,
            "KeySecretNotFound",
            [
                "remote region-b: Secret tokenfleet-system/region-b-key does not exist",
                "under key 'api-key'",
                "gateway.remoteKeySecrets",
                "do not spill there",
            ],
            id="secret-missing",
        ),
        pytest.param(
            (REGION_B,),
            KeySecrets(namespace=GATEWAY_NS, keys={"region-b-key": None}),
            False,
            "KeySecretNotFound",
            ["region-b-key does not exist"],
            id="secret-read-as-gone",
        ),
        pytest.param(
            (PROVIDER,),
            KeySecrets(namespace=GATEWAY_NS, keys={"provider-key": frozenset({"api-key"})}),
            False,
            "KeyMissing",
            [
                "remote provider: Secret tokenfleet-system/provider-key has no key 'token'",
                "gateway.remoteKeySecrets",
            ],
            id="key-missing",
        ),
        pytest.param(
            (REGION_B, PROVIDER),
            KeySecrets(namespace=GATEWAY_NS, keys={"region-b-key": frozenset()}),
            False,
            "KeyMissing",
            ["remote region-b:", "has no key 'api-key' (or it is empty)", "; remote provider:"],
            id="first-failing-reason-every-remote-named",
        ),
        pytest.param(
            (REGION_B,),
            KeySecrets(namespace=GATEWAY_NS, keys={"region-b-key": frozenset({"api-key"})}),
            False,
            "KeyUnbound",
            ["remote region-b:", "no key 'base-url'", "base-url=http://region-b/v1"],
            id="key-bound-to-no-url",
        ),
    ],
)
def test_remotes_ready_says_which_key_is_missing_and_what_to_do(
    remotes: tuple[dict[str, Any], ...],
    secrets: KeySecrets,
    ready: bool,
    reason: str,
    says: list[str],
) -> None:
    cond, local, _, _ = remotes_ready(spec(remotes=remotes), secrets)
    assert cond is not None and (cond.status == "True", cond.reason) == (ready, reason)
    for text in says:
        assert text in cond.message
    assert cond.reason in route_status.REMOTES_READY_REASONS and cond.observed_generation == 4
    assert (local.status, local.reason) == ("True", "TargetsFound")  # the local targets still serve


def test_a_route_without_remotes_has_no_remotes_ready() -> None:
    cond, _, status, _ = remotes_ready(spec(), BOTH)
    assert cond is None and [c.type for c in status.conditions] == ["Ready"]


def test_remotes_ready_events_only_on_change() -> None:
    route = spec(remotes=(REGION_B,))
    _, _, broken, events = remotes_ready(route, NO_SECRETS)
    assert [(e.type, e.reason) for e in events] == [
        ("Normal", "TargetsFound"),
        ("Warning", "KeySecretNotFound"),
    ]
    _, _, again, events = remotes_ready(route, NO_SECRETS, old=broken)
    assert events == []
    _, _, _, events = remotes_ready(route, BOTH, old=again)
    assert [(e.type, e.reason) for e in events] == [("Normal", "KeysFound")]
