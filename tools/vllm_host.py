"""A real vLLM on this host, for build tools: serve a model directory, ask it, stop all of it.

Run from the vLLM venv's Python (``vllm`` is taken from beside ``sys.executable``). The engine
listens on a free loopback port, never the machine's own address; its environment keeps it small
on a shared 2-core machine (ENGINE_ENV). Stopping signals its whole process group: vLLM's engine
core and worker are processes of their own, and a SIGTERM to the API server alone while it is
still starting leaves them running (seen with vLLM 0.32.0).

    with vllm_host.serving(model_dir, args=["--served-model-name", "m"], logs=logs) as url:
        answer = vllm_host.post(url, "/v1/completions", {"model": "m", "prompt": "Hi"})
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: A 1 GiB KV cache (vLLM's CPU default reserves most of the host's memory), one compute thread
#: left unbound (a shared 2-core machine: "nobind" is 0.32.0's value for no binding), offline,
#: on loopback only.
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    # vLLM's executor otherwise advertises the machine's interface address for its message
    # queue (mq_connect_ip): the build may dial loopback only.
    "VLLM_HOST_IP": "127.0.0.1",
}
#: Seconds vLLM may take to answer /health: 20-31 s on an idle 2-core machine, 2-4 minutes
#: measured while other engines and builds shared its cores.
READY_TIMEOUT = 600.0
#: Seconds a stopping engine gets before its process group is killed.
STOP_TIMEOUT = 60.0
#: Seconds one request may take (a golden answer takes well under one).
REQUEST_TIMEOUT = 60.0


def free_port() -> int:
    """A free loopback port (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(model_dir: Path, *, args: Sequence[str], logs: Path) -> Iterator[str]:
    """``vllm serve model_dir ARGS`` on a free loopback port while the block runs; yields its
    base URL. The engine's output goes to ``logs/vllm-<model dir>.log``."""
    port = free_port()
    log = logs / f"vllm-{model_dir.name}.log"
    vllm = Path(sys.executable).parent / "vllm"
    command = [str(vllm), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    command += args
    print("  $", " ".join(command), flush=True)
    started = time.monotonic()
    with log.open("wb") as out:
        engine = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENGINE_ENV},
            start_new_session=True,  # a process group of its own, stopped whole
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, engine, log)
        print(f"  ready in {time.monotonic() - started:.1f} s", flush=True)
        yield url
    finally:
        stop(engine)


def wait_ready(url: str, engine: subprocess.Popen[bytes], log: Path) -> None:
    """Return once /health answers 200; raise if the engine exits or takes too long."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if engine.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"vllm serve exited with {engine.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"vllm serve not ready in {READY_TIMEOUT:.0f} s (log: {log})")


def stop(engine: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the engine's whole process group, SIGKILL to what outlives STOP_TIMEOUT."""
    group = engine.pid  # a session leader's pid is its group's id
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        engine.poll()  # reaps the API server, so a zombie does not hold the group open
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(group, signal.SIGKILL)
    engine.wait()


def post(url: str, path: str, body: dict[str, object]) -> dict[str, Any]:
    """POST ``body`` as JSON to the engine; its JSON answer (raises on an HTTP error)."""
    request = urllib.request.Request(  # noqa: S310 - our own engine's URL, on loopback
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:  # noqa: S310
        answer: dict[str, Any] = json.load(response)
        return answer
