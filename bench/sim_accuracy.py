"""How close the fleet simulator comes to the local platform: one scenario, run both ways.

Each scenario under bench/accuracy/ runs in the fleet simulator (``tokenfleet.sim``, the
``tokenfleet`` scaler) and, unchanged, on the local platform: a real API server, kwok nodes,
the operator scaling on Prometheus, the gateway in Kubernetes mode, one llm-d-inference-sim
process per worker pod. The scenario's pool spec is applied as the InferencePool; its replica
performance becomes the simulator's latency flags (``engine_args``); its arrival trace
(``tokenfleet.sim.traffic``, same seed) is replayed open-loop through the gateway with streamed
completions; its zone losses become node outages. Then both are reduced the same way: TTFT
p50/p99 and the share within SLO of every request, goodput (requests/s within SLO), ready
replicas over time and GPU-hours (replicas holding a GPU, integrated).

What this measures is the fleet: queueing, routing, admission, the scaling loop (scrape,
decision, scheduling, cold start) and zone-loss handling. Both run the same replica latency
model by construction, so it says nothing of how well that model fits a GPU (that is
``tokenfleet bench replica`` and ``tokenfleet.sim.calibrate``).

    .venv/bin/python bench/sim_accuracy.py [--scenario steady --scenario step ...] [--out DIR]
    .venv/bin/python bench/sim_accuracy.py --platform-from DIR    # the simulator only, again

``--engine vllm-cpu`` measures the replica model too, out of sample. It starts
``TOKENFLEET_ENGINE=vllm-cpu make up``'s platform in a state folder of its own (the chart on the
real node, example 10's CPU pool of real vLLM pods; ``down`` at the end), profiles the pool's
engine with ``tokenfleet bench replica`` against its pod, calibrates the simulator from that
profile (``tokenfleet.sim.calibrate``) and the engine's measured cold start, fits one constant
(the request path's time) on ``bench/accuracy/vllm-cpu/calibrate.yaml``'s run, and only then
runs the held-out scenarios (another seed, a burst, a scale-up from one engine to two), each
judged against the simulator with that calibration:

    .venv/bin/python bench/sim_accuracy.py --engine vllm-cpu
    .venv/bin/python bench/sim_accuracy.py --engine vllm-cpu --platform-from DIR   # sim again
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import yaml

from tokenfleet.api import labels
from tokenfleet.api.base import API_GROUP, API_VERSION
from tokenfleet.capacity import planning
from tokenfleet.devstack import platform, realnode
from tokenfleet.sim import traffic
from tokenfleet.sim.calibrate import calibrate
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Performance, Scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "bench" / "accuracy"
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
EXAMPLE_02 = REPO / "examples" / "02-model-deployment"
NAMESPACE = platform.DEV_NAMESPACE  # the dev tenant's: a tenant calls models of its namespace
MODEL = "acc-model"
#: The figures compared, and the error above which the simulator needs calibrating.
FIGURES = ("ttft_p50", "ttft_p99", "within_slo", "goodput", "mean_ready", "gpu_hours")
TOLERANCE = 0.10
#: Simulations per scenario (each a few tenths of a second): the simulator's spread.
SIM_RUNS = 10


# ---- the scenario as manifests ------------------------------------------------------------


def engine_args(perf: Performance) -> str:
    """llm-d-inference-sim flags that give a replica the simulator's latency model.

    The simulator prefills a prompt in ``prefill_per_token x tokens`` (its chunk's share of a
    step) and decodes one token per ``step_base`` for every running sequence. The engine
    simulator's per-token calculator does the same, without prefill stalling the decoders.
    """
    if perf.step_per_sequence_seconds:
        raise SystemExit(
            "stepPerSequenceSeconds must be 0: llm-d-inference-sim's load factor "
            "(--time-factor-under-load) is not the simulator's per-sequence term"
        )
    return (
        f"--latency-calculator per-token --time-to-first-token 0s --prefill-overhead 0s "
        f"--prefill-time-per-token {perf.prefill_per_token_seconds * 1e6:.0f}us "
        f"--inter-token-latency {perf.step_base_seconds * 1e3:.0f}ms --time-factor-under-load 1"
    )


def manifests(scenario: Scenario) -> list[dict[str, Any]]:
    """The trust Secret, the scenario's pool and a model on it with the scenario's engine."""
    trust = yaml.safe_load((EXAMPLE_02 / "trust-secret.yaml").read_text())
    example = yaml.safe_load((EXAMPLE_02 / "modeldeployment.yaml").read_text())
    artifact = {**example["spec"]["artifact"], "uri": (EXAMPLE_02 / "tiny-chat").as_uri()}
    (pool,) = scenario.pools
    perf = scenario.performance
    meta = {"namespace": NAMESPACE}
    return [
        {**trust, "metadata": {**trust["metadata"], **meta}},
        {
            "apiVersion": "tokenfleet.io/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": pool.name, **meta},
            "spec": pool.spec.model_dump(by_alias=True, exclude_defaults=True, mode="json"),
        },
        {
            "apiVersion": "tokenfleet.io/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {
                "name": MODEL,
                **meta,
                "annotations": {
                    labels.SIM_ARGS: engine_args(perf),
                    labels.SIM_COLD_START: str(perf.cold_start_seconds),
                },
            },
            "spec": {
                "model": {"name": MODEL},
                "pools": [pool.name],
                "engine": {"maxNumSeqs": perf.max_num_seqs, "maxModelLen": 4096},
                "artifact": artifact,
            },
        },
    ]


# ---- the local platform -------------------------------------------------------------------


class Stack:
    """``make up``'s platform (without the real node) on free ports, examples removed."""

    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="tf-accuracy-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    def __enter__(self) -> Stack:
        argv = [sys.executable, "-m", "tokenfleet.devstack", "run", "--state-dir", str(self.state)]
        argv += ["--bin-dir", str(BIN), "--ports", "auto", "--pod-octet", "auto"]
        argv += ["--operator", "--platform", "--no-real-node", "--die-with-parent"]
        log = (self.state / "stack.log").open("wb")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        info = self.state / "stack.json"
        while not info.exists():
            if self.process.poll() is not None:
                raise SystemExit((self.state / "stack.log").read_text()[-3000:])
            time.sleep(0.5)
        self.info = json.loads(info.read_text())
        # the examples make up applies would share the machine and the gateway with the run
        for example in ("02-model-deployment", "01-three-zone-pool"):
            self.kubectl("delete", "-f", str(REPO / "examples" / example), "--wait=true")
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=120)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.info["kubeconfig"]}

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.info['ports']['gateway']}"

    @property
    def api_key(self) -> str:
        return (self.state / "dev-api-key").read_text().strip()

    def kubectl(self, *args: str, stdin: str | None = None) -> Any:
        done = subprocess.run(
            [str(BIN / "kubectl"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return json.loads(done.stdout) if "-o" in args and "json" in args else done.stdout

    def zone_nodes(self, zone: str) -> list[str]:
        out = self.kubectl(
            "get", "nodes", "-l", f"topology.kubernetes.io/zone={zone}", "-o", "name"
        )
        return str(out).split()


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Sampler:
    """Once a second: the pool's ready replicas and the worker pods holding a GPU (through the
    API, not kubectl: a process a second would load the machine it measures)."""

    def __init__(self, stack: Stack, pool: str) -> None:
        from kubernetes import client, config

        api_client = config.new_client_from_config(stack.info["kubeconfig"])
        self.api = client.CoreV1Api(api_client)
        self.objects = client.CustomObjectsApi(api_client)
        self.pool = pool
        self.lost: set[str] = set()  # nodes down: their pods hold no GPU (as in the simulator)
        self.detected: list[float] = []  # seconds from each zone loss to the pool's ZoneLost
        self.ready: list[float] = []
        self.holding: list[float] = []
        self.cpu = cpu_busy()

    def machine_busy(self) -> float:
        """The machine's CPU use since the sampler started or was last reset (1.0: all cores)."""
        busy, total = cpu_busy()
        return (busy - self.cpu[0]) / (total - self.cpu[1]) if total > self.cpu[1] else 0.0

    def reset(self) -> None:
        self.ready.clear()
        self.holding.clear()
        self.cpu = cpu_busy()

    def sample(self) -> None:
        response = self.api.list_namespaced_pod(
            NAMESPACE, label_selector=f"{labels.POOL}={self.pool}", _preload_content=False
        )
        pods = json.loads(response.data)["items"]
        ready = holding = 0
        for p in pods:
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            node = p["spec"].get("nodeName")
            if node and node not in self.lost:
                holding += 1
            conditions = p["status"].get("conditions", [])
            if not p["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in conditions
            ):
                ready += 1
        self.ready.append(ready)
        self.holding.append(holding)

    def zone_lost(self) -> bool:
        """Whether the pool says Degraded/ZoneLost (polled 5 times a second: no kubectl)."""
        pool = self.objects.get_namespaced_custom_object(
            API_GROUP, API_VERSION, NAMESPACE, "inferencepools", self.pool
        )
        return any(
            c["type"] == "Degraded" and c["status"] == "True" and c.get("reason") == "ZoneLost"
            for c in (pool.get("status") or {}).get("conditions", [])
        )


def arrivals(scenario: Scenario) -> Iterator[tuple[float, int, int]]:
    """(time, prompt tokens, output tokens) of every request, as the simulator draws them."""
    for second in traffic.seconds(scenario):
        yield from zip(second.times, second.inputs, second.outputs, strict=True)


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    key: str,
    *,
    index: int,
    prompt: int,
    output: int,
    model: str = MODEL,
) -> dict[str, Any]:
    """A streamed completion: its outcome, TTFT and mean inter-token time."""
    body = {
        "model": model,
        # one token per word (the engine simulator's tokenizer); the first word makes every
        # prompt unique, so no two requests share a prefix (as the scenario has none)
        "prompt": f"r{index} " + "w " * (prompt - 1),
        "max_tokens": output,
        "stream": True,
        "ignore_eos": True,
    }
    start = time.monotonic()
    first = None
    chunks, finished = 0, False
    try:
        async with session.post(
            url, json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            if response.status != 200:
                await response.read()
                return {"outcome": "shed" if response.status in (429, 503) else "failed"}
            async for line in response.content:
                if line.startswith(b"data: [DONE]"):
                    finished = True
                if not line.startswith(b"data: ") or finished:
                    continue
                if b'"text":""' in line.replace(b" ", b""):
                    continue
                chunks += 1
                if first is None:
                    first = time.monotonic()
    except (aiohttp.ClientError, TimeoutError):
        return {"outcome": "failed"}
    end = time.monotonic()
    if first is None or not finished:  # cut off: no [DONE]
        return {"outcome": "failed"}
    return {
        "outcome": "served",
        "ttft": first - start,
        "itl": (end - first) / (output - 1) if output > 1 else 0.0,
    }


async def replay(
    stack: Stack, scenario: Scenario, sampler: Sampler, model: str = MODEL
) -> list[dict[str, Any]]:
    """The scenario's arrivals at their times (late ones count their lateness as TTFT)."""
    url, key = stack.gateway + "/v1/completions", stack.api_key
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    losses = sorted(scenario.zone_losses, key=lambda z: z.at)
    results: list[asyncio.Task[dict[str, Any]]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.monotonic()

        async def sample() -> None:
            tick = 0
            while True:
                await asyncio.sleep(max(0.0, t0 + tick - time.monotonic()))
                await asyncio.to_thread(sampler.sample)
                tick += 1

        async def lose() -> None:
            for loss in losses:
                await asyncio.sleep(max(0.0, t0 + loss.at - time.monotonic()))
                nodes = await asyncio.to_thread(stack.zone_nodes, loss.zone)
                sampler.lost.update(n.removeprefix("node/") for n in nodes)
                print(f"  {loss.at:5.0f} s: {loss.zone} lost ({len(nodes)} nodes)", flush=True)
                await asyncio.to_thread(
                    stack.kubectl, "label", "--overwrite", *nodes, f"{labels.SIMULATED_OUTAGE}=true"
                )
                lost_at = time.monotonic()
                while not await asyncio.to_thread(sampler.zone_lost):
                    await asyncio.sleep(0.2)
                sampler.detected.append(time.monotonic() - lost_at)
                print(f"  the operator reported it {sampler.detected[-1]:.1f} s later", flush=True)

        background = [asyncio.create_task(sample()), asyncio.create_task(lose())]
        for index, (at, prompt, output) in enumerate(arrivals(scenario)):
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            request = one_request(
                session, url, key, index=index, prompt=prompt, output=output, model=model
            )
            results.append(asyncio.create_task(request))
            if index % 500 == 0:
                print(f"  {at:5.0f} s: {index} requests sent", flush=True)
        done = await asyncio.gather(*results)
        for task in background:
            task.cancel()
    for loss in losses:  # the next scenario gets whole zones again
        stack.kubectl(
            "label", *stack.zone_nodes(loss.zone), f"{labels.SIMULATED_OUTAGE}-", "--overwrite"
        )
    return done


def on_platform(stack: Stack, scenario: Scenario) -> dict[str, Any]:
    (pool,) = scenario.pools
    initial = pool.initial_replicas or pool.spec.replicas.min
    stack.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests(scenario)))
    sampler = Sampler(stack, pool.name)
    deadline = time.monotonic() + 300
    while True:
        sampler.sample()
        if sampler.ready[-1] >= initial:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{scenario.name}: {sampler.ready[-1]}/{initial} ready after 300 s")
        time.sleep(1)
    time.sleep(10)  # the gateway's endpoints and Prometheus' first scrapes of every replica
    sampler.reset()
    print(f"  {initial} replicas ready; replaying {scenario.duration_seconds:.0f} s", flush=True)
    requests = asyncio.run(replay(stack, scenario, sampler))
    busy = sampler.machine_busy()
    stack.kubectl("delete", "-f", "-", "--wait=true", stdin=yaml.safe_dump_all(manifests(scenario)))
    return reduce(scenario, requests, sampler, busy)


def reduce(
    scenario: Scenario, requests: list[dict[str, Any]], sampler: Sampler, busy: float
) -> dict[str, Any]:
    """A platform run's figures, reduced as the simulator's are."""
    slo = scenario.slo_of(scenario.streams[0].cls)
    served = [r for r in requests if r["outcome"] == "served"]
    ttft = np.array([r["ttft"] for r in served] or [0.0])
    met = sum(
        1 for r in served if r["ttft"] <= slo.ttft_seconds and r["itl"] <= slo.inter_token_seconds
    )
    steps = len(sampler.holding)
    return {
        "arrived": len(requests),
        "served": len(served),
        "shed": sum(1 for r in requests if r["outcome"] == "shed"),
        "failed": sum(1 for r in requests if r["outcome"] == "failed"),
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p99": float(np.percentile(ttft, 99)),
        "within_slo": met / len(requests) if requests else 1.0,
        "goodput": met / scenario.duration_seconds,
        "ready": sampler.ready,
        "mean_ready": float(np.mean(sampler.ready[: int(scenario.duration_seconds)])),
        "gpu_hours": sum(sampler.holding) * scenario.performance.gpus / 3600 if steps else 0.0,
        "zone_loss_detected_after": sampler.detected,
        "machine_cpu_busy": busy,
    }


# ---- the simulator and the comparison ------------------------------------------------------


def simulated(result: Result, scenario: Scenario) -> dict[str, Any]:
    ((_, summary),) = result.classes.items()
    (series,) = result.timeline.values()
    arrived = summary["arrived"]
    return {
        "arrived": arrived,
        "served": summary["served"],
        "shed": summary["shed"] + summary["timed_out"],
        "failed": summary["failed"],
        "ttft_p50": summary["ttft_p50"],
        "ttft_p99": summary["ttft_p99"],
        "within_slo": summary["within_slo"],
        "goodput": summary["within_slo"] * arrived / scenario.duration_seconds,
        "ready": series["ready"],
        "mean_ready": float(np.mean(series["ready"][: int(scenario.duration_seconds)])),
        "gpu_hours": result.gpu_hours,
    }


def in_simulator(scenario: Scenario, runs: int = SIM_RUNS) -> dict[str, Any]:
    """The median of ``runs`` simulations of the same arrival trace with different routing and
    sampling draws (the platform's one run is one draw too), with each figure's range."""
    reduced = []
    for draw in range(runs):
        simulation = Simulation(scenario, "tokenfleet")
        simulation.rng.seed(draw)  # the trace is drawn by its own generators: unchanged
        reduced.append(simulated(simulation.run(), scenario))
    out: dict[str, Any] = {"arrived": reduced[0]["arrived"]}  # the trace: the same in every draw
    for key in ("served", "shed", "failed", *FIGURES):
        values = [r[key] for r in reduced]
        out[key] = float(np.median(values))
        out[f"{key}_range"] = [min(values), max(values)]
    curves = np.array([r["ready"] for r in reduced])
    out["ready"] = np.median(curves, axis=0).tolist()
    return out


def error(sim: float, real: float) -> float:
    """Relative error of the simulator's figure against the platform's."""
    return (sim - real) / real if real else (0.0 if sim == real else float("inf"))


def replica_error(sim: list[float], real: list[float]) -> float:
    """Mean absolute gap between the ready-replica curves, relative to the platform's mean."""
    n = min(len(sim), len(real))
    gap = np.abs(np.array(sim[:n]) - np.array(real[:n]))
    return float(gap.mean() / np.mean(real[:n])) if n else 0.0


def report(name: str, sim: dict[str, Any], real: dict[str, Any]) -> list[str]:
    lines = [
        f"{name}: {real['arrived']} requests, on the platform once, simulated {SIM_RUNS} times"
    ]
    lines.append(
        f"  {'figure':12} {'platform':>10} {'simulator':>10} {'error':>8}  simulator's range"
    )
    for figure in FIGURES:
        e = error(sim[figure], real[figure])
        low, high = sim[f"{figure}_range"]
        inside = "platform inside" if low <= real[figure] <= high else "platform outside"
        flag = "  > 10 %" if abs(e) > TOLERANCE else ""
        lines.append(
            f"  {figure:12} {real[figure]:10.4g} {sim[figure]:10.4g} {e * 100:7.1f}%"
            f"  {low:.4g}–{high:.4g} ({inside}){flag}"
        )
    curve = replica_error(sim["ready"], real["ready"])
    flag = "  > 10 %" if curve > TOLERANCE else ""
    lines.append(f"  {'ready curve':12} {'':>10} {'':>10} {curve * 100:7.1f}%{flag}")
    if "machine_cpu_busy" in real:
        lines.append(f"  the machine's CPU (both cores) was {real['machine_cpu_busy']:.0%} busy")
    if real.get("zone_loss_detected_after"):
        seconds = ", ".join(f"{d:.1f} s" for d in real["zone_loss_detected_after"])
        lines.append(f"  zone loss reported by the operator after {seconds} (ZoneLost)")
    lines.append(
        f"  outcomes: platform served {real['served']} shed {real['shed']} failed {real['failed']}"
        f"; simulator (median) served {sim['served']:.0f} shed {sim['shed']:.0f} "
        f"failed {sim['failed']:.0f}"
    )
    return lines


def plot(out: Path, runs: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.5), squeeze=False)
    for ax, (name, (sim, real)) in zip(axes[0], runs.items(), strict=True):
        ax.step(range(len(real["ready"])), real["ready"], where="post", label="platform")
        ax.step(range(len(sim["ready"])), sim["ready"], "--", where="post", label="simulator")
        ax.set_title(name)
        ax.set_xlabel("s")
        ax.set_ylabel("ready replicas")
        ax.legend()
    fig.tight_layout()
    path = out / "ready-replicas.png"
    fig.savefig(path, dpi=100)
    return path


# ---- the real engine (--engine vllm-cpu) ---------------------------------------------------

REAL_SCENARIOS = SCENARIOS / "vllm-cpu"
#: The one scenario whose platform run is fitted on (the request path's time, a constant); the
#: others are judged only, with the calibration fixed before they run.
CALIBRATION = "calibrate"
#: Judged only, in this order: the scale-up last, so its second engine outlives no scenario.
HELD_OUT = ("seed", "burst", "scale-up")
REAL_MODEL = "tiny-llama"  # example 10's ModelDeployment on the pool cpu-pool
#: `tokenfleet bench replica` against the engine's pod: closed-loop streams up to the engine's
#: batch (example 10: maxNumSeqs 8), each level this long, at the scenarios' mean sizes.
PROFILE_STREAMS = "1,2,4,8"
PROFILE_SECONDS = 15
PROFILE_INPUT_WORDS = 100
PROFILE_OUTPUT_TOKENS = 32
#: Idle before each scenario: the operator's rate signals read Prometheus over [1m], so the
#: previous scenario's tokens would otherwise still count (the simulator starts from nothing).
QUIET_SECONDS = 60
TOKENFLEET = Path(sys.executable).parent / "tokenfleet"


class RealStack(Stack):
    """`TOKENFLEET_ENGINE=vllm-cpu make up`'s platform (the chart on the real node, example 10's
    CPU pool of real vLLM pods) in a state folder of its own, on free ports and its own pod
    octet; stopped with `down` on the way out, whatever happened."""

    def __enter__(self) -> RealStack:
        argv = [sys.executable, "-m", "tokenfleet.devstack", "up", "--state-dir", str(self.state)]
        argv += ["--bin-dir", str(BIN), "--ports", "auto", "--pod-octet", "auto"]
        argv += ["--real-node", "--engine", "vllm-cpu"]
        print(f"  devstack up --state-dir {self.state} ...", flush=True)
        try:
            done = subprocess.run(
                argv, cwd=REPO, capture_output=True, text=True, timeout=1500, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"devstack up failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
            self.info = json.loads((self.state / "stack.json").read_text())
            # the simulated GPU pools make up applies would share the machine with the engines
            for example in ("02-model-deployment", "01-three-zone-pool"):
                self.kubectl("delete", "-f", str(REPO / "examples" / example), "--wait=true")
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.down()

    def down(self) -> None:
        argv = [sys.executable, "-m", "tokenfleet.devstack", "down", "--state-dir", str(self.state)]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
        print(f"  devstack down: {done.stdout.strip()} {done.stderr.strip()}", flush=True)


def live_pods(stack: Stack, pool: str) -> list[dict[str, Any]]:
    """The pool's pods not terminating and not finished."""
    pods = stack.kubectl("get", "pods", "-l", f"{labels.POOL}={pool}", "-o", "json")["items"]
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def ready(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's Ready condition when it is true."""
    for c in pod["status"].get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True":
            return dict(c)
    return None


def wait_replicas(
    stack: Stack, pool: str, count: int, timeout: float = 900
) -> list[dict[str, Any]]:
    """Until the pool has exactly ``count`` pods, all Ready."""
    deadline = time.monotonic() + timeout
    while True:
        pods = live_pods(stack, pool)
        if len(pods) == count and all(ready(p) for p in pods):
            return pods
        if time.monotonic() > deadline:
            raise SystemExit(f"{pool}: not {count} Ready pods after {timeout:.0f} s")
        time.sleep(2)


def cold_start(pod: dict[str, Any]) -> float:
    """Seconds from the pod's creation to Ready (verify, load, first probe), to the second."""
    condition = ready(pod)
    assert condition is not None
    created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    return (
        datetime.datetime.fromisoformat(condition["lastTransitionTime"]) - created
    ).total_seconds()


def profile_replica(pod: dict[str, Any], out: Path) -> planning.Profile:
    """`tokenfleet bench replica` against the engine's pod on the node's bridge (not the
    gateway): one replica's capacity profile."""
    ip = pod["status"]["podIP"]
    if ipaddress.ip_address(ip) not in ipaddress.ip_network(realnode.SUBNET):
        raise SystemExit(f"the engine pod's address {ip} is not on the bridge {realnode.SUBNET}")
    port = next(
        p["containerPort"]
        for c in pod["spec"]["containers"]
        for p in c.get("ports", [])
        if p.get("name") == "http"
    )
    argv = [str(TOKENFLEET), "bench", "replica", "--url", f"http://{ip}:{port}"]
    argv += ["--model", REAL_MODEL, "--max-num-seqs", "8", "--concurrency", PROFILE_STREAMS]
    argv += ["--seconds", str(PROFILE_SECONDS), "--input-words", str(PROFILE_INPUT_WORDS)]
    argv += ["--output-tokens", str(PROFILE_OUTPUT_TOKENS)]
    argv += ["--out", str(out / "profile.json"), "--plot", str(out / "profile.png")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    print("\n".join(line for line in done.stdout.splitlines() if "req/s" in line), flush=True)
    if done.returncode not in (0, 1):  # 1: no level meets the (default) SLO; the profile stands
        raise SystemExit(f"tokenfleet bench replica failed: {done.stderr[-2000:]}")
    return planning.Profile.model_validate(json.loads((out / "profile.json").read_text()))


def performed(scenario: Scenario, performance: Performance) -> Scenario:
    """The scenario with the calibrated replica."""
    return scenario.model_copy(update={"performance": performance})


def pool_manifest(scenario: Scenario) -> dict[str, Any]:
    (pool,) = scenario.pools
    return {
        "apiVersion": "tokenfleet.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": pool.name, "namespace": NAMESPACE},
        "spec": pool.spec.model_dump(by_alias=True, exclude_defaults=True, mode="json"),
    }


def on_real_platform(stack: Stack, scenario: Scenario) -> dict[str, Any]:
    """The scenario's pool spec applied to example 10's pool (its real engines stay), then
    its trace replayed through the chart's gateway to the model the pool serves."""
    (pool,) = scenario.pools
    initial = pool.initial_replicas or pool.spec.replicas.min
    # idle first, under the previous spec: applied at once, a spec allowing more replicas let
    # the previous scenario's last minute of queue waits scale it before it started
    print(f"  {QUIET_SECONDS} s idle (the operator's [1m] signals)", flush=True)
    time.sleep(QUIET_SECONDS)
    stack.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pool_manifest(scenario)))
    wait_replicas(stack, pool.name, initial)
    time.sleep(5)  # the operator's first decision on the new spec
    if len(live_pods(stack, pool.name)) != initial:
        raise SystemExit(f"{scenario.name}: the pool left {initial} replicas before it started")
    print(f"  {initial} replica(s) ready", flush=True)
    sampler = Sampler(stack, pool.name)
    sampler.reset()
    print(f"  replaying {scenario.duration_seconds:.0f} s", flush=True)
    requests = asyncio.run(replay(stack, scenario, sampler, REAL_MODEL))
    return reduce(scenario, requests, sampler, sampler.machine_busy())


def real_scenarios(names: list[str] | None) -> list[Scenario]:
    """The calibration scenario first, then the held-out ones."""
    chosen = names or list(HELD_OUT)
    ordered = [CALIBRATION] + [n for n in chosen if n != CALIBRATION]
    return [
        Scenario.model_validate(yaml.safe_load((REAL_SCENARIOS / f"{n}.yaml").read_text()))
        for n in ordered
    ]


def fit(
    profile: planning.Profile, cold: float, calibration: Scenario, real: dict[str, Any]
) -> tuple[Performance, dict[str, Any]]:
    """The replica from the profile and the measured cold start; the request path's time from
    the calibration scenario's TTFT p50 gap (the one figure fitted on a platform run)."""
    base = calibrate(profile, calibration.performance).model_copy(
        update={"cold_start_seconds": cold, "request_overhead_seconds": 0.0}
    )
    sim = in_simulator(performed(calibration, base))
    overhead = max(0.0, real["ttft_p50"] - sim["ttft_p50"])
    performance = base.model_copy(update={"request_overhead_seconds": overhead})
    inputs = {
        "profile": profile.to_wire(),
        "coldStartSeconds": cold,
        "fittedOnCalibrationRun": {
            "scenario": calibration.name,
            "platformTtftP50": real["ttft_p50"],
            "simulatorTtftP50WithoutOverhead": sim["ttft_p50"],
            "requestOverheadSeconds": overhead,
        },
        "performance": performance.model_dump(by_alias=True, mode="json"),
    }
    return performance, inputs


def run_real(args: argparse.Namespace) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Calibrate on the engine's profile and the calibration scenario, then run the held-out
    scenarios on the platform; the simulator's side comes after the platform is down."""
    scenarios = real_scenarios(args.scenario)
    calibration, held_out = scenarios[0], scenarios[1:]
    reals: dict[str, dict[str, Any]] = {}
    if args.calibration_from:  # held-out scenarios only, against a calibration already made
        inputs = json.loads((args.calibration_from / "calibration.json").read_text())
        (args.out / "calibration.json").write_text(json.dumps(inputs, indent=1))
        performance = Performance.model_validate(inputs["performance"])
        scenarios = held_out
        print("starting the real-engine platform ...", flush=True)
        with RealStack() as stack:
            for scenario in held_out:
                print(f"{scenario.name}: {scenario.description}", flush=True)
                reals[scenario.name] = on_real_platform(stack, scenario)
                save(args.out, scenario.name, reals[scenario.name])
    elif args.platform_from:
        inputs = json.loads((args.platform_from / "calibration.json").read_text())
        performance = Performance.model_validate(inputs["performance"])
        for scenario in scenarios:
            saved = json.loads((args.platform_from / f"{scenario.name}.json").read_text())
            reals[scenario.name] = saved["platform"]
    else:
        print("starting the real-engine platform ...", flush=True)
        with RealStack() as stack:
            (pod,) = wait_replicas(stack, calibration.pools[0].name, 1)
            cold = cold_start(pod)
            print(f"  the pool's first engine: created to Ready in {cold:.0f} s", flush=True)
            profile = profile_replica(pod, args.out)
            print(f"{calibration.name}: {calibration.description}", flush=True)
            reals[calibration.name] = on_real_platform(stack, calibration)
            save(args.out, calibration.name, reals[calibration.name])
            performance, inputs = fit(profile, cold, calibration, reals[calibration.name])
            (args.out / "calibration.json").write_text(json.dumps(inputs, indent=1))
            print(f"  calibrated: {json.dumps(inputs['performance'])}", flush=True)
            for scenario in held_out:
                print(f"{scenario.name}: {scenario.description}", flush=True)
                reals[scenario.name] = on_real_platform(stack, scenario)
                save(args.out, scenario.name, reals[scenario.name])
    return {
        s.name: (in_simulator(performed(s, performance)), reals[s.name])
        for s in scenarios
        if s.name in reals
    }


def save(out: Path, name: str, real: dict[str, Any], sim: dict[str, Any] | None = None) -> None:
    (out / f"{name}.json").write_text(json.dumps({"simulator": sim, "platform": real}, indent=1))


#: The figures the out-of-sample summary judges (issue #33): TTFT p50/p99, goodput, replicas
#: over time (the ready curve's gap) and GPU-hours (replica-hours of the CPU pool).
SUMMARY = ("ttft_p50", "ttft_p99", "goodput", "ready curve", "gpu_hours")


def summary(
    runs: dict[str, tuple[dict[str, Any], dict[str, Any]]], scenarios: dict[str, Scenario]
) -> list[str]:
    """Each held-out figure's error, their median and the worst (absolute). A pool whose
    replicas.min is its max fixes its replica figures by construction: they are shown, not
    counted."""
    rows: list[tuple[str, str, float, float, float, bool]] = []
    for name, (sim, real) in runs.items():
        if name == CALIBRATION:
            continue
        (pool,) = scenarios[name].pools
        fixed = pool.spec.replicas.min == pool.spec.replicas.max
        for figure in SUMMARY:
            if figure == "ready curve":  # the mean ready replicas, the curves' gap
                gap = replica_error(sim["ready"], real["ready"])
                rows.append((name, figure, sim["mean_ready"], real["mean_ready"], gap, fixed))
            else:
                e = error(sim[figure], real[figure])
                rows.append(
                    (name, figure, sim[figure], real[figure], e, fixed and figure == "gpu_hours")
                )
    if not rows:
        return []
    lines = ["out of sample (calibrated on the profile and calibrate.yaml only):"]
    lines.append(f"  {'scenario':10} {'figure':12} {'simulator':>10} {'platform':>10} {'error':>8}")
    for name, figure, sim_value, real_value, e, pinned in rows:
        note = "  (fixed by the pool: not counted)" if pinned else ""
        lines.append(
            f"  {name:10} {figure:12} {sim_value:10.4g} {real_value:10.4g} {e * 100:7.1f}%{note}"
        )
    counted = [r for r in rows if not r[5]]
    errors = [abs(r[4]) for r in counted]
    worst = max(counted, key=lambda r: abs(r[4]))
    lines.append(
        f"  median |error| {np.median(errors) * 100:.1f} % over {len(counted)} figures; "
        f"{sum(e <= TOLERANCE for e in errors)} within 10 %; worst {worst[0]} {worst[1]} "
        f"{worst[4] * 100:+.1f} %"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", action="append", help="name under bench/accuracy/")
    parser.add_argument("--out", type=Path, default=REPO / ".tokenfleet" / "bench" / "accuracy")
    parser.add_argument(
        "--platform-from",
        type=Path,
        help="a previous run's --out: compare the simulator with its platform figures again "
        "instead of running the platform (to calibrate)",
    )
    parser.add_argument(
        "--engine",
        choices=("simulator", "vllm-cpu"),
        default="simulator",
        help="vllm-cpu: real vLLM on the real node (scenarios under bench/accuracy/vllm-cpu/), "
        "the simulator calibrated from its replica profile and judged on held-out scenarios",
    )
    parser.add_argument(
        "--calibration-from",
        type=Path,
        help="with --engine vllm-cpu: a previous run's --out whose calibration.json to judge "
        "the held-out --scenario runs with (no profile, no calibration run)",
    )
    args = parser.parse_args()
    if args.engine == "vllm-cpu":
        if args.out == REPO / ".tokenfleet" / "bench" / "accuracy":
            args.out = args.out / "vllm-cpu"
        args.out.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        real_runs = run_real(args)
        for name, (sim, real) in real_runs.items():
            save(args.out, name, real, sim)
        print()
        for name, (sim, real) in real_runs.items():
            held = " (calibration: in sample)" if name == CALIBRATION else " (held out)"
            print("\n".join(report(name + held, sim, real)))
        known = {s.name: s for s in real_scenarios(list(real_runs))}
        print("\n".join(summary(real_runs, known)))
        print(f"\nplot {plot(args.out, real_runs)}; figures {args.out}/*.json")
        print(f"wall time {time.monotonic() - started:.0f} s")
        return 0
    names = args.scenario or [p.stem for p in sorted(SCENARIOS.glob("*.yaml"))]
    scenarios = [
        Scenario.model_validate(yaml.safe_load((SCENARIOS / f"{n}.yaml").read_text()))
        for n in names
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    if args.platform_from:  # calibrating: the simulator again against runs already made
        for scenario in scenarios:
            saved = json.loads((args.platform_from / f"{scenario.name}.json").read_text())
            runs[scenario.name] = (in_simulator(scenario), saved["platform"])
    else:
        print("starting the local platform ...", flush=True)
        with Stack() as stack:
            for scenario in scenarios:
                print(f"{scenario.name}: {scenario.description}", flush=True)
                runs[scenario.name] = (in_simulator(scenario), on_platform(stack, scenario))
    for name, (sim, real) in runs.items():
        (args.out / f"{name}.json").write_text(
            json.dumps({"simulator": sim, "platform": real}, indent=1)
        )
    print()
    for name, (sim, real) in runs.items():
        print("\n".join(report(name, sim, real)))
    print(f"\nplot {plot(args.out, runs)}; figures {args.out}/*.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
