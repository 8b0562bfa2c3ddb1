"""A CPU pool's worker pod: what vLLM's CPU backend needs, derived from the pod's own requests.

Matrix: requests from the pool's accelerator or the ModelDeployment's engine.resources (which
win) × KV cache derived (memory − 4 GiB) or explicit (engine.kvCacheMemory) × CPU requests from
fractions to many cores → the rendered args (--kv-cache-memory-bytes N, --shutdown-timeout at
the drain bound, never --gpu-memory-utilization), env (TOKENFLEET_POOL_DEVICE=cpu,
OMP_NUM_THREADS, VLLM_CPU_OMP_THREADS_BIND=nobind), resources (cpu and memory requested, memory
limited, no GPU), selectors (no GPU product) and the CPU image; requests too small to hold a
KV cache, and tensor parallelism, are refused with the fix. Before CPU pools (commit 002786e)
every worker got --gpu-memory-utilization 0.9 and nvidia.com/gpu, which stops vLLM's CPU build
at startup, and `accelerator.kind` was an unknown field: this module fails there.
"""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.deployment import CPU_IMAGE, ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import cpu_workers, desired, devices

GIB = 2**30
ARTIFACT = {
    "uri": "file:///m",
    "digest": "sha256:" + "a" * 64,
    "trust": {"publicKey": {"name": "k"}},
}


def pool(**accelerator: Any) -> InferencePoolSpec:
    sized = {"kind": "CPU", "cpu": "4", "memory": "16Gi", **accelerator}
    return InferencePoolSpec.model_validate(
        {"accelerator": sized, "drain": {"maxGenerationSeconds": 90}}
    )


def model(**engine: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {"model": {"name": "tiny"}, "pools": ["cpu"], "artifact": ARTIFACT, "engine": engine}
    )


def render(cpu_pool: InferencePoolSpec, spec: ModelDeploymentSpec) -> dict[str, Any]:
    """The worker pod as the loop renders it: the spec fitted to its pool first."""
    fitted = devices.fit(spec, pools={"cpu": cpu_pool})
    assert fitted.misfit is None, fitted.misfit
    manifest = desired.worker_deployment(
        namespace="ns",
        pool_name="cpu",
        pool=cpu_pool,
        model=fitted.spec,
        owner=desired.Owner(kind="InferencePool", name="cpu", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    return dict(manifest["spec"]["template"]["spec"])


def container(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["containers"][0])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(pod)["env"]}


def test_a_cpu_pool_never_renders_a_gpu_share() -> None:
    pod = render(pool(), model())
    args = container(pod)["args"]
    assert "--gpu-memory-utilization" not in args
    assert flag(args, "--kv-cache-memory-bytes") == str(12 * GIB)
    assert flag(args, "--shutdown-timeout") == "90"
    assert container(pod)["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "16Gi"},
    }
    assert labels.GPU_RESOURCE not in str(container(pod)["resources"])
    assert labels.GPU_PRODUCT not in pod["nodeSelector"]
    assert container(pod)["image"] == CPU_IMAGE


@pytest.mark.parametrize(
    ("accelerator", "engine", "requests", "kv_bytes"),
    [
        pytest.param({}, {}, ("4", "16Gi"), 12 * GIB, id="pool-defaults"),
        pytest.param(
            {},
            {"resources": {"cpu": "8", "memory": "32Gi"}},
            ("8", "32Gi"),
            28 * GIB,
            id="engine-resources-win",
        ),
        pytest.param(
            {}, {"resources": {"memory": "6Gi"}}, ("4", "6Gi"), 2 * GIB, id="memory-only-override"
        ),
        pytest.param({"memory": "4.5Gi"}, {}, ("4", "4.5Gi"), GIB // 2, id="smallest-derived"),
        pytest.param({}, {"kvCacheMemory": "2Gi"}, ("4", "16Gi"), 2 * GIB, id="explicit-kv-cache"),
        pytest.param(
            {"memory": "20G"}, {}, ("4", "20G"), 20 * 10**9 - 4 * GIB, id="decimal-gigabytes"
        ),
    ],
)
def test_the_kv_cache_is_the_memory_request_less_the_engine_overhead(
    accelerator: dict[str, Any],
    engine: dict[str, Any],
    requests: tuple[str, str],
    kv_bytes: int,
) -> None:
    pod = render(pool(**accelerator), model(**engine))
    resources = container(pod)["resources"]
    assert (resources["requests"]["cpu"], resources["requests"]["memory"]) == requests
    assert resources["limits"] == {"memory": requests[1]}  # limit = request: no overcommit
    assert flag(container(pod)["args"], "--kv-cache-memory-bytes") == str(kv_bytes)


@pytest.mark.parametrize(
    ("cpu", "threads"),
    [
        pytest.param("500m", 1, id="half-a-core"),
        pytest.param("1", 1, id="one-core"),
        pytest.param("1500m", 1, id="one-and-a-half"),
        pytest.param("2", 1, id="two-cores-as-the-reference"),
        pytest.param("4", 3, id="four-cores"),
        pytest.param("7500m", 6, id="fractional"),
        pytest.param("64", 63, id="many-cores"),
    ],
)
def test_compute_threads_are_the_cpu_request_less_one_core(cpu: str, threads: int) -> None:
    rendered = env(render(pool(cpu=cpu), model()))
    assert rendered["OMP_NUM_THREADS"] == str(threads)
    assert rendered["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert rendered[cpu_workers.POOL_DEVICE_ENV] == "cpu"


@pytest.mark.parametrize("seconds", [1, 120, 3600])
def test_vllm_waits_for_in_flight_requests_as_long_as_the_drain_bound(seconds: int) -> None:
    drained = pool().model_copy(
        update={"drain": pool().drain.model_copy(update={"max_generation_seconds": seconds})}
    )
    pod = render(drained, model())
    assert flag(container(pod)["args"], "--shutdown-timeout") == str(seconds)
    assert pod["terminationGracePeriodSeconds"] == seconds + desired.SIGTERM_MARGIN_SECONDS


def test_engine_settings_and_adapters_render_as_on_gpu_pools() -> None:
    spec = ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "tiny", "aliases": ["t"]},
            "pools": ["cpu"],
            "artifact": ARTIFACT,
            "engine": {"maxModelLen": 1024, "lora": {"maxLoraRank": 8}, "dtype": "bfloat16"},
            "adapters": {},
        }
    )
    pod = render(pool(), spec)
    args = container(pod)["args"]
    assert args[:4] == [desired.MODEL_DIR, "--served-model-name", "tiny", "t"]
    assert flag(args, "--max-model-len") == "1024" and flag(args, "--dtype") == "bfloat16"
    assert flag(args, "--max-lora-rank") == "8" and flag(args, "--tensor-parallel-size") == "1"
    sidecar = pod["containers"][1]
    assert sidecar["image"] == CPU_IMAGE  # the adapter loader runs from the engine's image


@pytest.mark.parametrize(
    ("accelerator", "engine", "reason", "needle"),
    [
        pytest.param(
            {"memory": "4Gi"},
            {},
            "MemoryRequestTooSmall",
            "leaves 0 GiB for the KV cache",
            id="memory-all-overhead",
        ),
        pytest.param(
            {"memory": "4400Mi"},
            {},
            "MemoryRequestTooSmall",
            "request at least 4.5 GiB",
            id="below-the-smallest-kv-cache",
        ),
        pytest.param(
            {},
            {"kvCacheMemory": "13Gi"},
            "MemoryRequestTooSmall",
            "request at least 17 GiB",
            id="explicit-kv-cache-too-large",
        ),
        pytest.param(
            {},
            {"resources": {"memory": "3Gi"}},
            "MemoryRequestTooSmall",
            "engine.resources.memory",
            id="engine-override-too-small",
        ),
        pytest.param(
            {}, {"tensorParallelSize": 2}, "TensorParallelOnCpu", "set it to 1", id="tp-2"
        ),
    ],
)
def test_a_worker_that_cannot_be_sized_is_refused_with_the_fix(
    accelerator: dict[str, Any], engine: dict[str, Any], reason: str, needle: str
) -> None:
    fitted = devices.fit(model(**engine), pools={"cpu": pool(**accelerator)})
    assert fitted.misfit is not None
    assert fitted.misfit.reason == reason
    assert needle in fitted.misfit.message and "pool cpu" in fitted.misfit.message
    with pytest.raises(ValueError, match=reason):  # rendering one anyway is a caller's bug
        desired.device_parts(pool_name="cpu", pool=pool(**accelerator), model=fitted.spec)


def test_a_gpu_pool_takes_an_explicit_kv_cache_size_beside_its_share() -> None:
    args = desired.serve_args(model(kvCacheMemory="8Gi"))
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert flag(args, "--kv-cache-memory-bytes") == str(8 * GIB)
    assert "--kv-cache-memory-bytes" not in desired.serve_args(model())


def test_the_sizing_is_explained() -> None:
    worker = cpu_workers.size(pool(), model().engine, pool_name="cpu")
    assert isinstance(worker, cpu_workers.CpuWorker)
    assert worker.describe() == (
        "4 CPU and 16Gi per replica: KV cache 12 GiB (16Gi less 4 GiB of engine overhead), "
        "3 compute threads"
    )


def test_a_cpu_worker_runs_eager_unless_the_spec_asks_to_compile() -> None:
    """The CPU image has no C++ compiler (torch.compile's inductor needs one at run time):
    eager by default; extraArgs come last, so --no-enforce-eager wins for an image with g++."""
    args = container(render(pool(), model()))["args"]
    assert "--enforce-eager" in args
    compiled = container(render(pool(), model(extraArgs=["--no-enforce-eager"])))["args"]
    assert compiled.index("--no-enforce-eager") > compiled.index("--enforce-eager")
