"""LoRA adapter placement, measured on the local platform and in the fleet simulator.

One scenario (bench/adapters/zipf-platform.yaml: 32 adapters with Zipf popularity on four
replicas that keep four loaded each) runs on ``make up``'s platform without the real node — a
real API server and operator, kwok nodes, one llm-d-inference-sim process and one real
adapter-loader sidecar per worker pod, the gateway in Kubernetes mode — with 32 signed
ModelAdapters, twice: placement ``Affinity`` (the gateway's adapter-aware placement) and
``LeastLoad`` (by load alone, loading wherever a request lands: what an adapter-unaware router
does). Before each run every adapter is unloaded from every replica, so both start cold. The
arrival trace is the simulator's own (same seed: the same times, sizes and adapters), replayed
open-loop as streamed completions. Then the simulator runs the same scenario with both
placements, its adapter load time set to the one the platform measured.

Figures, side by side: hit ratio (requests whose adapter was already loaded where they went),
loads and loads per minute (adapter load churn), evictions, and TTFT p50/p99.

    .venv/bin/python bench/adapters.py [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import sim_accuracy
import yaml
from sim_accuracy import MODEL as BASE
from sim_accuracy import NAMESPACE, REPO, Stack

from tokenfleet.api import labels
from tokenfleet.devstack import platform
from tokenfleet.signals import gateway as gw
from tokenfleet.signing import keys, verify
from tokenfleet.sim import traffic
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.scenario import Scenario

SCENARIO = REPO / "bench" / "adapters" / "zipf-platform.yaml"
TRUST = "bench-adapter-key"
PLACEMENTS = ("Affinity", "LeastLoad")
SIM_NAMES = {"Affinity": "affinity", "LeastLoad": "blind"}
_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})? ([0-9.e+-]+)$")


def adapter_name(rank: int) -> str:
    return f"bench-a{rank:02d}"


def signed_adapters(root: Path, count: int) -> tuple[Path, dict[str, tuple[Path, str]]]:
    """``count`` small signed adapters and the public key: name → (directory, digest)."""
    private, public = keys.generate(root / "keys")
    found = {}
    for rank in range(count):
        name = adapter_name(rank)
        folder = root / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))
        (folder / "adapter_model.safetensors").write_bytes(name.encode() * 256)
        digest = verify.sign(folder, private_key=private, signature=folder / "model.sig")
        found[name] = (folder, digest)
    return public, found


def manifests(
    scenario: Scenario, public: Path, adapters: dict[str, tuple[Path, str]], placement: str
) -> list[dict[str, Any]]:
    """sim_accuracy's trust Secret, pool and model, the model with LoRA slots and adapters;
    the adapters' trust Secret; one ModelAdapter per adapter, for the dev tenant."""
    objects = sim_accuracy.manifests(scenario)
    model = next(o for o in objects if o["kind"] == "ModelDeployment")
    slots = scenario.performance.max_loras
    model["spec"]["engine"]["lora"] = {"maxLoras": slots, "maxCpuLoras": slots, "maxLoraRank": 8}
    model["spec"]["adapters"] = {"trust": {"publicKey": {"name": TRUST}}, "placement": placement}
    meta = {"namespace": NAMESPACE}
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": TRUST, **meta},
            "stringData": {"public.pem": public.read_text()},
        }
    )
    for name, (folder, digest) in adapters.items():
        objects.append(
            {
                "apiVersion": "tokenfleet.io/v1alpha1",
                "kind": "ModelAdapter",
                "metadata": {"name": name, **meta},
                "spec": {
                    "base": BASE,
                    "servedName": name,
                    "artifact": {"uri": folder.as_uri(), "digest": digest},
                    "tenants": [platform.DEV_TENANT],
                },
            }
        )
    return objects


def metrics(stack: Stack) -> dict[str, float]:
    """The gateway's adapter counters, summed over adapters: ``name{label}`` → value."""
    with urllib.request.urlopen(stack.gateway + "/metrics", timeout=10) as page:
        text = page.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or not m[1].startswith("tokenfleet_gateway_adapter"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m[2] or ""))
        extra = found.get("placement") or found.get("outcome") or ""
        key = f"{m[1]}{{{extra}}}" if extra else m[1]
        out[key] = out.get(key, 0.0) + float(m[3])
    return out


def unload_everything(stack: Stack, pool: str) -> None:
    """Every replica cold again: each sidecar unloads what its engine holds."""
    pods = stack.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", f"{labels.POOL}={pool}", "-o", "json"
    )
    for pod in pods["items"]:
        base = f"http://{pod['status']['podIP']}:8002"
        with urllib.request.urlopen(base + "/v1/adapters", timeout=10) as listing:
            loaded = json.loads(listing.read())["adapters"]
        for entry in loaded:
            request = urllib.request.Request(
                base + "/v1/adapters/unload",
                data=json.dumps({"name": entry["name"]}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()


async def one_request(
    session: aiohttp.ClientSession, url: str, key: str, *, model: str, prompt: int, output: int
) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": "w " * prompt,
        "max_tokens": output,
        "stream": True,
        "ignore_eos": True,
    }
    start, first = time.monotonic(), None
    try:
        async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as r:
            if r.status != 200:
                await r.read()
                return {"outcome": f"http_{r.status}"}
            async for line in r.content:
                if line.startswith(b"data: ") and first is None:
                    first = time.monotonic()
    except (aiohttp.ClientError, TimeoutError):
        return {"outcome": "failed"}
    return {"outcome": "served", "ttft": (first or time.monotonic()) - start}


async def replay(stack: Stack, scenario: Scenario) -> list[dict[str, Any]]:
    url, key = stack.gateway + "/v1/completions", stack.api_key
    tasks = []
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        t0 = time.monotonic()
        for second in traffic.seconds(scenario):
            for at, prompt, output, adapter in zip(
                second.times, second.inputs, second.outputs, second.adapters, strict=True
            ):
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                model = adapter_name(adapter % traffic.ADAPTER_OFFSET) if adapter >= 0 else BASE
                tasks.append(
                    asyncio.create_task(
                        one_request(session, url, key, model=model, prompt=prompt, output=output)
                    )
                )
        return list(await asyncio.gather(*tasks))


def on_platform(stack: Stack, scenario: Scenario, placement: str) -> dict[str, Any]:
    (pool,) = scenario.pools
    stack.kubectl(
        "patch", "tfmodel", BASE, "-n", NAMESPACE, "--type", "merge",
        "-p", json.dumps({"spec": {"adapters": {"placement": placement}}}),
    )  # fmt: skip
    unload_everything(stack, pool.name)
    time.sleep(8)  # the gateway's adapter listings (every 3 s) see every replica cold
    before = metrics(stack)
    print(f"  {placement}: replaying {scenario.duration_seconds:.0f} s", flush=True)
    requests = asyncio.run(replay(stack, scenario))
    time.sleep(1)
    after = metrics(stack)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    placed = {
        k.split("{")[1].rstrip("}"): v
        for k, v in delta.items()
        if k.startswith(gw.ADAPTER_REQUESTS)
    }
    sent = sum(placed.values())
    served = [r["ttft"] for r in requests if r["outcome"] == "served"]
    minutes = scenario.duration_seconds / 60
    loads = delta.get(f"{gw.ADAPTER_LOADS}{{loaded}}", 0.0)
    load_count = delta.get(f"{gw.ADAPTER_LOAD_SECONDS}_count", 0.0)
    return {
        "requests": len(requests),
        "served": len(served),
        "outcomes": dict(collections.Counter(r["outcome"] for r in requests)),
        "placements": placed,
        "hit_ratio": placed.get("hit", 0.0) / sent if sent else 0.0,
        "loads": loads,
        "loads_per_minute": loads / minutes,
        "evictions": delta.get(gw.ADAPTER_EVICTIONS, 0.0),
        "mean_load_seconds": (
            delta.get(f"{gw.ADAPTER_LOAD_SECONDS}_sum", 0.0) / load_count if load_count else 0.0
        ),
        "ttft_p50": float(np.percentile(served, 50)) if served else 0.0,
        "ttft_p99": float(np.percentile(served, 99)) if served else 0.0,
    }


def in_simulator(scenario: Scenario, load_seconds: float) -> dict[str, dict[str, Any]]:
    perf = scenario.performance.model_copy(update={"adapter_load_seconds": load_seconds})
    tuned = scenario.model_copy(update={"performance": perf})
    out = {}
    for placement, routing in SIM_NAMES.items():
        result = Simulation(tuned, "tokenfleet", adapter_routing=routing).run()
        out[placement] = result.adapters
    return out


def wait_ready(stack: Stack, scenario: Scenario, names: list[str]) -> None:
    (pool,) = scenario.pools
    want = pool.initial_replicas or pool.spec.replicas.min
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = stack.kubectl("get", "tfpool", pool.name, "-n", NAMESPACE, "-o", "json")
        ready = (status.get("status") or {}).get("readyReplicas", 0)
        adapters = stack.kubectl("get", "tfadapter", "-n", NAMESPACE, "-o", "json")["items"]
        verified = sum(1 for a in adapters if (a.get("status") or {}).get("verified"))
        if ready >= want and verified >= len(names):
            return
        time.sleep(2)
    raise SystemExit(f"not ready after 300 s: {ready}/{want} replicas, {verified} verified")


def report(real: dict[str, dict[str, Any]], sim: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        f"{'placement':10} {'where':9} {'hit ratio':>9} {'loads':>6} {'loads/min':>9} "
        f"{'evictions':>9} {'TTFT p50':>9} {'TTFT p99':>9}"
    ]
    for placement in PLACEMENTS:
        for where, figures in (("platform", real[placement]), ("simulator", sim[placement])):
            lines.append(
                f"{placement:10} {where:9} {figures['hit_ratio']:9.1%} {figures['loads']:6.0f} "
                f"{figures['loads_per_minute']:9.1f} {figures['evictions']:9.0f} "
                f"{figures['ttft_p50']:8.3f}s {figures['ttft_p99']:8.3f}s"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / ".tokenfleet" / "bench" / "adapters")
    args = parser.parse_args()
    scenario = Scenario.model_validate(yaml.safe_load(SCENARIO.read_text()))
    count = scenario.streams[0].adapters.count if scenario.streams[0].adapters else 0
    work = Path(tempfile.mkdtemp(prefix="tf-bench-adapters-"))
    public, adapters = signed_adapters(work, count)
    print(f"starting the platform; {count} signed adapters in {work}", flush=True)
    real: dict[str, dict[str, Any]] = {}
    with Stack() as stack:
        objects = manifests(scenario, public, adapters, PLACEMENTS[0])
        stack.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        wait_ready(stack, scenario, list(adapters))
        time.sleep(10)  # the gateway's catalog, keys and listings
        for placement in PLACEMENTS:
            real[placement] = on_platform(stack, scenario, placement)
            print(f"  {placement}: {json.dumps(real[placement])}", flush=True)
    load_seconds = real[PLACEMENTS[0]]["mean_load_seconds"] or 0.02
    sim = in_simulator(scenario, load_seconds)
    lines = [
        f"bench/adapters.py — {scenario.description}; adapter load {load_seconds * 1e3:.1f} ms "
        "(measured on the platform, given to the simulator)",
        *report(real, sim),
    ]
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"platform": real, "simulator": sim, "load_seconds": load_seconds}, indent=2)
    )
    print(f"results {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
