"""Canary analysis on real measurements: simulated vLLM engines of three revisions (a stable
one, a slow canary, a good canary) serve real requests, Prometheus scrapes them labelled by
revision, the revision PromQL reads p99 TTFT, inter-token latency and request counts through
prometheus-api-client, and the pure judgment fails the slow canary on TTFT."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import yaml
from prometheus_api_client import PrometheusConnect

from support.cluster import Cluster, wait_for
from tokenfleet.api import labels
from tokenfleet.operator.policy import analysis
from tokenfleet.operator.policy.rollout import Outcome
from tokenfleet.operator.signals_source import PrometheusSignals

REQUESTS = 20


def engines(name: str, *, model: str, revision: str, sim_args: str) -> dict[str, Any]:
    pod_labels = {
        "app": name,
        labels.ROLE: labels.ROLE_WORKER,
        labels.POOL: "canary-pool",
        labels.MODEL: model,
        labels.REVISION: revision,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {labels.SIM_ARGS: sim_args}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.0",
                            "args": ["serve", f"/models/{model}", "--served-model-name", model],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {"limits": {labels.GPU_RESOURCE: "1"}},
                        }
                    ]
                },
            },
        },
    }


def ready_ip(cluster: Cluster, ns: str, app: str) -> str | None:
    for pod in cluster.get("pods", "-n", ns, "-l", f"app={app}")["items"]:
        conditions = pod["status"].get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return str(pod["status"]["podIP"])
    return None


def test_slow_canary_fails_on_ttft_from_real_metrics(cluster: Cluster, ns: str) -> None:
    model = f"canary-{uuid.uuid4().hex[:6]}"
    fast = "--time-to-first-token 20ms --inter-token-latency 2ms"
    revisions = {
        "stable": ("rev-stable", fast),
        "slow": ("rev-slow", "--time-to-first-token 300ms --inter-token-latency 2ms"),
        "good": ("rev-good", fast),
    }
    docs = [
        engines(app, model=model, revision=rev, sim_args=args)
        for app, (rev, args) in revisions.items()
    ]
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(docs))
    raw = PrometheusConnect(url=cluster.info["prometheus"], disable_ssl=True)
    for app, (revision, _) in revisions.items():
        ip = wait_for(f"{app} engine Ready", lambda a=app: ready_ip(cluster, ns, a), timeout=120)
        client = openai.OpenAI(base_url=f"http://{ip}:8000/v1", api_key="x", max_retries=0)
        # Histogram series appear with their first observation, and increase() needs a scrape
        # before the measured traffic: one warm-up request, then wait for its series.
        itl = f'vllm:inter_token_latency_seconds_count{{namespace="{ns}",revision="{revision}"}}'

        def scraped(q: str = itl, c: openai.OpenAI = client) -> Any:
            # keep observing until Prometheus has discovered the engine and seen a sample
            c.completions.create(model=model, prompt="hello there", max_tokens=16)
            return raw.custom_query(q)

        wait_for(f"{app} scraped", scraped, timeout=120, every=1.0)
        for _ in range(REQUESTS):
            client.completions.create(model=model, prompt="hello there", max_tokens=16)

    prom = PrometheusSignals(cluster.info["prometheus"])

    def sample(revision: str) -> analysis.Sample | None:
        got = prom.canary_sample(ns, model, revision, window_seconds=120)
        # increase() extrapolates over the window: close to, not exactly, the count sent.
        enough = got and got.requests >= REQUESTS * 0.8 and got.ttft_p99 is not None
        return got if enough else None

    stable = wait_for("stable's figures", lambda: sample("rev-stable"), timeout=120)
    slow = wait_for("slow canary's figures", lambda: sample("rev-slow"), timeout=120)
    good = wait_for("good canary's figures", lambda: sample("rev-good"), timeout=120)
    assert stable.ttft_p99 is not None and slow.ttft_p99 is not None
    assert slow.ttft_p99 > 0.25 > stable.ttft_p99, (slow, stable)
    assert stable.inter_token_p99 is not None
    assert stable.error_rate is None  # requests went straight to the engines, not the gateway

    # Ratios of 3: a shared 2-core machine jitters fast engines' p99 by more than 1.5x, while
    # the slow canary's TTFT is about 15x stable's.
    limits = analysis.Thresholds(min_samples=10, max_ttft_p99_ratio=3, max_inter_token_p99_ratio=3)
    failed = analysis.judge(slow, stable, limits)
    assert failed.outcome is Outcome.ANALYSIS_FAILED, failed.message
    assert "TTFT" in failed.message
    # Nothing breached, but without an error-rate series (no gateway here) a canary cannot pass.
    unproven = analysis.judge(good, stable, limits)
    assert unproven.outcome is Outcome.INSUFFICIENT_SAMPLES, (unproven.message, good, stable)
    assert "error rate" in unproven.message

    for app in revisions:
        cluster.kubectl("delete", "deployment", app, "-n", ns)
    wait_for(
        "the engines to be gone",
        lambda: not cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}={model}")["items"],
        timeout=120,
    )
