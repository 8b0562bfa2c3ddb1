"""Cross-namespace name claiming (issue 35, finding 4): a tenant is served the models and the
ModelRoutes of its own namespace, and another namespace's only when that namespace shares the
name with it (``spec.sharedWith``). Before, a tenant whose namespace had nothing of a name was
served the first other namespace's by namespace/name, so a namespace that claimed the name
first (``aaa-…`` sorts early) received the other namespace's prompts."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway import catalog, model_routing, targets
from tokenfleet.gateway.policy import bodies, quotas
from tokenfleet.gateway.policy.rejections import Rejected

ATTACKER = "aaa-claims-names"
VICTIM = "victim"


def obj(kind_spec: dict[str, Any], name: str, ns: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": kind_spec}


def deployment(name: str, ns: str, shared: list[str] | None = None) -> dict[str, Any]:
    artifact = {
        "uri": f"file:///models/{name}",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "key"}},
    }
    spec = {"model": {"name": name}, "pools": ["p"], "artifact": artifact}
    return obj({**spec, **({"sharedWith": shared} if shared is not None else {})}, name, ns)


def route(name: str, target: str, ns: str, shared: list[str] | None = None) -> dict[str, Any]:
    spec = {"name": name, "defaultTargets": [{"model": target}]}
    return obj({**spec, **({"sharedWith": shared} if shared is not None else {})}, "r", ns)


def tenant(ns: str = VICTIM) -> catalog.Tenant:
    """A victim tenant allowed the names its own platform promised it."""
    return catalog.Tenant(
        key=f"{ns}/app",
        allowed_models=frozenset({"chat", "chat-auto", "small"}),
        priority_class="standard",
        limits=quotas.Limits(),
    )


def request(model: str) -> bodies.Parsed:
    p = bodies.parse({"model": model, "messages": [{"role": "user", "content": "hi"}]}, "chat")
    assert not isinstance(p, Rejected)
    return p


def cluster(
    models: list[dict[str, Any]], routes: list[dict[str, Any]] | None = None
) -> catalog.Catalog:
    return catalog.from_objects(
        pools=[obj({}, "p", ATTACKER), obj({}, "p", VICTIM)],
        models=models,
        tenants=[],
        secrets=[],
        pods=[],
        routes=routes or [],
    )


def assert_not_served(refused: object, name: str) -> None:
    assert isinstance(refused, Rejected), refused
    assert (refused.status, refused.reason.value) == (404, "model_not_found"), refused
    assert f"'{name}'" in refused.message and f"namespace '{VICTIM}'" in refused.message


SHARING = [
    pytest.param(None, False, id="not-shared"),
    pytest.param(["other"], False, id="shared-with-another-namespace"),
    pytest.param([VICTIM], True, id="shared-with-the-tenants-namespace"),
    pytest.param(["*"], True, id="shared-with-every-namespace"),
]


@pytest.mark.parametrize(("shared", "served"), SHARING)
def test_another_namespaces_model_is_served_only_when_shared(
    shared: list[str] | None, served: bool
) -> None:
    """Namespace aaa-claims-names deploys a `chat` first; the victim's tenant, allowed `chat`
    and with no `chat` of its own, must not have its prompts sent there unless that namespace
    shares `chat` with the victim's. The refusal reads the same as for a name nobody serves
    (it does not tell the tenant another namespace has one)."""
    c = cluster([deployment("chat", ATTACKER, shared)])
    placed = targets.place(c, tenant(), request("chat"))
    if served:
        assert not isinstance(placed, Rejected), placed
        assert placed.model.namespace == ATTACKER
        assert "chat" in c.visible(VICTIM)
        return
    assert_not_served(placed, "chat")
    assert "chat" not in c.visible(VICTIM)
    nobody = targets.place(c, tenant(), request("small"))
    assert_not_served(nobody, "small")
    assert isinstance(placed, Rejected) and isinstance(nobody, Rejected)
    assert placed.message.replace("chat", "X") == nobody.message.replace("small", "X")


@pytest.mark.parametrize(("shared", "served"), SHARING)
def test_another_namespaces_route_is_served_only_when_shared(
    shared: list[str] | None, served: bool
) -> None:
    """The same for a ModelRoute: namespace aaa-claims-names names a route `chat-auto` (whose
    target and remotes it controls) first; the victim's tenant, allowed `chat-auto`, is not
    directed by it unless that namespace shares the route with the victim's."""
    c = cluster(
        [deployment("small", ATTACKER, ["*"])], [route("chat-auto", "small", ATTACKER, shared)]
    )
    directed = model_routing.direct(c, tenant(), request("chat-auto"), headers={}, draw=lambda: 0)
    if served:
        assert isinstance(directed, model_routing.Directed), directed
        assert directed.entry.namespace == ATTACKER
        assert "chat-auto" in c.routes_for(tenant())
        return
    assert directed is None  # no route of that name for this tenant: the name is then a model's
    assert_not_served(targets.place(c, tenant(), request("chat-auto")), "chat-auto")
    assert "chat-auto" not in c.routes_for(tenant())


def test_a_namespaces_own_name_wins_over_one_shared_with_it() -> None:
    """Sharing never shadows: the victim's own `chat` and `chat-auto` answer it, though
    another namespace shares both with every namespace; a third namespace gets the shared."""
    c = cluster(
        [
            deployment("chat", ATTACKER, ["*"]),
            deployment("chat", VICTIM),
            deployment("small", VICTIM),
        ],
        [route("chat-auto", "chat", ATTACKER, ["*"]), route("chat-auto", "small", VICTIM)],
    )
    own = c.model("chat", VICTIM)
    assert own is not None and own.namespace == VICTIM
    entry = c.route("chat-auto", VICTIM)
    assert entry is not None and entry.namespace == VICTIM
    third = c.model("chat", "third")
    assert third is not None and third.namespace == ATTACKER
    third_route = c.route("chat-auto", "third")
    assert third_route is not None and third_route.namespace == ATTACKER


def test_a_static_configurations_model_is_served_to_tenants_whose_names_carry_a_namespace() -> None:
    """Static mode has no namespaces to keep apart: a configured model (no namespace) is served
    to a configured tenant named ``ns/team`` (the key the operator reads its counters by).
    The first version of this change refused it (404 model_not_found, in
    test_tenant_usage_status's fresh-clone run)."""
    from tokenfleet.gateway.config import StaticConfig

    config = StaticConfig.model_validate(
        {
            "models": [{"name": "m", "endpoints": ["http://127.0.0.1:9"]}],
            "tenants": [{"name": "ns/team", "apiKeyHashes": ["0" * 64], "allowedModels": ["*"]}],
        }
    )
    cat = config.catalog()
    assert cat.model("m", "ns") is not None
    assert "m" in cat.visible("ns")
