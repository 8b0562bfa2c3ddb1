"""Zero truncated streams: steady streaming load through the real gateway while a pool scales in
from 6 to 3 workers, while a canary is promoted (the old stable's workers go) and while the next
canary is aborted (its workers go). Every stream that started must end with ``data: [DONE]``;
the time each removed pod took from its deletion to its disappearance (the drain) is printed.
The node agent honours graceful deletion as a kubelet does (preStop drain, SIGTERM, SIGKILL at
the deadline), so this exercises the worker image's drain hook against simulated engines."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from test_rollouts import (  # the rollout journey's fixtures: operator, gateway, signed artifact
    POOL,
    Signed,
    create_key,
    gateway,
    model,
    phase_is,
    rollout_operator,
    secret,
    served,
    signed,
)

from support.cluster import Cluster, wait_for
from support.gateway import Gateway
from support.objects import manifest
from tokenfleet.api import labels

__all__ = ["gateway", "rollout_operator", "signed"]  # fixtures, used by name

#: ~40 tokens at 50 ms each: every stream lasts about 2 s, so removals always catch some.
SLOW_STREAMS = "--mode echo --time-to-first-token 20ms --inter-token-latency 50ms"
PROMPT = " ".join(f"word{i}" for i in range(40))


class Streams:
    """Background streaming completions; counts streams that ended with and without [DONE]."""

    def __init__(self, gateway: Gateway, key: str, model: str, threads: int = 6) -> None:
        self.url, self.key, self.model = gateway.url + "/v1/completions", key, model
        self.done = 0
        self.truncated: list[str] = []
        self.refused: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Streams:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _one(self) -> None:
        body = {"model": self.model, "prompt": PROMPT, "max_tokens": 64, "stream": True}
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            response = urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as exc:
            with self._lock:
                self.refused.append(exc.code)  # refused before any byte: nothing was cut
            time.sleep(0.2)
            return
        last = ""
        try:
            with response:
                for raw in response:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        last = line
        except OSError as exc:
            last = f"error: {exc}"
        with self._lock:
            if last == "data: [DONE]":
                self.done += 1
            else:
                self.truncated.append(last[:120])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._one()
            except OSError:  # could not connect at all: not a stream
                time.sleep(0.2)


def drains(cluster: Cluster, ns: str) -> list[tuple[str, float]]:
    """(how, seconds) of each worker pod of ``ns`` the node agent terminated, in order: its
    log line is the kubelet's "preStop hook completed" (how: Idle, Deadline or EngineGone)."""
    text = (cluster.state_dir / "stack.log").read_text(errors="replace")
    pattern = rf"terminated {re.escape(ns)}/\S+: preStop \(drain (\w+)\) ([\d.]+) s"
    return [(how, float(seconds)) for how, seconds in re.findall(pattern, text)]


def workers(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}={served(ns)}")["items"])


@pytest.mark.timeout(1200)  # three rollouts of a pool on a shared 2-core machine
def test_scale_in_promotion_and_abort_cut_no_stream(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    first = model(ns, signed, sim=SLOW_STREAMS, steps=[{"weight": 34, "holdSeconds": 3}])
    pool = manifest(
        "InferencePool",
        POOL,
        ns,
        {
            "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
            "replicas": {"min": 6, "max": 6},
            "drain": {"maxGenerationSeconds": 30},
        },
    )
    tenant = manifest(
        "Tenant",
        "team",
        ns,
        {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": [served(ns)]},
    )
    key_secret = secret("signing-key", signed.public_key)
    key_secret["metadata"]["namespace"] = ns
    cluster.apply(key_secret, pool, tenant, first)
    wait_for("the first revision promoted", lambda: phase_is(cluster, ns, "Promoted"), 240)

    def ready(n: int) -> bool:
        return (
            sum(
                1
                for p in workers(cluster, ns)
                if not p["metadata"].get("deletionTimestamp")
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions", [])
                )
            )
            == n
        )

    wait_for("6 workers ready", lambda: ready(6), timeout=240)
    hook = workers(cluster, ns)[0]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]
    assert "tokenfleet.worker.drain" in hook["command"]
    key = create_key(cluster, ns, "team")
    figures: dict[str, Any] = {}

    def phase(name: str, before: tuple[int, int]) -> None:
        time.sleep(3)  # a stream outlives a quick drain: count the ones that spanned it
        done = drains(cluster, ns)[before[1] :]
        figures[name] = {
            "streams": streams.done - before[0],
            "drains": [how for how, _ in done],
            "drain_s": sorted(seconds for _, seconds in done),
        }

    def mark() -> tuple[int, int]:
        return streams.done, len(drains(cluster, ns))

    def three_left() -> bool:
        return len(workers(cluster, ns)) == 3

    def canary(seed: str, **controls: bool) -> dict[str, Any]:
        steps = [{"weight": 34, "holdSeconds": 3 if seed == "7" else 600}]
        engine = {"extraArgs": ["--seed", seed]}
        return model(ns, signed, sim=SLOW_STREAMS, engine=engine, steps=steps, **controls)

    with Streams(gateway, key, served(ns)) as streams:
        wait_for("streams flowing", lambda: streams.done >= 12, timeout=120)

        start = mark()  # 1. scale in 6 → 3 under load
        scale = json.dumps({"spec": {"replicas": {"min": 3, "max": 3}}})
        cluster.kubectl("patch", "tfpool", POOL, "-n", ns, "--type=merge", "-p", scale)
        wait_for("3 workers left", lambda: three_left() and len(drains(cluster, ns)) >= 3, 180)
        phase("scale-in", start)
        costs = [
            (p["metadata"].get("annotations") or {}).get(
                "controller.kubernetes.io/pod-deletion-cost"
            )
            for p in workers(cluster, ns)
        ]
        assert all(c is not None for c in costs), costs  # set from their load before it
        figures["scale-in"]["kept_costs"] = costs

        start = mark()  # 2. a canary promoted: the old stable's workers go under load
        cluster.apply(canary("7"))
        wait_for("promotion", lambda: phase_is(cluster, ns, "Promoted"), timeout=300)
        wait_for("the old stable gone", lambda: three_left() and mark()[1] > start[1], 180)
        phase("promotion", start)

        start = mark()  # 3. the next canary aborted: its workers go under load
        cluster.apply(canary("8"))
        wait_for("the canary live", lambda: phase_is(cluster, ns, "Progressing"), 240)
        time.sleep(3)  # streams on the canary's workers
        cluster.apply(canary("8", abort=True))
        wait_for("rolled back", lambda: phase_is(cluster, ns, "RolledBack"), timeout=120)
        wait_for("the canary's workers gone", lambda: three_left() and mark()[1] > start[1], 180)
        phase("abort", start)
        time.sleep(2)
    print(
        f"streams done {streams.done}, truncated {len(streams.truncated)}, "
        f"refused {len(streams.refused)}; {json.dumps(figures)}"
    )
    assert streams.truncated == [], streams.truncated[:5]
    assert all(f["drains"] and set(f["drains"]) == {"Idle"} for f in figures.values()), figures
    assert all(f["streams"] > 0 for f in figures.values()), figures  # under load each time
