"""ModelRoutes served end to end, all real: two llm-d-inference-sim engines (chat-small and
chat-large), the gateway in static mode with examples/09-model-routes' chat-auto route and its
classifier ConfigMap's data, and the openai SDK as the client.

Covered: chat-auto sends a short prompt without tools to chat-small, a long one and one with
tools to chat-large, a short prompt the classifier calls hard to chat-large — each answer's
``model`` and ``X-TokenFleet-Model`` name the target and ``X-TokenFleet-Route`` the rule,
streamed and not; a tenant allowed the route (and not its targets) is served, one not allowed
the route gets 403; ``/v1/models`` lists the routes a tenant may use; a weighted route splits
200 requests within bounds; the decision counter
counts every routed request by rule and target, and usage is counted by the target; a route
whose classifier ConfigMap is missing still serves by its other rules (and its gauge says 0);
a route to a model nothing serves answers 503 ``route_target_not_found``, not a crash.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from support.gateway import Gateway, Sim, key_hash, running, start_gateway, start_sim
from support.gateway import gateway_metric as metric
from tokenfleet.signals import gateway as names

EXAMPLE = Path(__file__).parents[2] / "examples" / "09-model-routes"
KEY, OTHER_KEY = "tfk-routes-acme-" + "0" * 20, "tfk-routes-other-" + "1" * 20
SHORT = "What is the capital of Japan?"
HARD = "Find all integer solutions of x^2 - y^2 = 52 and explain the method."  # P(hard) 0.95
LONG = "Summarise the following notes in two lines. " + "The meeting ran long. " * 120
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
]


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / name).read_text())
    return doc


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Sim]]:
    root = tmp_path_factory.mktemp("gw-routes-sims")
    started = {m: start_sim(root, m) for m in ("chat-small", "chat-large")}
    yield started
    for s in started.values():
        s.kill()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, sims: dict[str, Sim]) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("gw-routes")
    route, cm = example("route.yaml"), example("classifier-configmap.yaml")
    blind = {**route["spec"], "name": "chat-blind"}
    blind["classifier"] = {"configMap": "absent-classifier"}
    split = {
        "name": "chat-split",
        "defaultTargets": [
            {"model": "chat-small", "weight": 1},
            {"model": "chat-large", "weight": 3},
        ],
    }
    broken = {"name": "chat-broken", "defaultTargets": [{"model": "chat-nowhere"}]}
    config = {
        "models": [{"name": m, "endpoints": [s.url]} for m, s in sims.items()],
        "tenants": [
            {  # allowed the routes only: a route is the grant for its targets
                "name": "acme",
                "apiKeyHashes": [key_hash(KEY)],
                "allowedModels": ["chat-auto", "chat-blind", "chat-split", "chat-broken"],
            },
            {
                "name": "other",
                "apiKeyHashes": [key_hash(OTHER_KEY)],
                "allowedModels": ["chat-small"],
            },
        ],
        "routes": [route["spec"], blind, split, broken],
        "configMaps": {cm["metadata"]["name"]: cm["data"]},
    }
    with running(start_gateway(root, config, "--seed", "7")) as g:
        yield g
    log = g.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("absent-classifier") == 1, "a classifier without weights is logged once"


def client(g: Gateway, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0)


def ask(g: Gateway, prompt: str, model: str = "chat-auto", **extra: Any) -> tuple[str, str, str]:
    """(the answer's model, X-TokenFleet-Model, X-TokenFleet-Route)."""
    raw = client(g).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=2, **extra
    )
    return raw.parse().model, raw.headers["X-TokenFleet-Model"], raw.headers["X-TokenFleet-Route"]


@pytest.mark.parametrize(
    ("prompt", "extra", "target", "rule"),
    [
        pytest.param(SHORT, {}, "chat-small", "short-without-tools", id="short-no-tools-small"),
        pytest.param(LONG, {}, "chat-large", "default", id="long-large"),
        pytest.param(SHORT, {"tools": TOOLS}, "chat-large", "default", id="tools-large"),
        pytest.param(HARD, {}, "chat-large", "hard-prompts", id="classifier-hard-large"),
    ],
)
def test_chat_auto_chooses_by_its_rules_and_says_so(
    gateway: Gateway, prompt: str, extra: dict[str, Any], target: str, rule: str
) -> None:
    assert ask(gateway, prompt, **extra) == (target, target, f"chat-auto/{rule}")


def test_a_streamed_answer_names_the_target_and_the_rule(gateway: Gateway) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="chat-auto", messages=[{"role": "user", "content": HARD}], max_tokens=4, stream=True
    )
    assert raw.headers["X-TokenFleet-Model"] == "chat-large"
    assert raw.headers["X-TokenFleet-Route"] == "chat-auto/hard-prompts"
    chunks = list(raw.parse())
    assert chunks and all(c.model == "chat-large" for c in chunks)


def test_a_tenant_not_allowed_the_route_is_refused(gateway: Gateway) -> None:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client(gateway, OTHER_KEY).chat.completions.create(
            model="chat-auto", messages=[{"role": "user", "content": SHORT}], max_tokens=2
        )
    assert refused.value.code == "model_not_allowed"
    # and the route is no way around allowedModels for a direct name
    with pytest.raises(openai.PermissionDeniedError):
        client(gateway).chat.completions.create(
            model="chat-small", messages=[{"role": "user", "content": SHORT}], max_tokens=2
        )


def test_the_models_list_shows_the_routes_the_tenant_may_use(gateway: Gateway) -> None:
    mine = {m.id for m in client(gateway).models.list()}
    assert mine == {"chat-auto", "chat-blind", "chat-split", "chat-broken"}
    assert client(gateway).models.retrieve("chat-auto").id == "chat-auto"
    assert {m.id for m in client(gateway, OTHER_KEY).models.list()} == {"chat-small"}


def test_weights_split_traffic(gateway: Gateway) -> None:
    served = Counter(ask(gateway, SHORT, model="chat-split")[1] for _ in range(200))
    # 1:3 → chat-small expects 50 of 200; binomial sd ≈ 6.1, so 30..70 is over 3 sd each way
    assert 30 <= served["chat-small"] <= 70 and served["chat-small"] + served["chat-large"] == 200
    for target, n in served.items():
        assert metric(gateway, names.ROUTE_DECISIONS, route="chat-split", target=target) == n


def test_the_decision_counter_and_usage_name_rule_and_target(gateway: Gateway) -> None:
    before = metric(
        gateway, names.ROUTE_DECISIONS, route="chat-auto", rule="hard-prompts", target="chat-large"
    )
    served = metric(gateway, names.REQUESTS, model="chat-large", outcome="served")
    assert ask(gateway, HARD)[2] == "chat-auto/hard-prompts"
    after = metric(
        gateway, names.ROUTE_DECISIONS, route="chat-auto", rule="hard-prompts", target="chat-large"
    )
    assert after == before + 1
    assert metric(gateway, names.REQUESTS, model="chat-large", outcome="served") == served + 1
    assert metric(gateway, names.REQUESTS, model="chat-auto") == 0  # never the route's name
    assert metric(gateway, names.PROMPT_TOKENS, tenant="acme", model="chat-large") > 0


def test_without_classifier_weights_the_score_rules_do_not_match(gateway: Gateway) -> None:
    assert ask(gateway, HARD, model="chat-blind") == (
        "chat-small",
        "chat-small",
        "chat-blind/short-without-tools",
    )
    assert metric(gateway, names.ROUTE_CLASSIFIER_READY, route="chat-blind") == 0
    _, text = gateway.get("/metrics")
    assert f'{names.ROUTE_CLASSIFIER_READY}{{namespace="",route="chat-auto"}} 1.0' in text


def test_a_route_to_a_model_nothing_serves_is_a_clear_503(gateway: Gateway) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        ask(gateway, SHORT, model="chat-broken")
    assert failed.value.status_code == 503 and failed.value.code == "route_target_not_found"
    assert failed.value.response.headers["x-should-retry"] == "false"
    assert failed.value.response.headers["X-TokenFleet-Route"] == "chat-broken/default"
