"""The local platform's real engine (``TOKENFLEET_ENGINE=vllm-cpu make up``): a CPU pool of real
vLLM pods on the real node, serving the tiny signed model set ``tools/tiny_model.py`` makes at
build time (``make prepared``), verified, probed, drained and scraped like any worker.

The pods fetch their artifacts over the node's pod bridge from an artifact server on the
bridge's host address (:data:`ARTIFACT_URL`): the model set's folder, read-only. The signer's
public key becomes the Secret the example's ModelDeployment trusts. Pure (paths and argv); the
stack runs them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from tokenfleet.devstack import realnode

SIMULATOR = "simulator"
VLLM_CPU = "vllm-cpu"
ENGINES = (SIMULATOR, VLLM_CPU)
#: Where the CPU pool's worker pods fetch artifacts (example 10's manifests name it).
ARTIFACT_PORT = 8099
ARTIFACT_URL = f"http://{realnode.GATEWAY_IP}:{ARTIFACT_PORT}"
#: The example make up applies in this mode (its README runs the same commands).
EXAMPLE = "10-cpu-pool"
MODEL = "tiny-llama"


def models_dir() -> Path:
    """The current model set (tools/images.sh links it after tools/tiny_model.py made it)."""
    cache = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet"))
    return cache / "models" / "current"


def refusal(
    engine: str, *, real_node: bool, platform: bool, present: Callable[[Path], bool]
) -> str | None:
    """Why a stack with this engine cannot start, with the fix; None when it can. ``present``
    says whether a file of the model set exists (the shell's filesystem)."""
    if engine not in ENGINES:
        return f"TOKENFLEET_ENGINE must be one of {', '.join(ENGINES)}, not {engine!r}"
    if engine != VLLM_CPU:
        return None
    if not (real_node and platform):
        return (
            f"TOKENFLEET_ENGINE={engine} runs real vLLM pods on the real node: it needs the "
            "platform and the real node (as make up starts by default)"
        )
    models = models_dir()
    needed = [models / MODEL / "model.sig", models / "trust-secret.yaml"]
    absent = [str(p) for p in needed if not present(p)]
    if absent:
        return (
            f"TOKENFLEET_ENGINE={VLLM_CPU} needs the tiny model set ({', '.join(absent)} is "
            "missing): run `make prepared` (tools/images.sh makes it with tools/tiny_model.py)"
        )
    return None


def artifact_server_argv(models: Path) -> list[str]:
    """A read-only HTTP server of the model set on the bridge's host address only."""
    return [
        sys.executable,
        "-m",
        "http.server",
        "--bind",
        realnode.GATEWAY_IP,
        "--directory",
        str(models.resolve()),
        str(ARTIFACT_PORT),
    ]
