"""The operator's readiness probe against a real engine, run exactly as the kubelet runs it.

The probe is taken from a rendered worker Deployment (``desired.worker_deployment``): its exec
command, ``python3 -c <probe> <served model>``, with only the engine's port put where the pod's
8000 is, and killed after the probe's own ``timeoutSeconds`` as the kubelet does.

Matrix: a saturated replica — 12 long streams sent at once to a batch of 2 (a full batch and a
queue of 10), probed repeatedly while the queue stands: the pod must stay Ready as the kubelet
judges it (never failureThreshold failures in a row) with most probes passing; a wedged engine
(its EngineCore process stopped with SIGSTOP), busy and idle: the probe must fail
failureThreshold times in a row (NotReady), and pass again once the process continues (SIGCONT).
The probe's latency under saturation is printed.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from engine import lane
from engine.lane import JSON, MAX_NUM_SEQS
from support.cluster import wait_for
from support.objects import BASE
from support.vllm_engine import Engine
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import desired

pytestmark = lane.TIMEOUT

BURST = 12
#: Tokens each stream of the burst asks for: far more than the probes take to run, so the
#: queue stands throughout (the streams are closed once the probes are done).
LONG = 900
PROBES = 6


@dataclasses.dataclass(frozen=True, kw_only=True)
class Probe:
    """The rendered readiness probe, pointed at the lane's engine."""

    command: list[str]
    timeout: float  # timeoutSeconds: the kubelet counts a probe running longer as failed
    failures: int  # failureThreshold: this many failures in a row make the pod NotReady


def rendered_probe(engine: Engine) -> Probe:
    """The readiness probe of the Deployment the operator renders for a model served under the
    engine's name."""
    model = {**BASE["ModelDeployment"], "model": {"name": engine.name}}
    manifest = desired.worker_deployment(
        namespace="lane",
        pool_name="cpu",
        pool=InferencePoolSpec.model_validate(BASE["InferencePool"]),
        model=ModelDeploymentSpec.model_validate(model),
        owner=desired.Owner(kind="ModelDeployment", name="m", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    probe = manifest["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    command = [
        part.replace(f"127.0.0.1:{desired.HTTP_PORT}", f"127.0.0.1:{engine.port}")
        for part in probe["exec"]["command"]
    ]
    assert command != probe["exec"]["command"], "the probe no longer dials 127.0.0.1:8000"
    return Probe(
        command=command,
        timeout=float(probe["timeoutSeconds"]),
        failures=int(probe["failureThreshold"]),
    )


def probe(engine: Engine) -> tuple[bool, float]:
    """Run the probe once as the kubelet does: (passed, seconds it took)."""
    rendered = rendered_probe(engine)
    start = time.monotonic()
    try:
        done = subprocess.run(
            rendered.command, capture_output=True, timeout=rendered.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - start
    return done.returncode == 0, time.monotonic() - start


def queue(engine: Engine) -> tuple[float, float]:
    """(running, waiting) requests in the engine now."""
    return engine.sample("vllm:num_requests_running"), engine.sample("vllm:num_requests_waiting")


@pytest.fixture
def burst(engine: Engine) -> Iterator[list[socket.socket]]:
    """BURST long streams released at once; closed (the engine aborts them) afterwards."""
    body = {"model": engine.name, "prompt": "saturate " * 20, "max_tokens": LONG}
    body |= {"ignore_eos": True, "stream": True}
    start, sockets = threading.Barrier(BURST), []

    def stream() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=120)
        conn.connect()
        sockets.append(conn.sock)
        start.wait()
        conn.request("POST", "/v1/completions", json.dumps(body), JSON)
        response = conn.getresponse()
        while response.readline():
            pass

    threads = [threading.Thread(target=stream, daemon=True) for _ in range(BURST)]
    for t in threads:
        t.start()
    yield sockets
    for s in sockets:
        s.shutdown(socket.SHUT_RDWR)
    wait_for("the burst to be aborted", lambda: queue(engine) == (0, 0), timeout=30)


def test_the_readiness_probe_passes_on_a_full_batch_with_a_queue(
    engine: Engine, burst: list[socket.socket]
) -> None:
    wait_for(
        "a full batch and a queue",
        lambda: queue(engine) == (MAX_NUM_SEQS, BURST - MAX_NUM_SEQS),
        timeout=60,
    )
    results = []
    for _ in range(PROBES):
        results.append(probe(engine))
        running, waiting = queue(engine)
        assert running == MAX_NUM_SEQS and waiting > 0, "the probe ran on a replica with room"
    latencies = [seconds for _, seconds in results]
    passed = [ok for ok, _ in results]
    print(
        f"probe under saturation: {sum(passed)} of {PROBES} passed, median "
        f"{statistics.median(latencies):.2f} s, max {max(latencies):.2f} s"
    )
    # Ready as the kubelet judges it: never failureThreshold failures in a row
    in_a_row = max(len(run) for run in "".join("x" if ok else "-" for ok in passed).split("x"))
    assert in_a_row < rendered_probe(engine).failures, results
    assert sum(passed) > PROBES // 2, results  # and mostly by passing, not by luck


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_the_readiness_probe_fails_while_the_engine_core_is_stopped_and_passes_after(
    engine: Engine, busy: bool
) -> None:
    streams = []
    if busy:  # two streams in the batch, one more waiting
        body = {"model": engine.name, "prompt": "wedge", "max_tokens": LONG, "ignore_eos": True}
        for _ in range(MAX_NUM_SEQS + 1):
            conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=120)
            payload = json.dumps({**body, "stream": True})
            conn.request("POST", "/v1/completions", payload, JSON)
            streams.append(conn)
        wait_for("a busy engine", lambda: queue(engine)[0] == MAX_NUM_SEQS, timeout=60)
    core = engine.core_pid()
    os.kill(core, signal.SIGSTOP)
    try:  # failureThreshold probes in a row: what turns the pod NotReady
        wedged = [probe(engine) for _ in range(rendered_probe(engine).failures)]
        health = engine.get("/health")  # what a /health probe would have seen meanwhile
    finally:
        os.kill(core, signal.SIGCONT)
    for conn in streams:
        conn.close()
    wait_for("the engine to be idle", lambda: queue(engine) == (0, 0), timeout=30)
    recovered, _ = probe(engine)
    assert not any(ok for ok, _ in wedged), f"a probe passed on a stopped engine core: {wedged}"
    assert health == b""  # vLLM's /health answers 200 for a stopped core: no use as a probe
    assert recovered
