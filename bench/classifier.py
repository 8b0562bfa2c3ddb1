"""What a ModelRoute's classifier and rule table cost per request, and how accurate the example's
classifier is on prompts it never saw.

Cost: the shipped chat-auto weights (examples/09-model-routes/classifier-configmap.yaml) score
prompts of five sizes — a short question, a 300-character chat turn, 2,000 characters (about
the most the classifier reads, 2,048), 20,000 (cut to 2,048) — timed one call at a time
with perf_counter_ns, p50 and p99 in microseconds. Then the chat-auto rule table's decision
(``model_routes.choose``) with a score in hand, and a long prompt's whole route decision
(score + choose), and the gateway's whole route step (``model_routing.direct``) for a chat turn
sent to chat-auto and for one sent by a model's own name. Nothing here talks to a network:
this is the work the gateway adds per routed request, before admission.

Accuracy: ``tokenfleet route train-classifier``'s held-out figures on the example's synthetic
prompts for seeds 0-9 (each seed holds out different templates), so one lucky split is not
the figure.

    .venv/bin/python bench/classifier.py [--calls 3000] [--seeds 10]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tokenfleet import native
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.gateway import catalog, model_routing, route_training
from tokenfleet.gateway.config import StaticConfig
from tokenfleet.gateway.policy import bodies, classifier, model_routes
from tokenfleet.gateway.policy import classifier_training as training
from tokenfleet.gateway.policy.rejections import Rejected

EXAMPLE = Path(__file__).resolve().parents[1] / "examples/09-model-routes"
SENTENCE = (
    "Explain, step by step, how the scheduler of our inference gateway should react when a "
    "zone is lost while a canary is at fifty percent, and what the operator must record. "
)


def _timed(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """p50 and p99 of one call, in microseconds."""
    for _ in range(min(200, calls)):  # warm caches and the allocator
        call()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1000)
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49], cuts[98]


def _weights() -> classifier.HashedNgrams:
    doc = yaml.safe_load((EXAMPLE / "classifier-configmap.yaml").read_text())
    return classifier.parse(doc["data"]["weights.json"])


def _route() -> model_routes.Route:
    doc = yaml.safe_load((EXAMPLE / "route.yaml").read_text())
    return model_routes.compile_route(ModelRouteSpec.model_validate(doc["spec"]))


def cost(calls: int) -> None:
    model, route = _weights(), _route()
    print(f"classifier: {len(model.weights)} weights; compiled cores active: {native.active()}")
    print(f"{'work':<34}{'p50 µs':>10}{'p99 µs':>10}")
    prompts = {
        "score, short question (31 chars)": "What is the capital of Norway?",
        "score, a chat turn (300 chars)": (SENTENCE * 3)[:300],
        "score, 2,000 chars": (SENTENCE * 20)[:2000],
        "score, 20,000 chars (cut to 2,048)": (SENTENCE * 140)[:20000],
    }
    for name, text in prompts.items():
        p50, p99 = _timed(functools.partial(model.score, text), calls)
        print(f"{name:<34}{p50:>10.1f}{p99:>10.1f}")
    facts = model_routes.Facts(tenant="acme", prompt_tokens=120, max_tokens=256, score=0.3)
    p50, p99 = _timed(lambda: model_routes.choose(route, facts=facts, draw=0.5), calls)
    print(f"{'choose (chat-auto, score given)':<34}{p50:>10.1f}{p99:>10.1f}")
    text = prompts["score, 2,000 chars"]

    def decide() -> model_routes.Decision:
        scored = model_routes.Facts(
            tenant="acme", prompt_tokens=500, max_tokens=256, score=model.score(text)
        )
        return model_routes.choose(route, facts=scored, draw=0.5)

    p50, p99 = _timed(decide, calls)
    print(f"{'route decision, 2,000 chars':<34}{p50:>10.1f}{p99:>10.1f}")
    step(calls, prompts["score, a chat turn (300 chars)"])


def step(calls: int, text: str) -> None:
    """The gateway's whole route step (``model_routing.direct``: the route's look-up, the
    facts with the score of the latest user turn, the decision, the body for the target) on a
    static catalog with the example's route and ConfigMap, against a request by a model's own
    name (the look-up that finds no route)."""
    route = yaml.safe_load((EXAMPLE / "route.yaml").read_text())
    cm = yaml.safe_load((EXAMPLE / "classifier-configmap.yaml").read_text())
    served = catalog_of(route["spec"], cm["data"])
    tenant = next(iter(served.tenants_by_key_hash.values()))
    for name, model in (
        ("route step, chat turn (chat-auto)", "chat-auto"),
        ("route step, a model's own name", "chat-small"),
    ):
        body = {"model": model, "messages": [{"role": "user", "content": text}]}
        parsed = bodies.parse(body, "chat")
        assert not isinstance(parsed, Rejected)

        def direct(parsed: bodies.Parsed = parsed) -> object:
            return model_routing.direct(served, tenant, parsed, headers={}, draw=lambda: 0.5)

        p50, p99 = _timed(direct, calls)
        print(f"{name:<34}{p50:>10.1f}{p99:>10.1f}")


def catalog_of(route: dict[str, object], data: dict[str, str]) -> catalog.Catalog:
    config = StaticConfig.model_validate(
        {
            "models": [
                {"name": m, "endpoints": [f"http://{m}:8000"]} for m in ("chat-small", "chat-large")
            ],
            "tenants": [
                {"name": "acme", "apiKeyHashes": ["sha256:" + "a" * 64], "allowedModels": ["*"]}
            ],
            "routes": [route],
            "configMaps": {"chat-auto-classifier": data},
        }
    )
    return config.catalog()


def accuracy(seeds: int) -> None:
    examples = route_training.read(EXAMPLE / "prompts.jsonl")
    print(f"\nheld-out figures on {len(examples)} synthetic prompts, templates held out whole:")
    accuracies = []
    for seed in range(seeds):
        trained = training.train(examples, training.Settings(seed=seed))
        accuracies.append(trained.held_out.accuracy)
        print(f"  seed {seed}: {trained.held_out.line()}")
    print(
        f"  accuracy over {seeds} seeds: mean {statistics.mean(accuracies):.3f}, "
        f"min {min(accuracies):.3f}, max {max(accuracies):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    cost(args.calls)
    accuracy(args.seeds)
    print(json.dumps({"calls": args.calls, "seeds": args.seeds}))


if __name__ == "__main__":
    main()
