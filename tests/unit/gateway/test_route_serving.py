"""How the gateway serves ModelRoutes, without I/O: the routes part of the catalog and one
request's direction to the target.

Matrix: the classifier's weights found, ConfigMap missing, key missing, weights invalid (each
with the reason the log and gauge report); routes from watched objects (an unparseable spec left
out, two claiming a name: the first by namespace/name) and only labelled ConfigMaps' data; a
model's or an adapter's name wins over a route's (shadowed); a tenant's own namespace first;
the latest user turn scored (chat, Responses, completions); a request directed (the target in
the body, the rule in the header), refused when the tenant may not use the route, and a target
nothing serves refused with route_target_not_found; a route of the tenant's own namespace
grants its targets, another namespace's route only those the tenant may call (else
route_target_not_allowed); the score computed only when a rule reads it; the static file's
routes and configMaps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from multidict import CIMultiDict

from tokenfleet.api.route import ClassifierRef, ModelRouteSpec
from tokenfleet.gateway import catalog, model_routing, route_catalog
from tokenfleet.gateway.config import StaticConfig
from tokenfleet.gateway.policy import bodies, classifier, model_routes
from tokenfleet.gateway.policy.rejections import Reason, Rejected

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "09-model-routes"
WEIGHTS = classifier.document(classifier.HashedNgrams(bias=0.0, weights={}))
HASH = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param({("ns", "cm"): {"weights.json": WEIGHTS}}, "", id="found"),
        pytest.param({}, "ConfigMap cm not found", id="configmap-missing"),
        pytest.param({("other", "cm"): {"weights.json": WEIGHTS}}, "not found", id="other-ns"),
        pytest.param({("ns", "cm"): {"w.json": WEIGHTS}}, "has no key weights.json", id="no-key"),
        pytest.param({("ns", "cm"): {"weights.json": "{"}}, "not JSON", id="invalid"),
    ],
)
def test_the_classifier_weights_or_why_not(
    data: dict[tuple[str, str], dict[str, str]], problem: str
) -> None:
    scorer, why = route_catalog.classifier_of(
        ClassifierRef(config_map="cm"), namespace="ns", config_maps=data
    )
    assert (scorer is None) == bool(problem) and problem in why


def test_no_classifier_named_is_no_problem() -> None:
    assert route_catalog.classifier_of(None, namespace="ns", config_maps={}) == (None, "")


def obj(kind_spec: dict[str, Any], name: str, ns: str = "team") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": kind_spec}


def spec(name: str = "chat-auto", target: str = "small", **extra: Any) -> dict[str, Any]:
    return {"name": name, "defaultTargets": [{"model": target}], **extra}


def test_routes_from_objects_first_by_key_and_unparseable_left_out() -> None:
    found = route_catalog.routes_of(
        [
            obj(spec(target="b"), "z-route"),
            obj(spec(target="a"), "a-route"),
            obj({"name": "broken"}, "broken"),
        ],
        config_maps={},
    )
    assert list(found) == [("team", "chat-auto")]
    assert found[("team", "chat-auto")].resource == "a-route"


def test_config_maps_keep_string_data_only() -> None:
    maps = route_catalog.config_maps_of(
        [{"metadata": {"namespace": "n", "name": "c"}, "data": {"a": "x", "b": 1}}]
    )
    assert maps == {("n", "c"): {"a": "x"}}


def deployment(name: str, ns: str = "team") -> dict[str, Any]:
    artifact = {
        "uri": f"file:///models/{name}",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "key"}},
    }
    return obj({"model": {"name": name}, "pools": ["p"], "artifact": artifact}, name, ns)


def cluster(
    *routes: dict[str, Any], models: tuple[str, ...] = ("small", "large")
) -> catalog.Catalog:
    return catalog.from_objects(
        pools=[obj({}, "p")],
        models=[deployment(m) for m in models],
        tenants=[],
        secrets=[],
        pods=[],
        routes=list(routes),
    )


def test_a_models_name_wins_over_a_routes() -> None:
    c = cluster(obj(spec(name="small", target="large"), "shadow"), obj(spec(), "auto"))
    assert c.shadowed_routes == frozenset({"team/shadow"})
    assert c.route("small", "team") is None and c.route("chat-auto", "team") is not None


def test_another_namespaces_model_does_not_shadow_a_route() -> None:
    c = catalog.from_objects(
        pools=[obj({}, "p"), obj({}, "p", "b-ns")],
        models=[deployment("small"), deployment("chat-auto", "b-ns")],
        tenants=[],
        secrets=[],
        pods=[],
        routes=[obj(spec(), "auto")],
    )
    assert c.shadowed_routes == frozenset()
    entry = c.route("chat-auto", "team")
    assert entry is not None and entry.namespace == "team"
    assert c.route("chat-auto", "b-ns") is None  # there, its own model answers


def test_a_tenants_own_namespace_first() -> None:
    """Another namespace's route serves a namespace only when it shares the name with it
    (issue 35, finding 4: before, `yyy` too got a-ns's, the first by namespace/name)."""
    shared = spec(target="large", sharedWith=["zzz"])
    c = cluster(obj(shared, "auto", "a-ns"), obj(spec(), "auto", "team"))
    own, elsewhere = c.route("chat-auto", "team"), c.route("chat-auto", "zzz")
    assert own is not None and own.namespace == "team"
    assert elsewhere is not None and elsewhere.namespace == "a-ns"
    assert c.route("chat-auto", "yyy") is None


@pytest.mark.parametrize(
    ("body", "text"),
    [
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": "first"},
                    {"role": "assistant", "content": "x"},
                    {"role": "user", "content": "last"},
                ]
            },
            "last",
            id="chat-latest-user",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "a"},
                            {"type": "image_url"},
                            {"type": "text", "text": "b"},
                        ],
                    }
                ]
            },
            "a b",
            id="chat-parts",
        ),
        pytest.param({"messages": [{"role": "system", "content": "s"}]}, "", id="no-user-turn"),
        pytest.param({"input": "question"}, "question", id="responses-string"),
        pytest.param({"input": [{"content": "q"}]}, "q", id="responses-items"),
        pytest.param({"prompt": ["p1", "p2"]}, "p1", id="completion-list"),
        pytest.param({"prompt": "p"}, "p", id="completion"),
    ],
)
def test_the_latest_user_turn_is_what_is_scored(body: dict[str, Any], text: str) -> None:
    assert model_routes.latest_user_text(body) == text


def tenant(allowed: tuple[str, ...] = ("chat-auto",)) -> catalog.Tenant:
    return catalog.Tenant(
        key="team/acme",
        allowed_models=frozenset(allowed),
        priority_class="standard",
        limits=catalog.quotas.Limits(),
    )


def parsed(text: str = "hi", model: str = "chat-auto", **extra: Any) -> bodies.Parsed:
    p = bodies.parse(
        {"model": model, "messages": [{"role": "user", "content": text}], **extra}, "chat"
    )
    assert not isinstance(p, Rejected)
    return p


class Counting:
    """A classifier that says hard and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def score(self, text: str) -> float:
        self.calls += 1
        return 0.99


def test_a_request_is_directed_to_its_target_with_the_rule() -> None:
    rule = {"name": "tools", "match": {"tools": True}, "targets": [{"model": "large"}]}
    c = cluster(obj(spec(rules=[rule]), "auto"))
    tools = [{"type": "function", "function": {"name": "f"}}]
    directed = model_routing.direct(
        c, tenant(), parsed(tools=tools), headers=CIMultiDict(), draw=lambda: 0.5
    )
    assert isinstance(directed, model_routing.Directed)
    assert directed.parsed.model == "large" and directed.header == "chat-auto/tools"
    assert model_routing.unserved(c, directed, namespace="team") is None


def test_a_name_that_is_no_route_is_left_alone_and_draws_nothing() -> None:
    c = cluster(obj(spec(), "auto"))

    def draw() -> float:
        raise AssertionError("a model's own name must not consume the random source")

    assert model_routing.direct(c, tenant(), parsed(model="small"), headers={}, draw=draw) is None


def test_a_tenant_not_allowed_the_route_is_refused() -> None:
    c = cluster(obj(spec(), "auto"))
    refused = model_routing.direct(c, tenant(("small",)), parsed(), headers={}, draw=lambda: 0)
    assert isinstance(refused, Rejected) and refused.reason is Reason.MODEL_NOT_ALLOWED


def test_a_target_nothing_serves_is_refused_naming_the_route() -> None:
    c = cluster(obj(spec(target="gone"), "auto"))
    directed = model_routing.direct(c, tenant(), parsed(), headers={}, draw=lambda: 0)
    assert isinstance(directed, model_routing.Directed)
    refused = model_routing.unserved(c, directed, namespace="team")
    assert refused is not None and refused.reason is Reason.ROUTE_TARGET_NOT_FOUND
    assert "chat-auto/default" in refused.message and refused.status == 503


@pytest.mark.parametrize(
    ("rules", "calls"),
    [
        pytest.param([], 0, id="no-rule-reads-it"),
        pytest.param(
            [{"name": "hard", "match": {"classifierAbove": 0.5}, "targets": [{"model": "large"}]}],
            1,
            id="a-rule-reads-it",
        ),
    ],
)
def test_the_score_is_computed_only_when_a_rule_reads_it(rules: list[Any], calls: int) -> None:
    entry = route_catalog.entry_of(
        namespace="team",
        resource="auto",
        spec=ModelRouteSpec.model_validate(spec(rules=rules, classifier={"configMap": "cm"})),
        config_maps={},
    )
    counting = Counting()
    c = cluster()
    scores = bool(rules)  # what entry_of decides once weights load
    c = catalog.with_routes(
        c,
        routes=[
            route_catalog.RouteEntry(**{**_fields(entry), "classifier": counting, "scores": scores})
        ],
    )
    directed = model_routing.direct(c, tenant(), parsed(), headers={}, draw=lambda: 0)
    assert isinstance(directed, model_routing.Directed) and counting.calls == calls
    assert directed.parsed.model == ("large" if calls else "small")


def _fields(entry: route_catalog.RouteEntry) -> dict[str, Any]:
    return {f: getattr(entry, f) for f in route_catalog.RouteEntry.__dataclass_fields__}


def test_the_static_file_serves_the_example_route_with_its_classifier() -> None:
    route = yaml.safe_load((EXAMPLE / "route.yaml").read_text())
    cm = yaml.safe_load((EXAMPLE / "classifier-configmap.yaml").read_text())
    config = StaticConfig.model_validate(
        {
            "models": [
                {"name": m, "endpoints": [f"http://{m}:8000"]} for m in ("chat-small", "chat-large")
            ],
            "tenants": [{"name": "acme", "apiKeyHashes": [HASH], "allowedModels": ["*"]}],
            "routes": [route["spec"]],
            "configMaps": {cm["metadata"]["name"]: cm["data"]},
        }
    )
    entry = config.catalog().route("chat-auto")
    assert entry is not None and entry.classifier is not None and not entry.classifier_problem
    assert entry.scores  # hard-prompts reads the score, and the weights loaded
    blind = route_catalog.entry_of(
        namespace="",
        resource="chat-auto",
        spec=ModelRouteSpec.model_validate(route["spec"]),
        config_maps={},
    )
    assert not blind.scores and "not found" in blind.classifier_problem


@pytest.mark.parametrize(
    ("key", "group", "expected"),
    [
        pytest.param("team/acme", "", "large", id="the-routes-own-tenant"),
        pytest.param("other/acme", "", "small", id="same-name-another-namespace"),
        pytest.param("team/evals-bot", "evals", "large", id="the-routes-own-group"),
        pytest.param("other/evals-bot", "evals", "small", id="same-group-another-namespace"),
    ],
)
def test_route_rules_name_tenants_and_groups_of_the_routes_namespace(
    key: str, group: str, expected: str
) -> None:
    """A rule for tenant acme or group evals of namespace team does not match a Tenant that
    another namespace calls acme, or that joins its own namespace's evals (finding 4 of issue
    35: rules matched bare names across namespaces)."""
    from tokenfleet.api.tenant import TenantSpec

    rules = [
        {"name": "vip", "match": {"tenants": ["acme"]}, "targets": [{"model": "large"}]},
        {"name": "evals", "match": {"tenantGroups": ["evals"]}, "targets": [{"model": "large"}]},
    ]
    c = cluster(obj(spec(rules=rules, sharedWith=["other"]), "auto"))
    iso = {"mode": "SharedGroup", "group": group} if group else {}
    who = catalog.tenant_of(
        key,
        TenantSpec.model_validate(
            {
                "apiKeySecretRef": {"name": "k"},
                # the targets too: a route of another namespace grants none (test below)
                "allowedModels": ["chat-auto", "small", "large"],
                "cacheIsolation": iso,
            }
        ),
    )
    directed = model_routing.direct(c, who, parsed(), headers={}, draw=lambda: 0.5)
    assert isinstance(directed, model_routing.Directed)
    assert directed.parsed.model == expected, directed.header


def test_a_gateway_whose_pools_are_all_at_zero_still_answers() -> None:
    """Readiness is "can answer or spill" (issue 35, finding 7): models whose pools have no
    ready pod (lost, or scaled to zero) keep the gateway answerable — it holds for a cold
    start, falls back or spills — where the old check (a ready endpoint) took every gateway pod
    out of its Service. An empty catalog does not answer."""
    at_zero = cluster()
    assert not at_zero.endpoints.endpoints  # the old readiness check: not Ready
    assert at_zero.answerable()
    assert not catalog.from_objects(
        pools=[], models=[], tenants=[], secrets=[], pods=[]
    ).answerable()


@pytest.mark.parametrize(
    ("allowed", "spare"),
    [
        pytest.param(("large", "small"), "small", id="allowed-both"),
        pytest.param(("*",), "small", id="allowed-all"),
        pytest.param(("large",), None, id="not-allowed-its-fallback"),
    ],
)
def test_a_fallback_serves_only_tenants_allowed_to_call_it(
    allowed: tuple[str, ...], spare: str | None
) -> None:
    """A fallback is another model: a tenant allowed only `large` does not get `small`'s
    answers when `large` is full (finding 4 of issue 35: the fallback skipped the model check)."""
    from tokenfleet.gateway import targets

    large = deployment("large")
    large["spec"]["fallback"] = {"model": "small"}
    c = catalog.from_objects(
        pools=[obj({}, "p")], models=[large, deployment("small")], tenants=[], secrets=[], pods=[]
    )
    who = tenant(allowed)
    primary = targets.place(c, who, parsed(model="large"))
    assert not isinstance(primary, Rejected), primary
    chosen = targets.spare_for(c, primary, tenant=who, prompt_tokens=4)
    assert (chosen.model.name if chosen else None) == spare


@pytest.mark.parametrize(
    ("route_ns", "allowed", "served"),
    [
        pytest.param("team", ("chat-auto",), "large", id="own-namespace-route-is-the-grant"),
        pytest.param("aaa", ("chat-auto",), None, id="foreign-route-target-not-allowed"),
        pytest.param("aaa", ("chat-auto", "large"), "large", id="foreign-route-target-allowed"),
        pytest.param("aaa", ("*",), "large", id="foreign-route-tenant-allowed-all"),
    ],
)
def test_a_route_of_another_namespace_serves_only_targets_the_tenant_may_call(
    route_ns: str, allowed: tuple[str, ...], served: str | None
) -> None:
    """A route grants its targets only to the Tenants of its own namespace (whoever writes
    them writes its routes). A tenant whose namespace has no `chat-auto` finds another
    namespace's route by name, and that route's author must not choose which of the tenant's
    namespace's models it gets (finding 4 of issue 35: targets skipped the model check, so a
    route in namespace `aaa` served team's `large` to a tenant allowed only `chat-auto`). The
    route shares its name with every namespace: else it would not serve `team` at all
    (tests/unit/gateway/test_name_claiming.py)."""
    c = catalog.from_objects(
        pools=[obj({}, "p"), obj({}, "p", "aaa")],
        models=[deployment("small"), deployment("large")],
        tenants=[],
        secrets=[],
        pods=[],
        routes=[obj(spec(target="large", sharedWith=["*"]), "auto", route_ns)],
    )
    directed = model_routing.direct(c, tenant(allowed), parsed(), headers={}, draw=lambda: 0)
    if served is None:
        assert isinstance(directed, Rejected), directed
        assert directed.reason.value == "route_target_not_allowed" and directed.status == 403
        assert "'large'" in directed.message and "chat-auto/default" in directed.message
        return
    assert isinstance(directed, model_routing.Directed), directed
    assert directed.parsed.model == served
    from tokenfleet.gateway import targets

    placed = targets.place(c, tenant(allowed), directed.parsed, granted=True)
    assert not isinstance(placed, Rejected) and placed.model.name == served
